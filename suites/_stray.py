"""T8's stray-process case: one job leaves processes of each kind on every worker, and what it showed before and
after it ended is recorded for the checks to judge (suites/test_t08_resources.py judges it, per kind).

Why its own module: the case is observation only (a job, a probe step inside it, a probe step after it); the check
that judges it stays next to T8's other requirements.
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence

from pytest_slurmflox.base.run import quoted
from pytest_slurmflox.base.waits import job_timeout
from pytest_slurmflox.cluster.slurm import TERMINAL_STATES

from ._cohort import across, ring_case

#: How a job leaves a process behind, by what ends it: a ``child`` stays in the job's process tree (a plain
#: background child: a process group already holds it); a ``detached`` one left it, as a daemon in its own session
#: (``setsid``) or the orphan of a double fork (reparented away from the job): only a tracker that follows the job's
#: cgroup ends those, so they are one check that a target declaring ``process-tracking`` unenforced SKIPs. Every kind
#: shares one job per ending: one step starts them on every worker, one step sees them, one step looks afterwards.
KINDS: dict[str, dict[str, str]] = {
    "child": {"background": "(exec -a {m} sleep 600) &"},
    "detached": {
        "setsid": "setsid bash -c 'exec -a {m} sleep 600' </dev/null >/dev/null 2>&1 &",
        "double-fork": "( (exec -a {m} sleep 600 </dev/null >/dev/null 2>&1 &) & )",
    },
}
#: How long the probe inside the job waits on each worker for the job's processes to appear (its tasks start them
#: as they launch, which may follow the job's RUNNING by a moment), seconds.
SEEN_WAIT = 15
#: How long an "ended" job waits for the probe's release file before it ends anyway (its own bound, seconds).
RELEASE_WAIT = 60


def _marked(base: str, how: str) -> str:
    """The command-line marker of one kind's process (no kind's marker is a prefix of another's)."""
    return f"{base}x{how.replace('-', '')}"


def _look(base: str, hows: Sequence[str] = (), release: str = "") -> str:
    """Shell text printing this worker's processes whose command line holds ``base`` (``pid marker...`` lines),
    then ``looked``. Given ``hows``, it first waits up to :data:`SEEN_WAIT` for a process of each, and touches
    ``release`` in the worker's /tmp once all are there (an "ended" job's tasks then finish)."""
    listing = f"pgrep -af -- {base} | grep -v -e pgrep -e bash"
    if not hows:
        return f"{listing}; echo looked"
    kinds = " ".join(_marked(base, how) for how in hows)
    wait = (
        f"for _ in $(seq {SEEN_WAIT * 4}); do seen=$({listing}); n=0; "
        f'for k in {kinds}; do case "$seen" in *"$k"*) n=$((n+1));; esac; done; '
        f"[ $n -eq {len(hows)} ] && break; sleep 0.25; done; "
    )
    touch = f"[ $n -eq {len(hows)} ] && touch /tmp/{release}; " if release else ""
    return f'{wait}{touch}[ -n "$seen" ] && printf "%s\\n" "$seen"; echo looked'


def seen_by_kind(by_node: dict[str, list[str]], base: str, hows: list[str]) -> dict[str, dict[str, list[str]]]:
    """Worker -> kind -> the marked processes of that kind a probe step saw there (its lines ``by_node``; only what
    it saw)."""
    found: dict[str, dict[str, list[str]]] = {}
    for node, lines in by_node.items():
        for how in hows:
            mine = [line for line in lines if _marked(base, how) in line]
            if mine:
                found.setdefault(node, {})[how] = mine
    return found


def _kill_leftovers(submit, workers, seen: dict[str, dict[str, list[str]]]) -> None:
    """Best effort: end, by PID, what a failing check left on each worker (the test user's own processes)."""
    pids = {node: [line.split()[0] for lines in kinds.values() for line in lines] for node, kinds in seen.items()}
    arms = [(node, " ".join(p for p in found if p.isdigit())) for node, found in pids.items()]
    arms = [(node, p) for node, p in arms if p]
    if arms:
        across(submit, workers, ring_case(arms, lambda _node, p: f"kill -9 {p}"), timeout=job_timeout())


def _stray_job(submit, workers, base: str, hows: list[str], ending: str) -> str:
    """A job with one task on every worker, each leaving a process of every one of ``hows`` behind; "ended" tasks
    wait for their worker's release file, "cancelled" ones sleep until cancelled."""
    release = f".{base}.release"
    wait_released = (
        f"for _ in $(seq {RELEASE_WAIT * 4}); do [ -e /tmp/{release} ] && break; sleep 0.25; done; "
        f"rm -f /tmp/{release}"  # leave nothing on the worker
    )
    lines = {how: line for kind in KINDS.values() for how, line in kind.items()}
    start = "\n".join(lines[how].format(m=_marked(base, how)) for how in hows)
    task = f"{start}\n{wait_released if ending == 'ended' else 'sleep 600'}\n"
    n = len(workers)
    script = f"#!/bin/bash\nsrun -N{n} -n{n} --ntasks-per-node=1 bash -c {quoted('%s', task)}\n"
    return submit.sbatch(script, f"-N{n}", f"-n{n}", "--ntasks-per-node=1", f"-w{','.join(workers)}", suffix=ending)


def by_worker(seen: dict[str, dict[str, list[str]]]) -> str:
    return "; ".join(
        f"{node} still runs {how} {lines}" for node, kinds in sorted(seen.items()) for how, lines in kinds.items()
    )


def stray_case(submit, workers, run_id: str, hows: list[str], ending: str) -> dict:
    """What one job leaving a process of every kind in ``hows`` on every worker showed, before and after it
    ``ending``: only observations (states, steps, what each probe saw), judged per kind by the checks."""
    # a nonce of its own: a run id may be reused (--slurmflox-run-id), and a release file an earlier run left would
    # end this job at once (seen: every "ended" case FAILED when a benchmark repeated its run ids)
    base = f"sfxstray{run_id.replace('-', '')[-10:]}{secrets.token_hex(3)}{ending}"
    job = _stray_job(submit, workers, base, hows, ending)
    # a job that ends before it was seen running fails at once, not after the wait's timeout
    started = submit.slurm.wait([job], until=frozenset({"RUNNING"}) | TERMINAL_STATES, timeout=job_timeout())[job]
    case: dict = {"base": base, "hows": hows, "started": str(started), "running": started.state == "RUNNING"}
    if not case["running"]:
        return case
    # one step inside the job (--overlap: it needs no free CPU on workers concurrent checks may have filled) waits on
    # each worker for every kind, then releases an "ended" job's task there
    release = f".{base}.release" if ending == "ended" else ""
    seen = across(
        submit, workers, _look(base, hows, release), args=f"--jobid={job} --overlap", timeout=job_timeout(SEEN_WAIT)
    )
    case["seen"] = seen.result
    if ending == "ended":
        state = submit.wait(job, timeout=job_timeout(RELEASE_WAIT))[job]
        case["ended"], case["completed"] = str(state), state.state == "COMPLETED"
    else:
        submit.slurm.cancel(job).check()
        submit.wait(job, timeout=job_timeout())
    left = across(submit, workers, _look(base))
    case["left"], case["left_missing"] = left.result, left.missing
    survivors = seen_by_kind(left.lines, base, hows)
    if survivors:
        _kill_leftovers(submit, workers, survivors)
    return case
