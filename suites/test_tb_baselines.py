"""TB: performance baselines, measured on every worker and judged worker by worker (and ring pair by ring pair).

Requirement: every worker (or ring pair) shows each metric within the band the target declares for it, and,
where the target declares none, no worker is far from the cohort: a throughput below 0.7 x the cohort's median or
a latency above 1.5 x it (``--slurmflox-outlier-throughput``, ``--slurmflox-outlier-latency``) FAILs naming the
worker. Every value goes into ``evidence.json`` (the check's ``metrics``: metric, worker or pair, value, unit,
method); a metric the target declares nothing for is recorded and carries no verdict of its own.

Where the expectations come from: the target's ``expect.performance`` (per metric ``reference``, ``unit``,
``lower``/``upper`` absolute or a percent of the reference, and per kind of worker under ``features``: a Slurm node
feature or partition the worker has, as ``scontrol show node`` lists them) and the median of the workers of the
same kind. Never the worker under test: a worker is compared with the band and with the others, never with itself.

How each metric is measured, each metric in ONE multi-node step over the whole cohort (a step per metric, not per
worker: the cost grows linearly with the workers only where the measurement itself does):

- MPI latency (8 B) and bandwidth (1 MiB): an OSU-style ping-pong (osu_latency / osu_bw's ping-pong form: the
  initiator sends, the partner returns the message; half the median round trip is the latency, bytes over half
  the median round trip the bandwidth; OSU averages, but on cores shared with other work a few delayed wake-ups
  dominate a mean and two idle runs differed 2x, where the median holds) between each worker and its ring
  neighbour, in two phases: every worker i pings i+1, then every worker i pings i-1, one pair at a time with the
  others waiting at a barrier, so each worker is measured towards both neighbours and in both directions. The
  program is compiled on a worker with the worker's own mpicc (as T6's) and launched with ``srun --mpi=pmix``, one
  rank per worker.
- Memory bandwidth: a STREAM-triad-like kernel (``a[i] = b[i] + s * c[i]`` over 2 Mi doubles) on every worker,
  compiled like the MPI program, reported as STREAM reports it: the best of several trials (stream.c keeps the
  minimum time of NTIMES trials: https://www.cs.virginia.edu/stream/FTP/Code/stream.c), so one preemption by other
  work on the host does not make a healthy worker an outlier. Each trial repeats whole passes for at least
  :data:`TRIAL_MS` of wall time, longer than the CFS bandwidth period (100 ms by default: the kernel's
  Documentation/scheduler/sched-bwc.rst), so a CPU quota on the worker slows every trial and shows in the best one.
  The workers take turns within the one step, trial by trial (every worker's first trial, then every worker's
  second, ...), so workers sharing a host's cores never measure each other, and a load on the host that comes and
  goes falls on every worker's trials alike: in CI, with the workers taking whole turns, a healthy worker's three
  trials all met another test's load and its best was 0.54x of its peer's.
- Shared storage: every worker writes a 32 MiB file to the shared home (``dd``, fsync'd), and the next worker of a
  ring over the cohort reads it back (as T9's check). Writes and reads are both timed trials, the fastest of three
  counting: a trial writes (or reads) the file through again and again for at least :data:`TRIAL_MS`, timed on the
  worker (one pass of a few ms measures mostly the host's scheduling: a healthy worker's read at 0.48x of its
  peer's, and in CI a healthy worker's single write at 0.49x, were seen on a loaded host). The workers write
  together and then read together, each phase opened by a barrier on the shared home, so each worker's trials
  share the storage with the same peers for the same time. The first worker's file is read the same way at the
  login endpoint (``storage_read_login``, one value for the cluster: no cohort to compare it with, judged by its
  band).
- Scheduler: submit-to-start of one one-task step (the login's clock before ``srun``, the task's clock when it
  runs: one host's clock on the local substrate, NTP-close clocks elsewhere), the wall time of one ``srun`` of a
  task on every worker, and a burst of N one-task batch jobs (N from ``expect.performance.scheduler_burst.jobs``,
  default 50) as jobs per second from the first submission to the last job gone from the queue.
"""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Iterable

import pytest

from pytest_slurmflox.base.run import command_line, quoted
from pytest_slurmflox.base.waits import job_timeout
from pytest_slurmflox.harness.options import outlier_ratios
from pytest_slurmflox.judges.baselines import (
    Sample,
    annotated,
    best_of,
    burst_jobs,
    declared_problems,
    kind_of,
    outliers,
    parse_lines,
)
from pytest_slurmflox.model.evidence import METRICS

from ._capability import declared, requirement
from ._cohort import across, ring, ring_case
from ._tb_programs import PINGPONG, TRIAD, TRIAL_MS, TRIALS

