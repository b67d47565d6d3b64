"""T8's memory check judged against what the cluster configures (pytest_slurmflox/judges/memlimit.py): unit replays of
one
every-worker step (the marked lines each task prints, Slurm's OOM report on stderr), parsed and judged as the check
does, for cgroup v1 and v2 workers with and without swap, under the cgroup.conf ``scontrol show config`` reports.

The configuration text is what ``scontrol show config`` printed on the local substrate (Slurm 24.11 and Debian's
22.05, tests/data/), edited where another value is needed. The step's lines are in the probe's own format; the
probe itself runs here with bash on this host's real cgroup files (a small buffer instead of 512 MiB). This host
has no swap, so the swap-allowed cases are proven here, not on the local cluster.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from pytest_slurmflox.suites._cohort import Across
from pytest_slurmflox.suites._marks import Mark, marked, per_node

from pytest_slurmflox.base.run import Result
from pytest_slurmflox.judges.authkeys import parse_show_config
from pytest_slurmflox.judges.memlimit import (
    MIB,
    Observed,
    Promise,
    configured,
    loosened,
    memory_problem,
    oom_reported,
    probe,
    step_args,
)
from pytest_slurmflox.model.declaredlimits import DeclaredLimits, parse_limits

DATA = Path(__file__).resolve().parents[1] / "data"
LIMIT = 64 * MIB
UNLIMITED_V1 = 9223372036854771712
V1 = "/sys/fs/cgroup/memory/slurm/uid_1000/job_7"
V2 = "/sys/fs/cgroup/system.slice/slurmstepd.scope/job_7"
GIB_KB = 2**20  # SwapTotal of a worker with 1 GiB of swap, in kB as /proc/meminfo prints it

#: Slurm's defaults with memory constrained, as the local substrate configures it; swap allowed (Slurm's default)
STRICT = Promise(constrain_ram=True, constrain_swap=True)
SWAP_ALLOWED = Promise(constrain_ram=True, constrain_swap=False)
#: a target that declares swap unlimited (expect.limits.constrain_swap_space: false): a task may swap past --mem
SWAP_DECLARED = parse_limits({"constrain_swap_space": False})


def _v2(memory_max: int | str, swap_max: int | str, swap_kb: int, hog: str, peak: int | None) -> list[str]:
    """A cgroup v2 task's lines: the task cgroup (no limit of its own), the step's and job's limits above it."""
    lines = [f"swaptotal={swap_kb}"]
    for where, mem, swap in (
        (f"{V2}/step_0/user/task_0", "max", "max"),
        (f"{V2}/step_0", memory_max, swap_max),
        (V2, memory_max, swap_max),
        ("/sys/fs/cgroup", "max", "max"),
    ):
        lines += [f"limit=memory.max {mem} {where}", f"limit=memory.swap.max {swap} {where}"]
    lines += ["fits=0", f"hog={hog}"]
    lines += [f"peak=memory.peak {peak} {V2}/step_0/user/task_0"] if peak is not None else []
    return [*lines, "done"]


def _v1(limit: int, memsw: int | None, swap_kb: int, hog: str, peak: int) -> list[str]:
    """A cgroup v1 task's lines (memsw None: no swap accounting, no memsw file)."""
    lines = [f"swaptotal={swap_kb}"]
    for where, mem in ((f"{V1}/step_0/task_0", UNLIMITED_V1), (f"{V1}/step_0", limit), (V1, limit)):
        lines.append(f"limit=memory.limit_in_bytes {mem} {where}")
        if memsw is not None:
            lines.append(f"limit=memory.memsw.limit_in_bytes {UNLIMITED_V1 if mem == UNLIMITED_V1 else memsw} {where}")
    return [*lines, "fits=0", f"hog={hog}", f"peak=memory.max_usage_in_bytes {peak} {V1}/step_0/task_0", "done"]


def _oom(node: str) -> str:
    return (
        f"slurmstepd-{node}: error: Detected 1 oom_kill event in StepId=7.0. Some of your processes may have been "
        "killed by the cgroup out-of-memory handler.\n"
    )


def _judged(
    promise: Promise, answers: dict[str, list[str]], stderr: str = "", declared: DeclaredLimits | None = None
) -> list[str]:
    """The problems of a replayed step: every node's lines marked as the step prints them, parsed and judged."""
    mark = Mark.new()
    stdout = "".join(f"{mark.nonce}|{node}|{line}\n" for node, lines in answers.items() for line in lines)
    res = marked(Result("srun", "login", "u", 0 if not stderr else 137, stdout, stderr, 1.0), mark)
    step = Across(res, tuple(sorted(answers)), per_node(res))
    output = res.stdout + res.stderr
    return step.wrong(lambda node, lines: memory_problem(lines, output, node, promise, declared))


