"""T8: advertised capacity, honoured allocations, enforced limits, and no stray processes.

Requirement: each worker advertises exactly the CPUs and memory the deployment declares for it (not its host's); a
request beyond that is refused, for the reason Slurm gives for an impossible request (not any failure); a job is
confined to the CPUs it was allocated (it cannot even ask the kernel for another) and is killed when it uses more
memory than it asked for; and when a job ends or is cancelled none of its processes survive on the worker, not
even one that left the job's session (``setsid``) or was orphaned by a double fork. That is what a slurmd pod's
cgroups give on Kubernetes (``proctrack/cgroup``, ``task/cgroup``); a target that declares it cannot enforce one
of these (``limitations`` in its target file) SKIPs that check naming the limitation.
"""

from __future__ import annotations

import secrets
import shlex
import time

import pytest

from pytest_slurmflox.declared import CPUS, MEM
from pytest_slurmflox.slurm import TERMINAL_STATES
from pytest_slurmflox.waits import job_timeout

from ._support import Mark, declared, require_enforced, requirement

pytestmark = [pytest.mark.acceptance, pytest.mark.T8]

#: Slurm's message for a request no node of the partition can ever satisfy (ESLURM_REQUESTED_NODE_CONFIG_UNAVAILABLE)
REFUSED = "Requested node configuration is not available"


def test_advertised_capacity_equals_declared(slurm, workers, expect, target):
    declared(target, CPUS, MEM)
    nodes = {n.name: n for n in slurm.nodes()}
    s = expect.settings
    for name in workers:
        node = nodes.get(name)
        requirement(node is not None, f"{name} is registered with slurmctld", str(sorted(nodes)))
        requirement(
            node.cpus == s.worker_cpus,
            f"{name} advertises WORKER_CPUS={s.worker_cpus}",
            f"CPUTot={node.cpus} ({node.raw.get('CPUTot')}), State={node.state}",
        )
        requirement(
            node.real_memory == s.worker_mem_mb,
            f"{name} advertises WORKER_MEM_MB={s.worker_mem_mb}",
            f"RealMemory={node.real_memory}",
        )


def test_whole_worker_request_gets_every_declared_cpu(submit, expect, target):
    """A request for every declared CPU runs, on that many CPUs as the kernel sees them (the task's
    Cpus_allowed_list), not as Slurm's SLURM_CPUS_ON_NODE says, which only reads the request back (#26)."""
    declared(target, CPUS)
    require_enforced(target, "cpu-binding")
    cpus = expect.settings.worker_cpus
    mark = Mark.new()
    probe = mark.echo("allowed=$(sed -n 's/^Cpus_allowed_list:[[:space:]]*//p' /proc/self/status)")
    res = submit.srun(f"-N1 -n1 -c{cpus}", "bash -c " + shlex.quote(probe))
    allowed = [line.partition("=")[2] for line in mark.lines(res.stdout) if line.startswith("allowed=")]
    got = len(_cpu_list(allowed[0])) if allowed else 0
    requirement(
        res.ok and got == cpus,
        f"a whole-worker request runs on {cpus} CPUs (the kernel allows it {got}: {allowed})",
        res,
    )


@pytest.mark.parametrize("resource", ["cpus", "memory"])
def test_request_beyond_a_worker_is_refused_for_that_reason(submit, expect, resource, target):
    declared(target, CPUS if resource == "cpus" else MEM)
    s = expect.settings
    ask = f"-c{s.worker_cpus + 1}" if resource == "cpus" else f"--mem={s.worker_mem_mb + 1}"
    res = submit.srun(f"-N1 -n1 {ask} --immediate=5", "true", timeout=job_timeout(5))
    requirement(not res.ok, f"a request beyond a worker's declared {resource} ({ask}) is refused", res)
    requirement(
        REFUSED in res.stdout + res.stderr,
        f"Slurm refuses it as impossible on any worker ({REFUSED!r}), not for another reason",
        res,
    )


def _cpu_list(text: str) -> set[int]:
    """``0-2,5`` -> {0, 1, 2, 5}."""
    cpus: set[int] = set()
    for part in text.strip().split(","):
        if part:
            low, _, high = part.partition("-")
            cpus.update(range(int(low), int(high or low) + 1))
    return cpus