pytestmark = [pytest.mark.acceptance, pytest.mark.TB]

#: How many times at most a cohort whose triad values disagree is measured (each worker's best counts).
ROUNDS = 3
#: Each worker's file on the shared home (MiB), and how long its reader waits for it.
STORAGE_MIB = 32
#: How often one ``cat`` of a timed read reads the file through; a timed read repeats it for :data:`TRIAL_MS`.
READ_PASSES = 4
#: The storage metrics' line names: a worker's write, the next worker's read, the login endpoint's read.
STORAGE_METRICS = ("storage_write", "storage_read", "storage_read_login")
VISIBLE_WITHIN = 30


def _compiled(submit, target, name: str, source: str) -> str:
    """``source`` compiled now on a worker with its own mpicc (T6's way); SKIP naming the capability without one."""
    outdir = submit.made_outdir()
    target.login.run(quoted("cat > %s/%s.c", outdir, name), input=source).check()
    program = f"{outdir}/{name}"
    compile_it = quoted("command -v mpicc >/dev/null || exit 97; mpicc -O2 -o %s %s.c", program, program)
    build = submit.srun("-N1 -n1", command_line("bash -c", [compile_it]))
    if not build.ok:
        pytest.skip(f"missing capability mpi-probe: the workers cannot compile {name}.c (no working mpicc)")
    return program


def _problems(request, target, samples: list[Sample]) -> tuple[list[str], dict]:
    """What the judges find in ``samples`` (the declared band, then the cohort's median where nothing is declared),
    and the judging's terms: the declared entries of these metrics, the outlier ratios and each worker's kind."""
    wanted = {s.metric for s in samples}
    performance = {k: v for k, v in target.spec.performance.items() if k in wanted}
    throughput, latency = outlier_ratios(request.config)
    # a worker is compared with workers of its kind, and judged by its kind's declared band (features, partitions)
    kinds = {node.name: kind_of(node.raw) for node in target.slurm.nodes()}
    ratios = {"throughput_ratio": throughput, "latency_ratio": latency, "kinds": kinds}
    problems = declared_problems(samples, performance, kinds) + outliers(samples, performance, **ratios)
    return problems, {"declared": performance, **ratios}


def _judged(request, target, samples: list[Sample], expected: str, *evidence, rounds: int = 0) -> None:
    """Record ``samples`` in the check's report (evidence.json ``metrics``, with the ``rounds`` they are the best
    of where the cohort was measured in rounds) and judge them: the declared band, then the cohort's median where
    nothing is declared."""
    problems, terms = _problems(request, target, samples)
    recorded = annotated(samples, terms.pop("declared"), **terms)
    recorded = [{**entry, "rounds": rounds} for entry in recorded] if rounds else recorded
    request.node.user_properties.append((METRICS, json.dumps(recorded)))
    shown = "\n".join(f"{s.metric} {s.subject} {s.value:g}" for s in samples)
    requirement(not problems, f"{expected}: " + "; ".join(problems), *evidence, "measured:\n" + shown)


def _complete(samples: list[Sample], metric: str, subjects: list[str]) -> list[str]:
    got = {s.subject for s in samples if s.metric == metric}
    return [f"{metric}: no value for {subject}" for subject in subjects if subject not in got]


def _initiated(samples: list[Sample], metric: str, workers: list[str]) -> list[str]:
    """Each worker starts a ping-pong with both ring neighbours (one when the ring is two workers): the workers
    that did not report that many pairs (the ring follows the ranks, which Slurm orders, not the names)."""
    each = 2 if len(workers) > 2 else 1
    counts = {w: sum(1 for s in samples if s.metric == metric and s.subject.split("->")[0] == w) for w in workers}
    return [f"{metric}: {w} reported {c} of its {each} ring pairs" for w, c in counts.items() if c != each]


def test_mpi_pingpong_latency_and_bandwidth_between_ring_neighbours(request, submit, target, workers):
    """OSU-style ping-pong (8 B latency, 1 MiB bandwidth) between each worker and both ring neighbours, each
    direction, one MPI step over the cohort: a pair outside its declared band, or a worker whose best pair is far
    from the cohort's, FAILs naming it."""
    if len(workers) < 2:
        pytest.skip("missing capability two-workers: the cohort has fewer than two workers")
    program = _compiled(submit, target, "tb_pingpong", PINGPONG)
    # ranks waiting their turn yield the CPU (Open MPI busy-polls otherwise, starving the pair on shared cores)
    script = "OMPI_MCA_mpi_yield_when_idle=1 " + quoted("%s", program)
    step = across(submit, workers, script, args="--mpi=pmix", timeout=job_timeout(stages=2))
    samples = parse_lines(line for lines in step.lines.values() for line in lines)
    missing = [p for m in ("mpi_latency", "mpi_bandwidth") for p in _initiated(samples, m, sorted(workers))]
    requirement(
        step.result.ok and not missing, "a ping-pong value for every ring pair: " + "; ".join(missing), step.result
    )
    _judged(request, target, samples, "MPI latency and bandwidth of every ring pair", step.result)


