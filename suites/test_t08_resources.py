"""T8: advertised capacity, honoured allocations, enforced limits, and no stray processes.

Requirement: each worker advertises exactly the CPUs and memory the deployment declares for it (not its host's); a
request beyond that is refused, for the reason Slurm gives for an impossible request (not any failure); a job is
confined to the CPUs it was allocated (it cannot even ask the kernel for another) and held to the memory it asked
for as the cluster's cgroup.conf configures (killed beyond it, or swapped out within its RAM limit where swap is
allowed: pytest_slurmflox/judges/memlimit.py); and when a job ends or is cancelled none of its processes survive on the
worker, not even one that left the job's session (``setsid``) or was orphaned by a double fork. That is what a
slurmd pod's cgroups give on Kubernetes (``proctrack/cgroup``, ``task/cgroup``); a target that declares it cannot
enforce one of these (``limitations`` in its target file) SKIPs that check naming the limitation. How much a task
may hold beyond its ``--mem`` is the target's promise (``expect.limits``, Slurm's defaults where it is silent),
never the cgroup.conf under test: a configured leniency is not a promise.
"""

from __future__ import annotations

import pytest

from pytest_slurmflox.base.waits import job_timeout, queue_timeout
from pytest_slurmflox.judges.authkeys import parse_show_config
from pytest_slurmflox.judges.memlimit import (
    MEM_MB,
    Observed,
    allowance,
    configured,
    loosened,
    memory_problem,
    mib,
    probe,
    step_args,
)
from pytest_slurmflox.model.declared import CPUS, MEM

from ._capability import declared, judged, require_enforced, requirement
from ._cohort import across
from ._marks import per_node, slurm_version_tuple
from ._shared import observe_once
from ._stray import KINDS, by_worker, seen_by_kind, stray_case

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


#: In a task of a whole-worker request: the CPUs the kernel lets it run on, and every memory limit on the way from
#: its cgroup up to the root it can see (v1 ``memory.limit_in_bytes`` under the memory hierarchy, v2 ``memory.max``);
#: the kernel enforces the smallest. A pod's or node's own limit is the topmost one a task sees (cgroup namespace).
_WHOLE_PROBE = r"""
echo "allowed=$(sed -n 's/^Cpus_allowed_list:[[:space:]]*//p' /proc/self/status)"
while IFS=: read -r _ ctrl path; do
    case ",$ctrl," in
        *,memory,*) base=/sys/fs/cgroup/memory; f=memory.limit_in_bytes;;
        ,,) base=/sys/fs/cgroup; f=memory.max;;
        *) continue;;
    esac
    d=$base${path%/}
    while :; do
        [ -r "$d/$f" ] && echo "memlimit=$(cat "$d/$f") $d"
        [ "$d" = "$base" ] || [ "${d#"$base"/}" = "$d" ] && break
        d=${d%/*}
    done
done < /proc/self/cgroup
echo done
"""


def whole_worker_problem(lines: list[str], cpus: int, mem_mb: int, allowed_pct: float = 100.0) -> str | None:
    """What one worker's :data:`_WHOLE_PROBE` answer shows against its node record (``cpus`` CPUTot, ``mem_mb``
    RealMemory), or None: the task must run on exactly that many CPUs and no limit may hold it below that memory,
    as much of it as the cluster's cgroup.conf lets a job use (``allowed_pct``: AllowedRAMSpace, cgroup.conf(5))."""
    if "done" not in lines:
        return f"the probe did not finish: {lines!r}"
    facts = dict(line.split("=", 1) for line in lines if line.startswith("allowed="))
    allowed = _cpu_list(facts.get("allowed", ""))
    problems = []
    if len(allowed) != cpus:
        problems.append(f"its node record declares {cpus} CPUs but the kernel lets the task run on {sorted(allowed)}")
    limits = []
    for line in lines:
        if line.startswith("memlimit="):
            value, _, where = line[len("memlimit=") :].partition(" ")
            if value.isdigit():
                limits.append((int(value), where))
    low = min(limits, default=None)
    want = int(mem_mb * allowed_pct / 100) * 2**20
    if low is not None and low[0] < want:
        share = "" if allowed_pct == 100 else f" (AllowedRAMSpace {allowed_pct:g}%: {want // 2**20} MiB)"
        problems.append(
            f"its node record declares {mem_mb} MiB{share} but {low[1]} limits the task to {low[0] // 2**20} MiB"
        )
    return "; ".join(problems) or None


