"""T2's Nix store check: each worker runs from exactly the store paths of the pinned generation, unmodified.

Two ways to know the store paths, never from the worker under test:

- local substrate: our code computes the pinned generation's store path (``nix-instantiate`` over our derivation,
  through the pool) and the substrate's store registered its NAR hash when it built it; the provider's record says
  where each worker's pin lives (its Nix profile). On each worker a task reads what that profile points at, the path
  its tasks were activated from, and recomputes the NAR hash of what it really has there;
- declared runtime (the target file's ``runtime`` section, no ``flox.lock_file``): Nix's NAR hash of the pinned
  generation the customer declares (``runtime.nar_hash``, ``nix-store -q --hash`` of it off the cluster; undeclared:
  NOT RUN naming the key). On each worker a task recomputes the NAR hash of what is really at the declared realized
  path and reads the path its tasks were activated from;
- Flox target: the generation's lock, ``$FLOX_ENV/manifest.lock`` (pytest_slurmflox.model.floxlock), must name, for the
  worker's system, exactly the store paths of the pinned generation's lock obtained off the cluster (the target's
  ``flox.lock_file``, or the Flox CLI on the operator's machine; neither: NOT RUN naming the key), be the same on
  every worker of the cohort, and each store path it names must pass ``nix-store --verify-path`` there. A worker
  without /nix or without the lock makes the check SKIP naming it.
"""

from __future__ import annotations

import base64

import pytest

from pytest_slurmflox.base.run import quoted
from pytest_slurmflox.cluster.gates import require
from pytest_slurmflox.model.floxlock import LockError, cohort_lock_problems, nix_system, parse_lock, pinned_lock
from pytest_slurmflox.substrates.local.nix import WORKER_NAR_HASH_SH

from ._capability import requirement
from ._marks import on_each, per_node
from ._profile import PROFILE_DIR
from ._records import runtimes


def _tagged(lines: list[str]) -> dict[str, str]:
    """``tag value`` lines -> {tag: value} (the first word is the tag)."""
    out = {}
    for line in lines:
        tag, _, value = line.partition(" ")
        out.setdefault(tag, value)
    return out


def local_store_problems(target, submit, workers, environment: str) -> tuple[str, list[str], object]:
    """The local check: (expected store path, one problem per worker naming it and the path, evidence)."""
    require(target, "nix-store-record")  # the local provider's store (pytest_slurmflox.model.abilities.NixStoreRecord)
    pool = target.pool
    expected = pool.expected_store_path(environment)  # ours: nix-instantiate over our derivation
    ok, detail, registered = pool.store_verification(expected)
    requirement(ok, f"nix-store --verify-path {expected} passes in the substrate's store", detail)
    profiles = {node: pool.nix_profile(node) for node in workers}  # the provider's record of where each pin lives
    cases = " ".join(quoted("%s) p=%s;;", node, profile) for node, profile in profiles.items())
    script = (
        f'case "$SLURMD_NODENAME" in {cases} *) p=/nonexistent;; esac; '
        't=$(/usr/bin/readlink -e "$p") || t=NONE; echo "profile $t"; '
        f'a=$(/usr/bin/cat {quoted("%s", PROFILE_DIR)}/realized-path 2>/dev/null) || a=NONE; echo "active $a"; '
        + quoted(
            'if [ "$t" != NONE ]; then echo "nar $(/bin/bash -c %s nar "$t" 2>&1 | tail -n 1)"; fi', WORKER_NAR_HASH_SH
        )
    )
    res = on_each(submit, workers, script)
    seen = per_node(res)
    problems = []
    for node, profile in profiles.items():
        got = _tagged(seen.get(node, []))
        if not got:
            problems.append(f"{node}: no answer from the worker")
            continue
        pinned = got.get("profile")
        if pinned != expected:
            problems.append(f"{node}: its Nix profile {profile} points at {pinned}, not {environment}'s {expected}")
        elif got.get("nar") != registered:
            problems.append(
                f"{node}: {expected} on the worker has NAR hash {got.get('nar')}, not the {registered} Nix "
                "registered when it built it (the worker's copy was modified)"
            )
        if got.get("active") != expected:
            problems.append(f"{node}: its tasks were activated from {got.get('active')}, not {expected}")
    return expected, problems, res


def declared_store_problems(target, submit, workers) -> tuple[str, list[str], object]:
    """The declared-runtime check: (the declared realized path, one problem per worker naming it, evidence)."""
    from pytest_slurmflox.reporting.signoff import NOT_RUN_PREFIX

    rt = target.spec.runtime
    if not rt.nar_hash:
        pytest.skip(
            f"{NOT_RUN_PREFIX}the target file does not declare runtime.nar_hash or flox.lock_file (the pinned "
            f"generation's store content, target {target.spec.name!r})"
        )
    script = (
        f"d={quoted('%s', rt.realized_path)}; "
        f'a=$(/usr/bin/cat {quoted("%s", rt.profile_dir)}/realized-path 2>/dev/null) || a=NONE; echo "active $a"; '
        '[ -e "$d" ] || { echo "nar MISSING"; exit 0; }; '
        '[ -x /usr/bin/nix-store ] && [ -x /usr/bin/nix-hash ] || { echo "nar NO-NIX"; exit 0; }; '
        f'echo "nar $(/bin/bash -c {quoted("%s", WORKER_NAR_HASH_SH)} nar "$d" 2>&1 | tail -n 1)"'
    )
    res = on_each(submit, workers, script)
    seen = per_node(res)
    problems = []
    for node in workers:
        got = _tagged(seen.get(node, []))
        if not got:
            problems.append(f"{node}: no answer from the worker")
            continue
        nar = got.get("nar")
        if nar == "NO-NIX":
            problems.append(f"{node}: no /usr/bin/nix-store and nix-hash to hash {rt.realized_path} with")
        elif nar != rt.nar_hash:
            problems.append(
                f"{node}: {rt.realized_path} on the worker has NAR hash {nar}, not the declared runtime.nar_hash "
                f"{rt.nar_hash} (its content is not the pinned generation's)"
            )
        if got.get("active") != rt.realized_path:
            problems.append(f"{node}: its tasks were activated from {got.get('active')}, not {rt.realized_path}")
    return rt.realized_path, problems, res