def test_memory_triad_bandwidth_on_every_worker(request, submit, target, workers):
    """A STREAM-triad-like kernel on every worker in one step, the workers taking turns trial by trial (each task
    waits, sleeping, for the mark on the shared home of the trial before its own, at most ``TURN_WAIT`` s of
    _tb_programs.py): workers that share a host's cores (the local substrate) do not measure each other, and a load
    on the host that comes and goes meets every worker's trials alike, not one worker's all. A cohort that disagrees
    (a worker outside its band or far from the median) is measured again, at most :data:`ROUNDS` rounds, each
    worker's best counting: a passing load rarely meets the same worker in every round, a slow worker is slow in
    each. Outside the declared band, or below the cohort's median by the outlier ratio, FAILs naming the worker."""
    program = _compiled(submit, target, "tb_triad", TRIAD)
    samples: list[Sample] = []
    done = 0
    while done < ROUNDS:
        done += 1
        turn = quoted("%s/tb-turn-%s", submit.made_outdir(), secrets.token_hex(4))
        step = across(submit, workers, f"{quoted('%s', program)} {turn}", timeout=job_timeout(stages=2) + len(workers))
        submit.login.run(f"rm -f {turn}-*")
        samples = best_of(samples, parse_lines(line for lines in step.lines.values() for line in lines))
        missing = _complete(samples, "memory_triad", sorted(workers))
        requirement(
            step.result.ok and not missing, "a triad value for every worker: " + "; ".join(missing), step.result
        )
        if not _problems(request, target, samples)[0]:
            break
    rounds = f"rounds: {done} of at most {ROUNDS} (each worker's best counts)"
    _judged(request, target, samples, "memory bandwidth on every worker", step.result, rounds, rounds=done)


def test_shared_storage_write_and_read_throughput(request, submit, target, workers, run_id):
    """Every worker writes a file to the shared home and the next worker of a ring reads it, one step: write and
    read throughput per worker, judged like every metric. The workers write together and read together, each
    phase opened by a barrier on the shared home, so every worker's trials share the storage (and, on the local
    substrate, the host's cores) with the same peers for the same time: the last to start is never alone."""
    from pytest_slurmflox.model.declared import HOME

    declared(target, HOME)
    if not target.spec.expect.settings.worker_home_path:
        pytest.skip("missing capability shared-home: WORKER_HOME_PATH is empty, workers mount no shared home")
    if len(workers) < 2:
        pytest.skip("missing capability two-workers: the cohort has fewer than two workers")
    outdir = submit.made_outdir()
    own = f"tb-{run_id}-{time.time_ns()}"
    pairs = ring(sorted(workers))

    def path(node: str) -> str:
        return quoted("%s/%s-%s.dat", outdir, own, node)

    def reading(file: str, metric: str) -> str:
        return timed(f"cat {' '.join([file] * READ_PASSES)} >/dev/null", READ_PASSES, metric)

    dd = f"dd if=/dev/zero bs=1M count={STORAGE_MIB} conv=fsync status=none of="
    writes = ring_case(pairs, lambda me, _r: timed(dd + path(me), 1, "storage_write"))
    keep = pairs[0][0]  # the first writer's file stays for the login endpoint's read
    reads = ring_case([(r, w) for w, r in pairs], lambda _me, writer: (
        reading(path(writer), "storage_read") + ("" if writer == keep else f"; rm -f {path(writer)}")))  # fmt: skip
    marks = quoted("%s/%s", outdir, f"{own}-mark")
    script = f"{barrier(marks + '-write', workers)}; {writes}; {barrier(marks + '-read', workers)}; {reads}"
    step = across(submit, workers, script, timeout=job_timeout(stages=2))
    cleanup = f"rm -f {marks}-*"
    at_login = target.login.run(
        command_line("sh -c", [f"{reading(path(keep), 'storage_read_login')}; rm -f {path(keep)}; {cleanup}"])
    )
    samples = storage_samples({**step.lines, "login": at_login.stdout.splitlines()})
    missing = _complete(samples, "storage_write", sorted(workers)) + _complete(samples, "storage_read", sorted(workers))
    missing += _complete(samples, "storage_read_login", ["login"])
    requirement(
        step.result.ok and at_login.ok and not missing,
        "a storage value for every worker and the login endpoint: " + "; ".join(missing),
        step.result,
        at_login,
    )
    _judged(request, target, samples, "shared-storage throughput on every worker and at login", step.result, at_login)


