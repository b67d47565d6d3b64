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
from pytest_slurmflox.run import quoted

from ._support import Mark, _q, declared, on_each, per_node, requirement

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
    for node in workers:
        path = f"{outdir}/ti-{run_id}-{node}"  # a value: quoted wherever it meets a shell
        mark = Mark.new()
        res = submit.srun(
            f"-N1 -n1 -w {node}",
            "bash -c "
            + _q(
                mark.wrap(
                    quoted("touch %s && chgrp %s %s && stat -c %%U:%%G:%%u:%%g %s", path, ident.supp_group, path, path)
                )
            ),
        )
        requirement(res.ok, f"a task on {node} can hand its file to the user's supplementary group", res)
        at_login = login.run("stat -c %U:%G:%u:%g", path).check()
        requirement(
            at_login.stdout.strip() == want == (mark.lines(res.stdout) or [""])[-1],
            f"{node}: owner and group seen the same on the worker and at the login endpoint ({want})",
            res,
            at_login,
        )