@pytest.mark.parametrize(
    "name",
    [
        "scontrol-show-config-24.11-local.txt",
        "scontrol-show-config-22.05-bookworm-local.txt",
        "scontrol-show-config-26.05-sid-local.txt",
    ],
)
def test_the_promise_is_read_from_the_cgroup_section_scontrol_prints(name):
    promise = configured(parse_show_config((DATA / name).read_text()))
    assert promise == Promise(constrain_ram=True, constrain_swap=True, allowed_ram=100.0, allowed_swap=0.0)
    assert promise.ram(64) == LIMIT and promise.ram_swap(64) == LIMIT
    assert promise.shown == (
        "cgroup.conf (scontrol show config): ConstrainRAMSpace=yes AllowedRAMSpace=100% ConstrainSwapSpace=yes "
        "AllowedSwapSpace=0% MinRAMSpace=30 MB"
    )
    assert configured({"SlurmctldPort": "6817"}) is None  # no cgroup section: nothing to judge against


def test_slurm_arithmetic_shares_floors_and_swap():
    half = Promise(constrain_ram=True, constrain_swap=True, allowed_ram=50.0, allowed_swap=25.0)
    assert (half.ram(64), half.ram_swap(64)) == (32 * MIB, 48 * MIB)
    assert Promise(constrain_ram=True, constrain_swap=False, allowed_ram=10.0).ram(64) == 30 * MIB  # MinRAMSpace
    # ConstrainRAMSpace=no with swap constrained: the RAM limit is the RAM+swap limit, AllowedRAMSpace as 100%
    swap_only = Promise(constrain_ram=False, constrain_swap=True, allowed_ram=50.0, allowed_swap=100.0)
    assert swap_only.ram(64) == swap_only.ram_swap(64) == 128 * MIB
    assert Promise(constrain_ram=False, constrain_swap=False).ram(64) is None
    assert SWAP_ALLOWED.ram_swap(64) is None


def test_v2_without_swap_killed_passes():
    answer = _v2(LIMIT, 0, 0, hog="137", peak=LIMIT - 4096)
    assert _judged(STRICT, {"worker1": answer}, _oom("worker1")) == []
    assert _judged(SWAP_ALLOWED, {"worker1": _v2(LIMIT, "max", 0, "137", LIMIT)}, _oom("worker1")) == []


def test_v2_swap_allowed_a_task_that_swapped_within_its_limit_passes():
    """ConstrainSwapSpace=no (Slurm's default) on a worker with 1 GiB of swap, declared by the target: the 512 MiB
    buffer is swapped out, the task survives, and its cgroup's peak RAM stayed at its 64 MiB limit."""
    answers = {"worker1": _v2(LIMIT, "max", GIB_KB, hog="0", peak=LIMIT), "worker2": _v2(LIMIT, 0, 0, "137", LIMIT)}
    assert _judged(SWAP_ALLOWED, answers, _oom("worker2"), SWAP_DECLARED) == []
    seen = Observed.parse(answers["worker1"])
    assert seen.room == LIMIT + 2**30
    assert seen.shown == (
        f"memory.max=64 MiB at {V2}/step_0, memory.swap.max=max at {V2}/step_0/user/task_0, SwapTotal=1024 MiB, "
        f"peak memory.peak=64 MiB at {V2}/step_0/user/task_0"
    )
    # a swap limit that holds the rest (ConstrainSwapSpace=yes, AllowedSwapSpace=800%) allows it as well
    generous = Promise(constrain_ram=True, constrain_swap=True, allowed_swap=800.0)
    declared = parse_limits({"allowed_swap_space": 800})
    assert _judged(generous, {"worker1": _v2(LIMIT, 512 * MIB, GIB_KB, "0", LIMIT)}, declared=declared) == []
    assert loosened(generous, declared) == []