@pytest.mark.whole_cohort
def test_whole_worker_request_gets_what_each_node_record_declares(submit, slurm, workers, target):
    """On every worker in one step (one step per distinct node shape): a request for all the CPUs and memory Slurm's
    node record declares for that worker runs on that many CPUs as the kernel sees them (Cpus_allowed_list) and no
    cgroup above the task holds it below that memory. The node record is slurmctld's; the CPUs and limits are the
    kernel's, read by the task: a worker whose pod or cgroup does not give the whole node FAILs, named; the
    expectation is the node record, never the request read back."""
    require_enforced(target, "cpu-binding")
    nodes = {n.name: n for n in slurm.nodes()}
    allowed = _allowed_ram_space(target)
    unknown = sorted(set(workers) - set(nodes))
    requirement(not unknown, f"every worker has a node record in slurmctld (none for {unknown})", str(sorted(nodes)))
    shapes: dict[tuple[int, int], list[str]] = {}
    for name in workers:
        shapes.setdefault((nodes[name].cpus, nodes[name].real_memory), []).append(name)
    problems, evidence = [], []
    for (cpus, mem), names in sorted(shapes.items()):
        # every worker to itself: it may wait for the run's last jobs (T7's time limit) to end
        step = across(submit, names, _WHOLE_PROBE, args=f"--exclusive -c{cpus} --mem={mem}", timeout=queue_timeout())
        evidence.append(step.result)
        problems += step.wrong(lambda _node, lines, c=cpus, m=mem: whole_worker_problem(lines, c, m, allowed))
    requirement(
        not problems,
        "on every worker a whole-worker request gets every CPU and all the memory its node record declares: "
        + "; ".join(problems),
        *evidence,
    )


def _allowed_ram_space(target) -> float:
    """The share of its memory a job may use, by the cluster's own configuration (``scontrol show config`` at login:
    AllowedRAMSpace when ConstrainRAMSpace is on; 100% otherwise)."""
    promise = configured(parse_show_config(target.login.run("scontrol show config").check().stdout))
    return promise.allowed_ram if promise is not None and promise.constrain_ram else 100.0


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


def _facts(lines: list[str]) -> dict[str, str]:
    return dict(line.split("=", 1) for line in lines if "=" in line and not line.startswith(("runs-on", "refused")))


def _spare_cpus(lines: list[str]) -> set[int]:
    """Online CPUs of the worker outside the task's allowed set."""
    facts = _facts(lines)
    return _cpu_list(facts.get("online", "")) - _cpu_list(facts.get("allowed", ""))


def _binding_problem(lines: list[str]) -> str | None:
    """What is wrong with one worker's :data:`_BINDING_PROBE` answer, or None."""
    facts = _facts(lines)
    allowed = _cpu_list(facts.get("allowed", ""))
    allocated = int(facts.get("slurm") or 0)
    if not len(allowed) == allocated >= 1:
        return f"the task may run on CPUs {sorted(allowed)}, not exactly the {allocated} Slurm allocated"
    runs_on = {int(line.partition("=")[2]) for line in lines if line.startswith("runs-on=")}
    if runs_on - allowed:
        return f"the task moved itself to CPUs {sorted(runs_on - allowed)} outside its allocation {sorted(allowed)}"
    return None


@pytest.mark.per_worker
def test_job_is_confined_to_its_allocated_cpus(submit, target, workers):
    """On every worker, in one step (one one-CPU task per worker): the task may run on exactly the CPU(s) Slurm
    allocated (Cpus_allowed_list) and cannot move itself to any other online CPU (the node's cpuset refuses it)."""
    require_enforced(target, "cpu-binding")
    step = across(submit, workers, _BINDING_PROBE, args="-c1")
    requirement(step.result.ok, "a one-CPU step runs on every worker", step.result)
    lacking = [node for node, lines in step.lines.items() if "no-taskset" in lines]
    if lacking and len(lacking) == len(workers):
        pytest.skip("missing capability taskset: the workers have no taskset to try another CPU with")
    spare = [node for node, lines in step.lines.items() if _spare_cpus(lines)]
    if not spare:
        pytest.skip("missing capability spare-cpu: no worker has an online CPU outside the job's allocation")
    problems = step.wrong(lambda node, lines: "no taskset there" if "no-taskset" in lines else _binding_problem(lines))
    requirement(
        not problems,
        "on every worker a task is confined to the CPUs Slurm allocated and cannot move itself to a CPU outside its "
        "allocation: " + "; ".join(problems),
        step.result,
        workers=problems.workers,
    )


