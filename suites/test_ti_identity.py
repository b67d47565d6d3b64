"""TI: an unprivileged identity works end to end on workers that have no account for it.

Requirement: tasks run with the user's uid, primary gid and supplementary groups, and their names resolve, on every
worker, although no worker holds a local account for the user (identity is resolved at the login endpoint and
carried by Slurm's credential); files the user creates on the shared home carry the right owner and can be given
to a supplementary group.

Where the expectations come from: the identity the target file declares (``identity``: user, uid, gid,
supplementary group), and the login endpoint's own ``id`` (the submitting side), never a worker.
"""

from __future__ import annotations

import re
import secrets

import pytest

from pytest_slurmflox.base.run import quoted
from pytest_slurmflox.model.declared import HOME, IDENTITY

from ._capability import declared, requirement
from ._cohort import across, local_accounts, task_identities
from ._marks import per_node

pytestmark = [pytest.mark.acceptance, pytest.mark.TI]


def _id_fields(text: str) -> dict[str, str]:
    return dict(re.findall(r"(uid|gid|groups)=(\S+)", text))


def test_task_identity_matches_the_login_identity(request, submit, workers, login, target):
    declared(target, *IDENTITY)
    at_login = login.run("id").check()
    res = task_identities(request, submit, workers)  # the step T10's uid check judges too
    seen = per_node(res)
    lines = [text for node_lines in seen.values() for text in node_lines]
    requirement(res.ok and len(lines) == len(workers), "id ran on every worker", res)
    want = _id_fields(at_login.stdout)
    ident = target.spec.identity
    if ident:
        requirement(
            want.get("uid") == f"{ident.uid}({ident.user})" and want.get("gid", "").startswith(f"{ident.gid}("),
            f"the login identity is the declared {ident.user} {ident.uid}:{ident.gid}",
            at_login,
        )
    for node, texts in sorted(seen.items()):
        requirement(
            all(_id_fields(text) == want for text in texts),
            f"{node}: task identity (numbers and names) equals the login's",
            at_login,
            res,
        )
    if target.spec.identity and target.spec.identity.supp_group:
        ident = target.spec.identity
        requirement(
            f"{ident.supp_gid}({ident.supp_group})" in want.get("groups", ""),
            "the supplementary group is carried by name",
            at_login,
        )


def test_workers_hold_no_local_account_for_the_user(submit, workers, login):
    """No worker's resolver answers for the user's name, the user's uid or the user's group memberships from a
    source that keeps accounts on the worker itself (files, compat, extrausers, systemd...: nsslocal.py); a baked-in
    image account that collides with the site's uid is a local account for that user too. Each worker asks every
    source its nsswitch.conf lists, in one step; nss_slurm (``slurm``, which answers for the job's user during the
    step) or a directory answering is fine, and is named. The name and uid are the login endpoint's."""
    user, uid = login.run("id -un && id -u").check().stdout.split()[-2:]
    queries = [("passwd", user), ("passwd", uid), ("initgroups", user)]
    problems, answered, step = local_accounts(submit, workers, queries)
    requirement(
        not problems,
        f"no worker holds a local account for {user} (uid {uid}; identity comes from Slurm): " + "; ".join(problems),
        "answered by a non-local source: " + ("; ".join(answered) or "none"),
        step.result,
    )


@pytest.mark.per_worker
def test_shared_home_files_owned_correctly(submit, workers, login, expect, target, run_id):
    declared(target, HOME, *IDENTITY)
    if not expect.settings.worker_home_path:
        pytest.skip("missing capability shared-home: WORKER_HOME_PATH is empty")
    ident = target.spec.identity
    if not ident or not ident.supp_group:
        pytest.skip("missing capability supplementary-group: the target file names no supplementary group")
    outdir = submit.made_outdir()
    want = f"{ident.user}:{ident.supp_group}:{ident.uid}:{ident.supp_gid}"
    # one step: every worker hands its own file to the group; then one command at the login endpoint stats them all
    # (the path and the group are values, quoted; only $SLURMD_NODENAME is left for the task's shell to expand)
    # this check's own files (a killed run of the same id may have left files of the same run id behind)
    own = f"{outdir}/ti-{run_id}-{secrets.token_hex(4)}-"
    path = f'{quoted("%s", own)}"$SLURMD_NODENAME"'
    group = quoted("%s", ident.supp_group)
    step = across(submit, workers, f"touch {path} && chgrp {group} {path} && stat -c %U:%G:%u:%g {path}")
    at_login = login.run(
        " && ".join(
            quoted("printf '%%s %%s\\n' %s $(stat -c %%U:%%G:%%u:%%g %s)", node, own + node) for node in workers
        )
    )
    seen_at_login = dict(line.split(" ", 1) for line in at_login.stdout.splitlines() if " " in line)

    def judge(node: str, lines: list[str]) -> str | None:
        if lines[-1] != want or seen_at_login.get(node) != want:
            return f"its file is {lines[-1]!r} on the worker and {seen_at_login.get(node)!r} at the login endpoint"
        return None

    problems = step.wrong(judge)
    requirement(
        at_login.ok and not problems,
        f"every worker hands its file to the supplementary group, seen the same there and at the login endpoint "
        f"({want}): " + "; ".join(problems),
        step.result,
        at_login,
        workers=problems.workers,
    )