def test_swap_the_target_does_not_declare_fails_naming_the_worker_with_swap_only():
    """The same cluster and step against a target that declares nothing: worker1 has swap and let the task grow
    past its --mem (a leniency the cluster configured, not a promise): FAIL naming worker1 only; worker2 has no swap
    and killed its task. AllowedSwapSpace=800% undeclared is named from the configuration itself."""
    answers = {"worker1": _v2(LIMIT, "max", GIB_KB, hog="0", peak=LIMIT), "worker2": _v2(LIMIT, 0, 0, "137", LIMIT)}
    problems = _judged(SWAP_ALLOWED, answers, _oom("worker2"))
    assert len(problems) == 1 and problems[0].startswith(
        "worker1: the kernel lets the task hold 1088 MiB of RAM and swap, more than the 64 MiB the target allows "
        "for --mem=64 (not declared (expect.limits.allowed_ram_space; Slurm's default 100 holds)"
    ), problems
    assert "expect.limits.constrain_swap_space; Slurm's default true holds" in problems[0]
    generous = Promise(constrain_ram=True, constrain_swap=True, allowed_swap=800.0)
    assert loosened(generous, DeclaredLimits()) == [
        "configured AllowedSwapSpace=800% lets a task swap beyond its --mem: not declared "
        "(expect.limits.allowed_swap_space; Slurm's default 0 holds)"
    ]


def test_allowed_ram_space_1000_fails_unless_declared_and_names_both_values():
    """AllowedRAMSpace=1000: task/cgroup writes a 640 MiB limit for --mem=64, the 512 MiB buffer fits and the
    kernel enforces exactly what the configuration says; by the configuration alone it PASSed. Undeclared: FAIL
    (the configuration, and every worker by what its kernel allows); declared 1000: PASS, both values shown."""
    loose = Promise(constrain_ram=True, constrain_swap=True, allowed_ram=1000.0)
    answers = {w: _v2(640 * MIB, 0, 0, "0", 520 * MIB) for w in ("worker1", "worker2")}
    assert _judged(loose, answers, declared=parse_limits({"allowed_ram_space": 1000})) == []
    assert loosened(loose, parse_limits({"allowed_ram_space": 1000})) == []
    assert loosened(loose, DeclaredLimits()) == [
        "configured AllowedRAMSpace=1000% lets a task hold more RAM than its --mem: not declared "
        "(expect.limits.allowed_ram_space; Slurm's default 100 holds)"
    ]
    problems = _judged(loose, answers)
    assert [p.split(":")[0] for p in problems] == ["worker1", "worker2"], problems
    assert all("hold 640 MiB of RAM and swap, more than the 64 MiB the target allows" in p for p in problems)
    assert all("AllowedRAMSpace=1000%" in p for p in problems), problems


def test_v2_swap_allowed_but_no_memory_limit_fails_naming_the_worker_and_the_configured_values():
    answers = {"worker1": _v2(LIMIT, "max", GIB_KB, "0", LIMIT), "worker2": _v2("max", "max", GIB_KB, "0", 600 * MIB)}
    problems = _judged(SWAP_ALLOWED, answers, declared=SWAP_DECLARED)
    assert len(problems) == 1 and problems[0].startswith("worker2: "), problems
    assert (
        f"the kernel limits the task's RAM to max (memory.max=max at {V2}/step_0/user/task_0), not the 64 MiB "
        "Slurm's configuration promises for --mem=64"
    ) in problems[0]
    assert "a task that uses 512 MiB with --mem=64 was not killed and held 600 MiB of RAM" in problems[0]
    assert "ConstrainRAMSpace=yes AllowedRAMSpace=100% ConstrainSwapSpace=no" in problems[0]
    assert "SwapTotal=1024 MiB" in problems[0]


def test_swap_allowed_a_survivor_that_held_its_buffer_in_ram_fails():
    """A limit the task's own cgroup ignored: it survived and its peak shows 512 MiB of RAM under a 64 MiB limit."""
    problems = _judged(SWAP_ALLOWED, {"worker3": _v2(LIMIT, "max", GIB_KB, "0", 520 * MIB)}, declared=SWAP_DECLARED)
    assert problems and problems[0].startswith(
        "worker3: a task that uses 512 MiB with --mem=64 was not killed and held 520 MiB of RAM (memory.peak=520 MiB"
    ), problems
    assert "beyond its RAM limit of 64 MiB" in problems[0]
    lines = [line for line in _v2(LIMIT, "max", GIB_KB, "0", None) if not line.startswith("peak=")]
    problems = _judged(SWAP_ALLOWED, {"worker3": lines}, declared=SWAP_DECLARED)
    assert problems and "cannot be shown to have stayed within its RAM limit" in problems[0], problems