#: In a one-CPU task: the allowed CPUs, the node's online CPUs, and for each online CPU whether the kernel lets the
#: task move there (taskset exits non-zero when the cpuset does not contain that CPU).
#: The online CPUs are read from /proc/stat once (a grep per possible CPU number, 1024 forks, took 10-14 s).
_BINDING_PROBE = r"""
command -v taskset >/dev/null || { echo "no-taskset"; exit 0; }
echo "allowed=$(sed -n 's/^Cpus_allowed_list:[[:space:]]*//p' /proc/self/status)"
echo "online=$(cat /sys/devices/system/cpu/online)"
echo "slurm=$SLURM_CPUS_ON_NODE"
for c in $(sed -n 's/^cpu\([0-9][0-9]*\) .*/\1/p' /proc/stat); do
    if taskset -c "$c" true 2>/dev/null; then echo "runs-on=$c"; else echo "refused=$c"; fi
done
"""


def test_job_is_confined_to_its_allocated_cpus(submit, target):
    require_enforced(target, "cpu-binding")
    mark = Mark.new()
    res = submit.srun("-N1 -n1 -c1", "bash -c " + shlex.quote(mark.wrap(_BINDING_PROBE)))
    requirement(res.ok, "a one-CPU job step runs", res)
    own = mark.lines(res.stdout)
    if "no-taskset" in own:
        pytest.skip("missing capability taskset: the workers have no taskset to try another CPU with")
    facts = dict(line.split("=", 1) for line in own if "=" in line)
    allowed = _cpu_list(facts.get("allowed", ""))
    allocated = int(facts.get("slurm") or 0)
    requirement(
        len(allowed) == allocated >= 1,
        f"the task may run on exactly the {allocated} CPU(s) Slurm allocated (Cpus_allowed_list)",
        res,
    )
    runs_on = {int(line.partition("=")[2]) for line in own if line.startswith("runs-on=")}
    others = _cpu_list(facts.get("online", "")) - allowed
    if not others:
        pytest.skip("missing capability spare-cpu: the worker has no online CPU outside the job's allocation")
    requirement(
        not (runs_on - allowed),
        f"the job cannot move itself to a CPU outside its allocation {sorted(allowed)} "
        f"(the node's cpuset refuses it; it ran on {sorted(runs_on - allowed)})",
        res,
    )


_MEMORY_HOG = "head -c {mb}m /dev/zero | tail > /dev/null\necho survived\n"


def test_job_beyond_its_memory_is_killed_out_of_memory(submit, target, workers):
    require_enforced(target, "memory-limits")
    node = workers[0]
    # positive control: the same probe within its --mem completes, so a kill below is the limit, not the probe
    small = submit.sbatch("#!/bin/bash\n" + _MEMORY_HOG.format(mb=8), "--mem=64", f"-w{node}", suffix="fits")
    large = submit.sbatch("#!/bin/bash\n" + _MEMORY_HOG.format(mb=512), "--mem=64", f"-w{node}", suffix="hog")
    states = submit.wait(small, large, timeout=job_timeout(stages=2))  # one node: maybe one after the other
    requirement(states[small].state == "COMPLETED", "a job within its --mem=64 completes", str(states[small]))
    requirement(
        states[large].state == "OUT_OF_MEMORY",
        "a job that uses 512 MiB with --mem=64 is killed for it (OUT_OF_MEMORY)",
        str(states[large]),
    )


# ------------------------------------------------------------------------------------------------ stray processes
#: How a job leaves a process behind: a plain background child, a daemon in its own session, an orphan of a double
#: fork (reparented away from the job's process tree).
DAEMONIZE = {
    "background": "(exec -a {m} sleep 600) &",
    "setsid": "setsid bash -c 'exec -a {m} sleep 600' </dev/null >/dev/null 2>&1 &",
    "double-fork": "( (exec -a {m} sleep 600 </dev/null >/dev/null 2>&1 &) & )",
}


