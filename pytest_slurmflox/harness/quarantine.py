"""Quarantine and re-test on the cluster, thin over the admin endpoint: drain at the run's end the workers its
per-worker FAILs named, and open the workers a re-test names in a reservation of its own, resuming each one only when
every check PASSed on it. The rules are model/quarantine.py's; this module only reads Slurm and acts.

Who acts: the process that owns the run (the serial process, or the pytest-xdist controller once its workers are
done), once, at session end; a re-test's reservation is made at session start, before any worker starts. Only Slurm
is touched (``scontrol update nodename=X state=DRAIN reason=...``, which Slinky mirrors on the pod), never a pod or a
Kubernetes node.

Why a re-test resumes inside a reservation: Slurm starts no job on a drained node, so the node must be resumed for
its checks to run there; a reservation for the run's user made first keeps every other job off it until the run
ends, and a node whose re-test did not pass is drained again before the reservation goes.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterable, Mapping
from typing import Any

import pytest

from ..base.run import Runner
from ..cluster.slurm import SlurmClient
from ..model.quarantine import (
    DRAINED,
    DRAINED_AGAIN,
    LEFT,
    RESUMED,
    Action,
    NodeRecord,
    Retest,
    WorkerFailure,
    one_line,
    parse_nodes,
    parse_share,
    plan,
    retest_set,
    to_resume,
)
from ..model.target import TargetSpec
from ..reporting.profiles import NOT_APPLICABLE
from ..reporting.sessionstate import SessionState
from ..reporting.signoff import FAIL, PASS, Check
from .options import get_option

#: ``sinfo`` columns: node, state, reason (last: it may hold ``|``).
NODES_FORMAT = "%N|%T|%E"


def read_nodes(runner: Runner, partition: str) -> dict[str, NodeRecord]:
    """The partition's nodes as Slurm lists them, with state and reason; RuntimeError when sinfo fails."""
    res = runner.run("sinfo -h -N -o", NODES_FORMAT, "-p", partition, timeout=30)
    if not res.ok:
        raise RuntimeError("sinfo failed:\n" + res.describe())
    return parse_nodes(res.stdout)


def failures_of(checks: Iterable[Check], failed: Mapping[str, Mapping[str, str]]) -> list[WorkerFailure]:
    """Every worker a FAILed check named as data (``failed``: node id -> worker -> line), in the checks' order."""
    return [
        WorkerFailure(worker, check.group or "-", check.nodeid.rsplit("::", 1)[-1], line)
        for check in checks
        if check.verdict == FAIL
        for worker, line in failed.get(check.nodeid, {}).items()
    ]


def _admin(spec: TargetSpec) -> Runner:
    from .connection import login_runner

    assert spec.admin is not None
    return login_runner(spec.admin, None, where=f"admin({spec.admin.host}:{spec.admin.port})")


def quarantine_at_end(config: pytest.Config, state: SessionState, checks: list[Check], failed: Mapping) -> None:
    """``--slurmflox-quarantine``: drain each worker the run's per-worker FAILs named, within the share; what was
    done or declined goes to ``state.quarantine``. Never raises."""
    spec, outcome = state.spec, state.quarantine
    failures = failures_of(checks, failed)
    if not (get_option(config, "slurmflox_quarantine") and failures and spec is not None):
        return
    if spec.admin is None:
        outcome.refused.append(
            "quarantine needs the target's admin endpoint (admin: in the target file); nothing drained"
        )
        return
    share = parse_share(str(get_option(config, "slurmflox_quarantine_share")))
    runner = _admin(spec)
    try:
        found = plan(state.run_id, failures, read_nodes(runner, spec.partition), share)
        outcome.refused += [found.refused] if found.refused else []
        outcome.actions += [Action(w, LEFT, r, state.run_id, time.time()) for w, r in found.already.items()]
        slurm = SlurmClient(user=runner, admin=runner, partition=spec.partition)
        for worker, reason in found.drain.items():
            slurm.drain([worker], reason)
            outcome.actions.append(Action(worker, DRAINED, reason, state.run_id, time.time()))
    except Exception as exc:
        outcome.refused.append(f"quarantine could not drain through the admin endpoint: {one_line(str(exc))}")
    finally:
        runner.close()


def with_reservation(spec: TargetSpec, name: str) -> TargetSpec:
    """The target with every job of the run placed in reservation ``name`` (its nodes are then the cohort)."""
    return dataclasses.replace(spec, site=dataclasses.replace(spec.site, reservation=name))