_LOCK_PROBE = (
    '[ -d /nix/store ] || { echo "missing /nix/store"; exit 0; }; '
    '[ -f "$d/manifest.lock" ] || { echo "missing $d/manifest.lock"; exit 0; }; '
    'command -v nix-store >/dev/null || { echo "missing nix-store command"; exit 0; }; '
    'echo "system $(uname -m) $(uname -s)"; echo "lock $(base64 -w0 < "$d/manifest.lock")"'
)


def _pinned(target, expect):
    """The pinned generation's lock obtained off the cluster (floxlock.pinned_lock): the target's ``flox.lock_file``
    or the Flox CLI here; neither is NOT RUN naming the key (what the workers are compared with comes first)."""
    from pytest_slurmflox.reporting.signoff import NOT_RUN_PREFIX

    s = expect.settings
    try:
        lock, source = pinned_lock(target.spec.flox_lock, s.worker_flox_env, s.worker_flox_generation)
    except LockError as exc:
        requirement(False, f"the pinned generation {expect.environment}'s lock is readable off the cluster", str(exc))
    if lock is None:
        pytest.skip(f"{NOT_RUN_PREFIX}{source} (the pinned generation {expect.environment}'s lock)")
    return lock, source


def flox_lock_check(target, submit, workers, expect) -> None:
    """The Flox-target check: every worker's lock is the pinned generation's (obtained off the cluster) for its
    system, one lock across the cohort, and every locked path of the worker's system verified there."""
    pinned, source = _pinned(target, expect)
    records = runtimes(target, workers, expect.settings.worker_flox_activate_mode)  # FLOX_ENV of each slurmd
    cases = " ".join(quoted("%s) d=%s;;", node, rt.realized_path) for node, rt in records.items())
    res = on_each(submit, workers, f'case "$SLURMD_NODENAME" in {cases} *) d=/nonexistent;; esac; {_LOCK_PROBE}')
    seen = {node: _tagged(lines) for node, lines in per_node(res).items()}
    missing = {node: got["missing"] for node, got in seen.items() if "missing" in got}
    if missing:
        why = "; ".join(f"{node} has no {what}" for node, what in sorted(missing.items()))
        pytest.skip(f"missing capability nix-store: {why} (nothing to verify the pinned generation's paths with)")
    locks, paths = {}, {}
    for node in records:
        got = seen.get(node, {})
        requirement("lock" in got, f"{node}: the worker shows its generation's lock", res)
        try:
            locks[node] = parse_lock(base64.b64decode(got["lock"]).decode())
        except (LockError, ValueError) as exc:
            requirement(False, f"{node}: {records[node].realized_path}/manifest.lock is a Flox lock ({exc})", res)
        machine, _, kernel = got.get("system", "").partition(" ")
        paths[node] = locks[node].store_paths(nix_system(machine, kernel))
        requirement(
            bool(paths[node]),
            f"{node}: the lock names store paths for its system {nix_system(machine, kernel)}",
            f"systems in the lock: {locks[node].systems()}",
        )
    systems = {node: nix_system(*seen[node].get("system", "").partition(" ")[::2]) for node in locks}
    differ = cohort_lock_problems(pinned, locks, systems)
    requirement(not differ, f"every worker realized {expect.environment}'s lock ({source}): " + "; ".join(differ), res)
    digests = {node: lock.digest for node, lock in locks.items()}
    requirement(len(set(digests.values())) == 1, "one generation lock across the whole cohort", str(digests))
    lists = {node: " ".join(quoted("%s", p) for p in sorted(set(ps.values()))) for node, ps in paths.items()}
    cases = " ".join(f"{quoted('%s', node)}) set -- {args};;" for node, args in lists.items())
    verify = (
        f'case "$SLURMD_NODENAME" in {cases} *) set --;; esac; for p in "$@"; do '
        'if out=$(nix-store --verify-path "$p" 2>&1); then echo "ok $p"; '
        'else echo "bad $p $(echo $out)"; fi; done'
    )
    checked = on_each(submit, workers, verify)
    for node, lines in per_node(checked).items():
        bad = [line[4:] for line in lines if not line.startswith("ok ")]
        requirement(not bad, f"{node}: nix-store --verify-path passes on every locked path", *bad, checked)
    answered = set(per_node(checked))
    requirement(answered == set(paths), "every worker verified its locked paths", checked)
