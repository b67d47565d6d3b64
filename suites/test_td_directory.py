"""TD: a directory user works end to end; TDC: a change in the directory reaches the next job.

Requirement (TD): a user who exists only in the site's directory logs in to the login endpoint with a key, submits,
and every task runs with the uid, primary gid and supplementary groups the directory gives that user, by number and
by name; no worker's resolver answers anything about the user or its groups from a local source (files, compat,
systemd...; workers learn the identity from Slurm's credential, through nss_slurm, or from the directory).
Requirement (TDC, destructive and opt-in because it edits the directory): removing the user from a directory group
changes what the next job sees, and adding it back restores it.

Where the expectations come from: the target file's ``directory`` (URI, base DN, the user, the groups it must be in)
and the directory itself, queried by our code with ``ldapsearch`` from the admin endpoint (the login endpoint when
the target declares no admin login; a declared one that does not work FAILS): never NSS on the login endpoint,
never a worker. A target that declares no directory SKIPs naming the capability ``directory``; one that declares a
directory that does not answer FAILs.
"""

from __future__ import annotations

import dataclasses
import re

import pytest

from pytest_slurmflox.base.run import SSHRunner
from pytest_slurmflox.base.waits import poll_last
from pytest_slurmflox.cluster.gates import require
from pytest_slurmflox.harness.connection import login_runner
from pytest_slurmflox.model.directory import DirectoryIdentity, lookup, membership_ldif

from ._capability import requirement
from ._cohort import local_accounts
from ._marks import on_each, per_node

pytestmark = [pytest.mark.acceptance]

#: Slack beyond Slurm's GroupUpdateTime for a directory change to reach a fresh login's next job (a site's
#: nscd/sssd cache may add to it). Slurm caches a user's groups for GroupUpdateTime (slurm.conf, default 600 s).
PROPAGATION_S = 60.0


def _directory(target):
    require(target, "directory")
    return target.spec.directory


def _reader(target):
    """Where our code queries the directory from: the admin endpoint, else (no admin declared) the login endpoint,
    never a worker. A declared admin login that does not work is a FAIL naming it, never a silent fallback."""
    if target.spec.admin is None:
        return target.login
    require(target, "admin")
    return target.admin


def _expected(target) -> DirectoryIdentity:
    d = _directory(target)
    ident, evidence = lookup(_reader(target), d)
    requirement(not isinstance(ident, str), f"the directory at {d.uri} ({d.base}) describes {d.user}", str(ident))
    assert isinstance(ident, DirectoryIdentity)
    for res in evidence:
        res.check()
    return ident


def _fields(text: str) -> dict[str, object]:
    """``id`` output as uid, gid and the set of groups (order is not part of the identity)."""
    got: dict[str, object] = dict(re.findall(r"(uid|gid)=(\S+)", text))
    groups = re.search(r"groups=(\S+)", text)
    got["groups"] = set(groups.group(1).split(",")) if groups else set()
    return got


def _want(ident: DirectoryIdentity) -> dict[str, object]:
    fields = ident.id_fields()
    return {"uid": fields["uid"], "gid": fields["gid"], "groups": set(fields["groups"].split(","))}


def _fresh_login(target) -> SSHRunner:
    """A new key login as the target's user (not the session's kept connection: a login takes its groups once)."""
    e = target.spec.login
    observer = getattr(target.login, "observer", None)
    return login_runner(e, observer, where=f"fresh login({e.host})")


@pytest.mark.TD
def test_the_directory_holds_the_declared_user_and_groups(target):
    d = _directory(target)
    ident = _expected(target)
    requirement(
        target.spec.login.user == d.user,
        f"the login endpoint's user is the directory user {d.user}",
        f"login.user is {target.spec.login.user}",
    )
    for group in d.groups:
        requirement(group in ident.groups.values(), f"the directory puts {d.user} in group {group}", str(ident))


@pytest.mark.TD
def test_a_directory_user_logs_in_with_a_key_and_its_tasks_carry_the_directory_identity(target, submit, workers):
    want = _want(_expected(target))
    fresh = _fresh_login(target)
    try:
        at_login = fresh.run("id")
        requirement(at_login.ok, "the directory user logs in with its key", at_login)
        requirement(_fields(at_login.stdout) == want, f"the login endpoint resolves the directory's {want}", at_login)
        res = on_each(dataclasses.replace(submit, login=fresh), workers, "id")
    finally:
        fresh.close()
    seen = per_node(res)
    requirement(res.ok and sorted(seen) == sorted(workers), "a task ran on every worker", res)
    for node, lines in sorted(seen.items()):
        got = [_fields(line) for line in lines]
        requirement(
            all(g == want for g in got),
            f"{node}: the task's uid, gid and groups are the directory's, by number and name ({want})",
            res,
        )