def test_constrain_swap_yes_and_the_task_survived_fails_as_before():
    """ConstrainSwapSpace=yes AllowedSwapSpace=0: RAM and swap together hold 64 MiB, a survivor is not killed."""
    problems = _judged(STRICT, {"worker1": _v2(LIMIT, 0, 0, "0", LIMIT)})
    assert problems and problems[0].startswith(
        "worker1: a task that uses 512 MiB with --mem=64 was not killed, though its RAM and swap together may hold "
        "only 64 MiB"
    ), problems
    # the kernel allows swap the configuration does not (memory.swap.max=max on a worker with swap): both named
    problems = _judged(STRICT, {"worker1": _v2(LIMIT, "max", GIB_KB, "0", LIMIT)})
    assert "the kernel lets the task hold 1088 MiB of RAM and swap, more than the 64 MiB" in problems[0], problems
    assert "was not killed, though its RAM and swap together may hold only 64 MiB" in problems[0]


def test_killed_without_slurms_report_fails():
    problems = _judged(STRICT, {"worker1": _v2(LIMIT, 0, 0, "137", LIMIT)})
    assert problems and problems[0].startswith("worker1: Slurm did not report an OOM kill there"), problems


def test_v1_equivalents():
    """v1: memory.limit_in_bytes and memory.memsw.limit_in_bytes (RAM+swap), the task cgroup unlimited below them."""
    # no swap, killed: PASS
    assert _judged(STRICT, {"worker1": _v1(LIMIT, LIMIT, 0, "137", LIMIT)}, _oom("worker1")) == []
    # swap allowed (no memsw limit, or no swap accounting at all) and the task swapped within its limit: PASS
    assert (
        _judged(SWAP_ALLOWED, {"worker1": _v1(LIMIT, UNLIMITED_V1, GIB_KB, "0", LIMIT - MIB)}, "", SWAP_DECLARED) == []
    )
    assert _judged(SWAP_ALLOWED, {"worker1": _v1(LIMIT, None, GIB_KB, "0", LIMIT)}, "", SWAP_DECLARED) == []
    # the same, undeclared: FAIL
    assert _judged(SWAP_ALLOWED, {"worker1": _v1(LIMIT, None, GIB_KB, "0", LIMIT)})
    # no RAM limit (ConstrainRAMSpace=yes in the configuration): FAIL naming the worker
    problems = _judged(SWAP_ALLOWED, {"worker2": _v1(UNLIMITED_V1, None, GIB_KB, "0", 540 * MIB)})
    assert problems and problems[0].startswith("worker2: the kernel limits the task's RAM to max"), problems
    # ConstrainSwapSpace=yes and the task survived: FAIL
    problems = _judged(STRICT, {"worker1": _v1(LIMIT, LIMIT, 0, "0", LIMIT)})
    assert "was not killed, though its RAM and swap together may hold only 64 MiB" in problems[0], problems


def test_a_configuration_that_constrains_nothing_fails_with_what_the_kernel_did():
    """ConstrainRAMSpace=no and ConstrainSwapSpace=no (the live mutation in test_cgroups_local.py): Slurm makes no
    memory cgroup, the task sits in its worker's, and the buffer survives."""
    nothing = Promise(constrain_ram=False, constrain_swap=False)
    answer = ["swaptotal=0", f"limit=memory.limit_in_bytes {UNLIMITED_V1} /sys/fs/cgroup/memory", "fits=0", "hog=0"]
    answer += ["peak=memory.max_usage_in_bytes 700000000 /sys/fs/cgroup/memory", "done"]
    problems = _judged(nothing, {"worker1": answer})
    assert problems == [
        "worker1: Slurm's configuration limits no task to its --mem=64 (it constrains neither RAM nor swap); a task "
        "that uses 512 MiB with --mem=64 was not killed and held 667.57 MiB of RAM (memory.max_usage_in_bytes=667.57 "
        "MiB at /sys/fs/cgroup/memory) under no RAM limit (the kernel: memory.limit_in_bytes=max at "
        "/sys/fs/cgroup/memory, SwapTotal=0 MiB, peak memory.max_usage_in_bytes=667.57 MiB at /sys/fs/cgroup/memory; "
        "cgroup.conf (scontrol show config): ConstrainRAMSpace=no AllowedRAMSpace=100% ConstrainSwapSpace=no "
        "AllowedSwapSpace=0% MinRAMSpace=30 MB)"
    ]