def barrier(phase: str, workers: Iterable[str]) -> str:
    """Shell: this worker touches ``<phase>-<its name>`` (``phase``: a quoted path prefix on the shared home) and
    waits, at most :data:`VISIBLE_WITHIN` s, until every worker's mark is there. A worker that never comes costs
    the wait, then the others go on; its missing lines FAIL the check naming it. Each look opens the marks'
    directory first (``: <dir``): on an NFS home that open revalidates it, as the triad's turns do (_tb_programs.py),
    so a cached "no such file" does not hide a mark for the attribute cache's 30 s."""
    marks = " ".join(phase + quoted("-%s", w) for w in sorted(workers))
    return (f'touch {phase}-"$SLURMD_NODENAME"; d=$(dirname {phase}); for _ in $(seq {VISIBLE_WITHIN * 20}); do '
            f': 2>/dev/null <"$d"; a=1; for m in {marks}; do [ -e "$m" ] || {{ a=0; break; }}; done; '
            "[ $a = 1 ] && break; sleep 0.05; done")  # fmt: skip


def timed(command: str, passes: int, metric: str) -> str:
    """Shell that runs :data:`TRIALS` timed trials of ``command`` (each going ``passes`` times through the file):
    a trial repeats it for at least :data:`TRIAL_MS` of wall time and prints ``<metric> <start ns> <end ns>
    <passes>``; a failing ``command`` ends the trial without a line."""
    return (f"for _ in $(seq {TRIALS}); do s=$(date +%s%N); n=0; while {command}; do n=$((n+{passes})); "
            f"e=$(date +%s%N); [ $((e-s)) -ge {TRIAL_MS}000000 ] && {{ echo {metric} $s $e $n; break; }}; "
            "done; done")  # fmt: skip


def storage_samples(lines: dict[str, list[str]]) -> list[Sample]:
    """``storage_write|storage_read|storage_read_login <start ns> <end ns> <passes>`` lines per worker (one per
    :func:`timed` trial) as MB/s samples of that worker, the best of its lines per metric."""
    samples = []
    for node, said in lines.items():
        for line in said:
            parts = line.split()
            if len(parts) == 4 and parts[0] in STORAGE_METRICS and all(p.isdigit() for p in parts[1:]):
                seconds = max(int(parts[2]) - int(parts[1]), 1) / 1e9
                samples.append(Sample(parts[0], node, int(parts[3]) * STORAGE_MIB * 1.048576 / seconds))
    best: dict[tuple[str, str], Sample] = {}
    for sample in samples:  # the fastest of a worker's trials: one pass of a few ms is mostly the host's jitter
        key = (sample.metric, sample.subject)
        if key not in best or sample.value > best[key].value:
            best[key] = sample
    return list(best.values())


def test_scheduler_submit_to_start_launch_and_burst(request, submit, target, workers):
    """Submit-to-start of one task, the launch of one task on every worker, and a burst of N one-task jobs as
    jobs/s: cluster-wide values, judged only against a declared band."""
    first = sorted(workers)[0]
    start_line = command_line(
        "srun", ["-J", submit.name, *submit.placement, "-N1", "-n1", "-w", first, "date", "+%s%N"]
    )
    one = submit.login.run(f"date +%s%N; {start_line}", timeout=job_timeout())
    stamps = [int(x) for x in one.stdout.split() if x.isdigit()]
    launch = across(submit, workers, "true", timeout=job_timeout())
    n = burst_jobs(target.spec.performance)
    job = command_line(
        "sbatch", ["--parsable", "-J", submit.name, *submit.placement, "-o", "/dev/null", "--wrap", "true"]
    )
    queue = command_line("squeue", ["-h", "-n", submit.name])
    loop = quoted("s=$(date +%%s%%N); for _ in $(seq %s); do ", n)
    line = loop + job + ' >/dev/null || exit 3; done; while [ -n "$(' + queue + ')" ]; do sleep 0.2; done; '
    burst = submit.login.run(line + "echo $s $(date +%s%N)", timeout=job_timeout(stages=3) + n)
    ends = [int(x) for x in burst.stdout.split() if x.isdigit()]
    ok = one.ok and len(stamps) >= 2 and launch.result.ok and burst.ok and len(ends) >= 2
    requirement(
        ok, "the scheduler timings could be taken (one task, one task per worker, the burst)", one, launch.result, burst
    )
    samples = [
        Sample("scheduler_submit_to_start", "cluster", (stamps[-1] - stamps[0]) / 1e9),
        Sample("scheduler_srun_launch", "cluster", launch.result.duration),
        Sample("scheduler_burst", "cluster", n / ((ends[-1] - ends[-2]) / 1e9)),
    ]
    _judged(request, target, samples, f"scheduler timings (burst of {n} jobs)", one, launch.result, burst)