def _probe(submit, node: str, marker: str, release: str = "", job: str = ""):
    """Processes on ``node`` whose command line holds ``marker`` (one ``pid marker...`` line each), seen from a task
    there; optionally releases a waiting job (touch ``release`` in the node's /tmp).

    While the job runs, the probe is a step inside that job (``--overlap``): it needs no free CPU on a node that
    concurrent checks may have filled. Afterwards it is a job of its own on the CPU the ended job gave back."""
    touch = f"touch /tmp/{release}; " if release else ""
    look = f"pgrep -af -- {marker} | grep -v -e pgrep -e bash || true"
    where = f"--jobid={job} --overlap -N1 -n1 -w {node}" if job else f"-N1 -n1 -w {node}"
    return submit.srun(where, f"bash -c '{touch}{look}'")


def _probe_until_gone(submit, node: str, marker: str, grace: float = 30.0):
    """Probe until the marked process is gone or ``grace`` seconds passed: the job's state changes at the controller
    before the worker has finished ending its processes (KillWait), so "survives" means: still there after that."""
    deadline = time.monotonic() + grace
    while True:
        left = _probe(submit, node, marker)
        if marker not in left.stdout or time.monotonic() > deadline:
            return left
        time.sleep(1)


def _kill_leftovers(submit, node: str, seen: str) -> None:
    """Best effort: end, by PID, what a failing check left (the test user's own processes)."""
    pids = " ".join(line.split()[0] for line in seen.splitlines() if line.split() and line.split()[0].isdigit())
    if pids:
        submit.srun(f"-N1 -n1 -w {node}", f"kill -9 {pids}", timeout=job_timeout())


#: How long an "ended" job waits for the probe's release file before it ends anyway (its own bound, seconds).
RELEASE_WAIT = 60.0


@pytest.mark.parametrize("ending", ["ended", "cancelled"])
@pytest.mark.parametrize("how", list(DAEMONIZE))
def test_no_process_of_a_job_survives_it(submit, target, workers, run_id, how, ending):
    if how != "background":  # a process group (proctrack/pgid) holds a background child, not these
        require_enforced(target, "process-tracking")
    # a nonce of its own: a run id may be reused (--slurmflox-run-id), and a release file an earlier run left would
    # end this job at once (seen: every "ended" case FAILED when a benchmark repeated its run ids)
    marker = f"sfxstray{run_id.replace('-', '')[-10:]}{secrets.token_hex(3)}{how.replace('-', '')}{ending}"
    node = workers[0] if ending == "ended" else workers[-1]
    release = f".{marker}.release"
    wait_released = (
        f"for _ in $(seq {int(RELEASE_WAIT * 4)}); do [ -e /tmp/{release} ] && break; sleep 0.25; done; "
        f"rm -f /tmp/{release}"  # leave nothing on the worker
    )
    rest = wait_released if ending == "ended" else "sleep 600"
    script = f"#!/bin/bash\n{DAEMONIZE[how].format(m=marker)}\n{rest}\n"
    job = submit.sbatch(script, f"-w{node}", suffix=how)
    # a job that ends before it was seen running fails here at once, not after the wait's timeout
    started = submit.slurm.wait([job], until=frozenset({"RUNNING"}) | TERMINAL_STATES, timeout=job_timeout())[job]
    requirement(started.state == "RUNNING", f"the job that starts a {how} process runs (control)", str(started))
    seen = _probe(submit, node, marker, job=job)
    for _ in range(20):  # the job may not have started its daemon yet
        if marker in seen.stdout:
            break
        seen = _probe(submit, node, marker, job=job)
    requirement(marker in seen.stdout, f"while the job runs, the probe sees its {how} process (control)", seen)
    if ending == "ended":
        _probe(submit, node, marker, release=release, job=job)
        state = submit.wait(job, timeout=job_timeout(RELEASE_WAIT))[job]
        requirement(state.state == "COMPLETED", f"the job that leaves a {how} process completed", str(state))
    else:
        submit.slurm.cancel(job).check()
        submit.wait(job, timeout=job_timeout())
    left = _probe_until_gone(submit, node, marker)
    if marker in left.stdout:
        _kill_leftovers(submit, node, left.stdout)
    requirement(left.ok and marker not in left.stdout, f"no {how} process of the {ending} job survives it", left)