def test_a_share_of_the_request_is_judged_by_that_share():
    half = Promise(constrain_ram=True, constrain_swap=True, allowed_ram=50.0)
    assert _judged(half, {"worker1": _v1(32 * MIB, 32 * MIB, 0, "137", 32 * MIB)}, _oom("worker1")) == []
    problems = _judged(half, {"worker1": _v1(LIMIT, LIMIT, 0, "137", LIMIT)}, _oom("worker1"))
    assert problems and "limits the task's RAM to 64 MiB" in problems[0] and "not the 32 MiB" in problems[0]


def test_a_worker_printing_no_limit_lines_fails_naming_it():
    answers = {"worker1": _v2(LIMIT, 0, 0, "137", LIMIT), "worker2": ["swaptotal=0", "fits=0", "hog=137", "done"]}
    problems = _judged(STRICT, answers, _oom("worker1") + _oom("worker2"))
    assert problems == [
        "worker2: the task showed no memory limit of its cgroup (memory.max or memory.limit_in_bytes): "
        "['swaptotal=0', 'fits=0', 'hog=137', 'done']"
    ]
    assert _judged(STRICT, {"worker1": ["garbage", "limit=memory.max"]}) == [
        "worker1: the task showed no memory limit of its cgroup (memory.max or memory.limit_in_bytes): "
        "['garbage', 'limit=memory.max']"
    ]


def test_the_probe_reads_this_process_limits_swap_and_peak():
    """The probe with bash on this host's real files (a 16 MiB buffer for the hog): every limit up to the root it
    sees, SwapTotal, both buffers' exit status and the task cgroup's peak."""
    done = subprocess.run(["bash", "-c", probe(hog_mb=16)], capture_output=True, text=True, timeout=60, check=True)
    lines = done.stdout.splitlines()
    assert lines[-1] == "done" and "fits=0" in lines and "hog=0" in lines, lines
    seen = Observed.parse(lines)
    assert seen.ram is not None and seen.ram.where.startswith("/sys/fs/cgroup"), lines
    assert seen.peak is not None and seen.peak.value and seen.peak.value > 0, lines
    with open("/proc/meminfo") as meminfo:
        swap_kb = next(int(line.split()[1]) for line in meminfo if line.startswith("SwapTotal:"))
    assert seen.swap_total == swap_kb * 1024


def _replay_26_05(name: str) -> tuple[Across, str, Promise]:
    """The real step T8 ran on sid's Slurm 26.05.5 (local substrate, 2 workers, probe() as the check builds it, with
    and without srun --label), with the cgroup.conf that cluster's scontrol show config printed."""
    stdout = (DATA / f"t8-oom-26.05-sid-local-{name}.stdout").read_text()
    stderr = (DATA / f"t8-oom-26.05-sid-local-{name}.stderr").read_text()
    res = marked(Result("srun", "login", "u", 1, stdout, stderr, 1.0), Mark("sfx3c9e1a7b5d20"))
    promise = configured(parse_show_config((DATA / "scontrol-show-config-26.05-sid-local.txt").read_text()))
    assert promise is not None
    return Across(res, ("worker1", "worker2"), per_node(res)), res.stdout + res.stderr, promise


def test_slurm_26_05_names_no_node_in_its_oom_report_and_label_ties_it_to_the_worker():
    """26.05's slurmstepd writes ``[time] error: Detected 1 oom_kill event ...`` into the task's stderr, naming no node;
    srun names only task 0. Unlabelled, worker2's report cannot be told from worker1's (the FAIL the first sid run
    met); under --label each report carries its task's rank, which the task's marked lines tie to its worker."""
    step, output, promise = _replay_26_05("unlabelled")
    assert oom_reported(output, "worker1") and not oom_reported(output, "worker2")
    problems = step.wrong(lambda node, lines: memory_problem(lines, output, node, promise))
    assert list(problems.workers) == ["worker2"], problems
    assert "Slurm did not report an OOM kill there" in problems[0]

    step, output, promise = _replay_26_05("labelled")
    assert sorted(step.lines) == ["worker1", "worker2"]  # the marked lines are read through srun's rank label
    assert oom_reported(output, "worker1") and oom_reported(output, "worker2")
    assert step.wrong(lambda node, lines: memory_problem(lines, output, node, promise)) == []
    # a labelled report of another rank is not this worker's
    only_rank_0 = "\n".join(line for line in output.splitlines() if not line.startswith("1: ["))
    assert not oom_reported(only_rank_0.replace("worker1: task 0", "x"), "worker2")


def test_label_is_asked_for_from_26_05_by_the_reported_version():
    assert step_args((26, 5, 5)) == "--mem=64 --label"
    assert step_args((24, 11, 5)) == step_args((22, 5, 8)) == "--mem=64"