def retest_at_start(config: pytest.Config, state: SessionState) -> None:
    """``--slurmflox-retest``: the workers it names, in a reservation of this run's own made first, then resumed
    when this tool had drained them; the run's target places every job there. A re-test that cannot start is one
    usage-error line, nothing changed."""
    value = get_option(config, "slurmflox_retest")
    spec = state.spec
    if not value or spec is None:
        return
    if spec.admin is None:
        raise pytest.UsageError("--slurmflox-retest needs the target's admin endpoint (admin:); nothing was run")
    if spec.site.reservation:
        raise pytest.UsageError("--slurmflox-retest runs in a reservation of its own: the target declares "
                                f"slurm.reservation {spec.site.reservation}; nothing was run")  # fmt: skip
    runner = _admin(spec)
    try:
        tested, left = retest_set(str(value), read_nodes(runner, spec.partition))
        state.quarantine.refused += [f"re-test: {w} is not re-tested: {why}" for w, why in left.items()]
        if not tested:
            said = "; ".join(f"{w}: {why}" for w, why in left.items()) or "no worker drained by slurmflox"
            raise pytest.UsageError(f"--slurmflox-retest={value}: no worker to re-test ({said}); nothing was run")
        name = f"sfx-retest-{state.run_id}"
        _reserve_and_resume(runner, name, tested, spec.login.user)
    except pytest.UsageError:
        raise
    except Exception as exc:  # Slurm or the admin endpoint did not answer: one line, nothing left behind
        raise pytest.UsageError(f"--slurmflox-retest: {one_line(str(exc), 400)}; nothing was run") from None
    finally:
        runner.close()
    state.retest = Retest(name, tested)
    state.spec = with_reservation(spec, name)


def _reserve_and_resume(runner: Runner, name: str, tested: Mapping[str, str], user: str) -> None:
    """The reservation first (the login user only, until the run deletes it), then the drained workers resumed
    inside it; a resume that fails takes the reservation away again."""
    runner.run(
        "scontrol create reservation", f"ReservationName={name}", f"Nodes={','.join(tested)}", f"Users={user}",
        "StartTime=now", "Duration=UNLIMITED", "Flags=IGNORE_JOBS", timeout=30,
    ).check()  # fmt: skip
    try:
        SlurmClient(user=runner, admin=runner).resume(w for w, reason in tested.items() if reason)
    except Exception:
        runner.run("scontrol delete", f"ReservationName={name}", timeout=30)
        raise


def _blocked(checks: list[Check], failed: Mapping, interrupted: bool) -> str:
    """Why no re-tested worker may resume, whatever named it: the run was interrupted, no check PASSed, or a check
    neither PASSed nor FAILed naming workers (a FAIL of the whole step, a SKIP, a NOT RUN)."""
    if interrupted:
        return "the re-test was interrupted"
    if not any(c.verdict == PASS for c in checks):
        return "no check PASSed in the re-test"
    for c in checks:
        if c.verdict not in (PASS, NOT_APPLICABLE) and not (c.verdict == FAIL and failed.get(c.nodeid)):
            return f"{c.group or '-'} {c.nodeid.rsplit('::', 1)[-1]} is {c.verdict}: {one_line(c.reason, 120)}"
    return ""


def retest_at_end(state: SessionState, checks: list[Check], failed: Mapping, *, interrupted: bool = False) -> None:
    """Resume (leave serving) each re-tested worker every check PASSed on; drain again, with this run's reason,
    each one this tool had drained that did not pass; then the reservation goes. Never raises."""
    retest, spec, run_id = state.retest, state.spec, state.run_id
    if retest is None or spec is None or spec.admin is None:
        return
    named: dict[str, str] = {}
    for f in failures_of(checks, failed):
        named.setdefault(f.worker, f"{f.group} {f.check}: {f.what}")
    decided = to_resume(retest.tested, named, _blocked(checks, failed, interrupted))
    runner = _admin(spec)
    try:
        slurm = SlurmClient(user=runner, admin=runner)
        for worker, why in decided.items():
            before = retest.tested[worker]
            if why is None and before:
                said = f"every check PASSed on it; cleared by run {run_id} (it was drained: {before})"
                state.quarantine.actions.append(Action(worker, RESUMED, said, run_id, time.time()))
            elif why is not None and before:
                reason = f"slurmflox {run_id}: re-test {one_line(why)}"
                slurm.drain([worker], reason)
                state.quarantine.actions.append(Action(worker, DRAINED_AGAIN, reason, run_id, time.time()))
    except Exception as exc:
        state.quarantine.refused.append(f"re-test could not drain or resume: {one_line(str(exc))}")
    finally:
        runner.run("scontrol delete", f"ReservationName={retest.reservation}", timeout=30)
        runner.close()


def at_end(config: pytest.Config, state: SessionState, writer: Any, *, interrupted: bool = False) -> None:
    """The run's end for quarantine and re-test, from the report writer's checks (its folded verdicts and the
    workers each FAIL named)."""
    if writer is None:
        return
    checks = list(writer.collector.checks.values())
    try:
        retest_at_end(state, checks, writer.failed_workers, interrupted=interrupted)
        if not interrupted:
            quarantine_at_end(config, state, checks, writer.failed_workers)
    except Exception as exc:  # the run's end goes on; what could not be done is in the verdict
        state.quarantine.refused.append(f"quarantine or re-test could not finish: {one_line(str(exc))}")
