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

import pytest

from pytest_slurmflox.declared import HOME, IDENTITY

from ._cohort import across
from ._support import _q, declared, on_each, per_node, requirement

pytestmark = [pytest.mark.acceptance, pytest.mark.TI]


def _id_fields(text: str) -> dict[str, str]:
    return dict(re.findall(r"(uid|gid|groups)=(\S+)", text))


def test_task_identity_matches_the_login_identity(submit, workers, login, target):
    declared(target, *IDENTITY)
    at_login = login.run("id").check()
    res = on_each(submit, workers, "id")
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
    """No worker's /etc/passwd holds the user's name or the user's uid (a baked-in image account that collides
    with the site's uid is a local account for that user too: files and processes would carry its name outside
    Slurm's tasks). The name and uid are the login endpoint's; every worker is checked and each offender named."""
    user, uid = login.run("id -un && id -u").check().stdout.split()[-2:]
    # awk prints each /etc/passwd entry that names the user or holds the uid; "checked" proves the node answered
    script = f"awk -F: -v u={_q(user)} -v i={_q(uid)} '$1 == u || $3 == i' /etc/passwd && echo checked"
    res = on_each(submit, workers, script)
    seen = per_node(res)
    offenders = {node: [e for e in lines if e != "checked"] for node, lines in sorted(seen.items())}
    offenders = {node: entries for node, entries in offenders.items() if entries}
    answered = {node for node, lines in seen.items() if "checked" in lines}
    requirement(
        res.ok and answered == set(workers) and not offenders,
        f"no worker has an /etc/passwd entry named {user} or with uid {uid} (identity comes from Slurm); "
        + "; ".join(f"{node} has {entries}" for node, entries in offenders.items()),
        res,
    )


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
    path = f'{_q(f"{outdir}/ti-{run_id}-")}"$SLURMD_NODENAME"'
    step = across(submit, workers, f"touch {path} && chgrp {_q(ident.supp_group)} {path} && stat -c %U:%G:%u:%g {path}")
    at_login = login.run(
        " && ".join(
            f"printf '%s %s\\n' {_q(node)} $(stat -c %U:%G:%u:%g {_q(f'{outdir}/ti-{run_id}-{node}')})"
            for node in workers
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
    )