@pytest.mark.TD
def test_no_worker_holds_the_directory_user_or_its_groups(target, submit, workers):
    """Each worker's resolver, every source its nsswitch.conf lists, in one step (nsslocal.py): no source that keeps
    accounts on the worker answers for the user, its uid, its groups (by name and gid) or its memberships; the
    directory or nss_slurm answering is what should happen, and is named."""
    ident = _expected(target)
    queries = [("passwd", ident.user), ("passwd", str(ident.uid)), ("initgroups", ident.user)]
    queries += [("group", name) for name in ident.groups.values()] + [("group", str(gid)) for gid in ident.groups]
    problems, answered, step = local_accounts(submit, workers, queries)
    requirement(
        not problems,
        f"no worker holds a local account or group for {ident.user} (uid {ident.uid}, groups "
        f"{','.join(ident.groups.values())}): the worker learns the identity from Slurm only: " + "; ".join(problems),
        "answered by a non-local source: " + ("; ".join(answered) or "none"),
        step.result,
    )


def _editor(target):
    """How this target's directory is changed: the declared ``directory.modify`` command on the admin endpoint,
    or the substrate's own primitive (local: ldapmodify on the controller); SKIP naming it when neither exists."""
    d = target.spec.directory
    if d.modify:
        require(target, "admin")
        return lambda ldif: target.admin.run(d.modify, input=ldif)
    if target.why_missing("directory-changes") is not None:
        pytest.skip("missing capability directory-admin: the target file declares no directory.modify command")
    return target.pool.modify_directory


def _group_update_time(target) -> float:
    """Slurm's GroupUpdateTime (how long it may keep a user's old groups), from ``scontrol show config``."""
    res = target.login.run("scontrol show config")
    found = re.search(r"^GroupUpdateTime\s*=\s*(\d+)", res.stdout, re.M)
    return float(found.group(1)) if found else 600.0


def _next_job_groups(target, submit, node: str, want: dict[str, object]):
    """A fresh login's next job on ``node``: its ``id`` fields, polled until they are ``want`` or Slurm's
    GroupUpdateTime plus :data:`PROPAGATION_S` has passed."""
    timeout = _group_update_time(target) + PROPAGATION_S

    def look():
        fresh = _fresh_login(target)
        try:
            res = on_each(dataclasses.replace(submit, login=fresh), [node], "id")
        finally:
            fresh.close()
        return [_fields(line) for line in per_node(res).get(node, [])], res

    return poll_last(
        look,
        lambda seen: seen[1].ok and seen[0] == [want],
        what=f"the next job on {node} to have ids {want}",
        timeout=timeout,
        interval=2,
    )


@pytest.mark.TDC
def test_a_directory_group_change_reaches_the_next_job(target, submit, workers):
    d = _directory(target)
    before = _expected(target)
    edit = _editor(target)
    supplementary = [g for gid, g in before.groups.items() if gid != before.gid]
    declared = [g for g in d.groups if g in supplementary]
    if not (declared or supplementary):
        pytest.skip(f"missing capability directory-group: the directory gives {d.user} no supplementary group")
    group = (declared or supplementary)[0]
    node = workers[0]
    removed = edit(membership_ldif(before.group_dns[group], d.user, add=False))
    requirement(removed.ok, f"the directory accepts removing {d.user} from {group}", removed)
    try:
        after = _expected(target)
        requirement(group not in after.groups.values(), f"the directory no longer puts {d.user} in {group}")
        got, res = _next_job_groups(target, submit, node, _want(after))
        requirement(got == [_want(after)], f"the next job on {node} no longer has {group} ({_want(after)})", res)
    finally:
        restored = edit(membership_ldif(before.group_dns[group], d.user, add=True))
    requirement(restored.ok, f"the directory accepts adding {d.user} back to {group}", restored)
    got, res = _next_job_groups(target, submit, node, _want(before))
    requirement(got == [_want(before)], f"after the change is undone the next job on {node} has {group} again", res)