@pytest.mark.per_worker
def test_job_beyond_its_memory_is_killed_out_of_memory(request, submit, target, workers):
    """On every worker, in one step with --mem=64 per worker: 8 MiB fit, and a 512 MiB buffer ends as the cluster's
    own configuration says (pytest_slurmflox/judges/memlimit.py). The promise is cgroup.conf as Slurm reports it
    (``scontrol show config`` at login: ConstrainRAMSpace, AllowedRAMSpace, ConstrainSwapSpace, AllowedSwapSpace,
    MinRAMSpace); what the kernel enforces the task reads from its own cgroup and every one above it (v2
    memory.max and memory.swap.max, v1 memory.limit_in_bytes and memory.memsw.limit_in_bytes), with the worker's
    SwapTotal and its cgroup's peak RAM (memory.peak, v1 memory.max_usage_in_bytes). On every worker the kernel's
    RAM limit must be the one the configuration promises for --mem=64 (64 MiB times AllowedRAMSpace); where RAM and
    allowed swap cannot hold 512 MiB the task is killed and Slurm reports it Out Of Memory; where swap is allowed
    (ConstrainSwapSpace=no, or a swap limit that holds the rest) and the worker has swap, a task that survived
    passes only if its peak RAM stayed within its limit. A configuration that constrains neither RAM nor swap
    FAILs: nothing holds a job to the memory it asked for. The configuration is what Slurm does, not what it
    should: what a task may hold is the target's ``expect.limits`` (Slurm's defaults where it is silent:
    AllowedRAMSpace 100, AllowedSwapSpace 0, --mem holding RAM and swap), so a configuration looser than declared
    FAILs naming both, and so does every worker whose kernel lets the task hold more than that."""
    require_enforced(target, "memory-limits")
    # cgroup.conf as Slurm reports it: ``scontrol show config`` ends with its "Cgroup Support Configuration:"
    # section on 22.05 and later (SchedMD/slurm src/api/config_info.c; keys and defaults: cgroup.conf(5))
    shown = target.login.run("scontrol show config").check()
    promise = configured(parse_show_config(shown.stdout))
    requirement(
        promise is not None,
        "scontrol show config reports the cluster's cgroup.conf (ConstrainRAMSpace in its Cgroup Support "
        "Configuration section): what a job's memory is promised",
        shown,
    )
    assert promise is not None
    limits = target.spec.limits
    judged(request, f"configured: {promise.shown}", f"declared: a --mem={MEM_MB} task may hold at most "
           f"{mib(allowance(limits, MEM_MB))} of RAM and swap ({limits.shown('allowed_ram_space')}; "
           f"{limits.shown('allowed_swap_space')}; {limits.shown('constrain_swap_space')})")  # fmt: skip
    # how slurmstepd reports an OOM kill is decided by the version the cluster reports (memlimit.step_args)
    args = step_args(slurm_version_tuple(target.slurm.version()))
    step = across(submit, workers, probe(), args=args, timeout=job_timeout(stages=2))
    output = step.result.stdout + step.result.stderr
    problems = step.wrong(lambda node, lines: memory_problem(lines, output, node, promise, limits))
    problems[:0] = loosened(promise, limits)  # the cluster's own, before the workers'; Problems keeps its workers
    seen = [f"{node}: {Observed.parse(lines).shown}" for node, lines in sorted(step.lines.items())]
    requirement(
        not problems,
        f"on every worker a task beyond its --mem={MEM_MB} is held to what the cluster configures "
        f"({promise.shown}): " + "; ".join(problems),
        step.result,
        "\n".join(seen),
        workers=problems.workers,
    )


# ------------------------------------------------------------------------------------------------ stray processes
#: The kinds as parameters: a detached check judges the job the child check makes first (placed after it, it does not
#: wait on the run's lock for it).
_KIND_PARAMS = [pytest.param(k, marks=[] if k == "child" else [pytest.mark.judges_shared]) for k in KINDS]


@pytest.mark.parametrize("ending", ["ended", "cancelled"])
@pytest.mark.parametrize("kind", _KIND_PARAMS)
def test_no_process_of_a_job_survives_it(request, submit, target, workers, run_id, kind, ending):
    """On every worker at once (one job with a task on each): the processes the job left (a background child; or a
    setsid daemon and a double-forked orphan) are seen while it runs (control), and none is left once Slurm says
    the job is over (its COMPLETING phase done): one seen then is a FAIL at once, naming the worker and the kind, not
    after a grace period. Both kinds are left by the same job, made once per ending in the run and judged here per
    kind (suites/_shared.py): two jobs instead of four."""
    if kind == "detached":  # a process group (proctrack/pgid) holds a background child, not these
        require_enforced(target, "process-tracking")
    kinds = [k for k in KINDS if k == "child" or not target.spec.limitations.get("process-tracking")]
    all_hows = [how for k in kinds for how in KINDS[k]]
    case = observe_once(request, f"t8-stray-{ending}", lambda: stray_case(submit, workers, run_id, all_hows, ending))
    hows = list(KINDS[kind])
    label = " or ".join(hows)
    requirement(case["running"], f"the job that starts a {label} process on every worker runs", case["started"])
    base, seen = case["base"], case["seen"]
    found = seen_by_kind(per_node(seen), base, hows)
    missing = [
        f"{node} ({', '.join(h for h in hows if h not in found.get(node, {}))})"
        for node in sorted(workers)
        if set(found.get(node, {})) != set(hows)
    ]
    requirement(
        not missing, f"while the job runs, the probe sees its {label} process on every worker: not on {missing}", seen
    )
    if ending == "ended":
        requirement(case["completed"], f"the job that leaves a {label} process completed", case["ended"])
    left = case["left"]
    survivors = seen_by_kind(per_node(left), base, hows)
    requirement(
        left.ok and not case["left_missing"] and not survivors,
        f"no {label} process of the {ending} job survives it on any worker: "
        + by_worker(survivors)
        + "".join(f"; {node} did not answer" for node in case["left_missing"]),
        left,
    )
