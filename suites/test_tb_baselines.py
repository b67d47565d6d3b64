"""TB: performance baselines, measured on every worker and judged worker by worker (and ring pair by ring pair).

Requirement: every worker (or ring pair) shows each metric within the band the target declares for it (a
reference declared without ``lower``/``upper`` is bounded anyway: judges/baselines.py ``default_band``), and, always
beside the band, no worker is far from the others: a throughput below 0.7 x the median of the *other* workers or a
latency above 1.5 x it (``--slurmflox-outlier-throughput``, ``--slurmflox-outlier-latency``) FAILs naming the worker;
a slow link names the worker every link of which is slow, else the pair (judges/outliers.py). Every value goes into
``evidence.json`` (the check's ``metrics``: metric, worker or pair, value, unit, method, what judged it); a metric
nothing could judge (no reference, no cohort to compare with) is said in the check's evidence, and in a sign-off of
a target that declares ``expect.performance`` (TB required) it makes the check NOT RUN: a figure nothing judged is
no PASS.

Where the expectations come from: the target's ``expect.performance`` (per metric ``reference``, ``unit``,
``lower``/``upper`` absolute or a percent of the reference, and per kind of worker under ``features``: a Slurm node
feature or partition the worker has, as ``scontrol show node`` lists them; the same names say which workers the
cohort judge compares apart), the other workers and pairs of this run (and, where ``scontrol show topology`` knows
them, the workers under the same leaf switch). Never the worker under test: a worker is compared with the band and
with the others, never with itself.

How each metric is measured, each metric in ONE multi-node step over the whole cohort (a step per metric, not per
worker: the cost grows linearly with the workers only where the measurement itself does):

- MPI latency (8 B) and bandwidth (1 MiB messages): an OSU-style ping-pong for the latency (osu_latency's form: the
  initiator sends, the partner returns the message; half the median round trip; OSU averages, but on cores shared
  with other work a few delayed wake-ups dominate a mean and two idle runs differed 2x, where the median holds) and
  a one-way stream for the bandwidth (osu_bw's form: a window of 8 messages, then a 1-byte ack; bytes over the
  fastest window: a way out or in that is throttled shows in that direction alone) between each worker and its ring
  neighbour, in two phases: every worker i pings i+1, then every worker i pings i-1, one pair at a time with the
  others waiting at a barrier, so each worker is measured towards both neighbours and in both directions. The
  program is compiled on a worker with the worker's own mpicc (as T6's) and launched with ``srun --mpi=<plugin>`` (the
  target's ``slurm.mpi``, as T6), one rank per worker.
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
  ring over the cohort reads it back (as T9's check) past its own page cache (``dd iflag=direct``, else the file's
  cached pages dropped before each pass; the evidence says which: a file read again and again from the reader's
  cache measured the reader's memory, not the storage). Writes and reads are both timed trials, the fastest of three
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
from dataclasses import dataclass

import pytest

from pytest_slurmflox.base.run import command_line, quoted
from pytest_slurmflox.base.waits import job_timeout
from pytest_slurmflox.harness.options import get_option, outlier_ratios
from pytest_slurmflox.judges.baselines import Sample, best_of, burst_jobs, kind_of, parse_lines
from pytest_slurmflox.judges.outliers import Assessment, Ratios, assess, switches_of
from pytest_slurmflox.model.evidence import METRICS
from pytest_slurmflox.reporting.signoff import NOT_RUN_PREFIX

from ._capability import declared, requirement
from ._cohort import across, ring, ring_case
from ._tb_programs import PINGPONG, TRIAD
from ._tb_storage import STORAGE_MIB, barrier, reading, storage_samples, timed

pytestmark = [pytest.mark.acceptance, pytest.mark.TB]

#: How many times at most a cohort whose values disagree is measured (each worker's or pair's best counts).
ROUNDS = 3


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


@dataclass(frozen=True)
class Terms:
    """What one check's samples are judged by: the declared entries, the outlier ratios, each worker's kind
    (features and partitions, ``scontrol show node``) and leaf switch (``scontrol show topology``, where Slurm has
    one), and whether an unjudged metric makes the check NOT RUN (a sign-off of a target that declares
    ``expect.performance``: declared, TB is required, and a figure nothing judged is no PASS)."""

    declared: dict
    ratios: Ratios
    kinds: dict
    switches: dict
    strict: bool

    @classmethod
    def of(cls, request, target) -> Terms:
        throughput, latency = outlier_ratios(request.config)
        kinds = {node.name: kind_of(node.raw) for node in target.slurm.nodes()}
        topology = target.login.run(command_line("scontrol", ["show", "topology"]))
        strict = bool(get_option(request.config, "slurmflox_signoff")) and bool(target.spec.performance)
        declared = dict(target.spec.performance)
        return cls(declared, Ratios(throughput, latency), kinds, switches_of(topology.stdout), strict)

    def assess(self, samples: list[Sample]) -> Assessment:
        wanted = {s.metric for s in samples}
        declared = {k: v for k, v in self.declared.items() if k in wanted}
        return assess(samples, declared, ratios=self.ratios, kinds=self.kinds, switches=self.switches)


def _judged(request, terms: Terms, samples: list[Sample], expected: str, *evidence, rounds: int = 0) -> None:
    """Record ``samples`` in the check's report (evidence.json ``metrics``, each with what judged it, and the
    ``rounds`` they are the best of where the cohort was measured in rounds) and judge them: the declared band and
    the cohort, both. A metric nothing judged is said; under :attr:`Terms.strict` it makes the check NOT RUN."""
    found = terms.assess(samples)
    recorded = [{**entry, "rounds": rounds} for entry in found.records] if rounds else found.records
    request.node.user_properties.append((METRICS, json.dumps(recorded)))
    shown = "\n".join(f"{s.metric} {s.subject} {s.value:g}" for s in samples)
    judges = "judged by:\n" + "\n".join(found.lines())
    requirement(not found.problems, f"{expected}: " + "; ".join(found.problems), *evidence, "measured:\n" + shown,
                judges)  # fmt: skip
    if found.not_run(terms.strict):
        pytest.skip(NOT_RUN_PREFIX + found.not_run(terms.strict))


def _rounds(terms: Terms, measure) -> tuple[list[Sample], object, int]:
    """``measure()`` (-> samples, its step) again while the judges find a problem, at most :data:`ROUNDS` times,
    each subject's best counting: a passing load rarely meets the same worker or pair in every round, a slow one is
    slow in each. The samples, the last step and how many rounds ran."""
    samples: list[Sample] = []
    done = 0
    while done < ROUNDS:
        done += 1
        got, step = measure()
        samples = best_of(samples, got)
        if not terms.assess(samples).problems:
            break
    return samples, step, done


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
    """OSU-style ping-pong (8 B latency) and one-way stream (1 MiB messages, a window of 8: bandwidth from the
    sender to the receiver) between each worker and both ring neighbours, each direction, one MPI step over the
    cohort, measured again while the judges disagree (at most :data:`ROUNDS` rounds, each pair's best counting): a
    pair outside its declared band FAILs naming it; a worker every link of which is slow against the links without
    it is named; a slow pair no named worker explains is named as the pair (with two workers: the slow direction,
    saying which end cannot be told)."""
    if len(workers) < 2:
        pytest.skip("missing capability two-workers: the cohort has fewer than two workers")
    terms = Terms.of(request, target)
    program = _compiled(submit, target, "tb_pingpong", PINGPONG)
    # ranks waiting their turn yield the CPU (Open MPI busy-polls otherwise, starving the pair on shared cores)
    script = "OMPI_MCA_mpi_yield_when_idle=1 " + quoted("%s", program)

    def measure() -> tuple[list[Sample], object]:
        step = across(submit, workers, script, args=f"--mpi={target.spec.mpi}", timeout=job_timeout(stages=2))
        samples = parse_lines(line for lines in step.lines.values() for line in lines)
        missing = [p for m in ("mpi_latency", "mpi_bandwidth") for p in _initiated(samples, m, sorted(workers))]
        requirement(step.result.ok and not missing, "a ping-pong value for every ring pair: " + "; ".join(missing),
                    step.result)  # fmt: skip
        return samples, step

    samples, step, done = _rounds(terms, measure)
    rounds = f"rounds: {done} of at most {ROUNDS} (each pair's best counts)"
    _judged(request, terms, samples, "MPI latency and bandwidth of every ring pair", step.result, rounds, rounds=done)


def test_memory_triad_bandwidth_on_every_worker(request, submit, target, workers):
    """A STREAM-triad-like kernel on every worker in one step, the workers taking turns trial by trial (each task
    waits, sleeping, for the mark on the shared home of the trial before its own, at most ``TURN_WAIT`` s of
    _tb_programs.py): workers that share a host's cores (the local substrate) do not measure each other, and a load
    on the host that comes and goes meets every worker's trials alike, not one worker's all. A cohort that disagrees
    (a worker outside its band or far from the others) is measured again, at most :data:`ROUNDS` rounds, each
    worker's best counting: a passing load rarely meets the same worker in every round, a slow worker is slow in
    each. Outside the declared band, or below the median of the other workers by the outlier ratio, FAILs naming
    the worker."""
    terms = Terms.of(request, target)
    program = _compiled(submit, target, "tb_triad", TRIAD)

    def measure() -> tuple[list[Sample], object]:
        turn = quoted("%s/tb-turn-%s", submit.made_outdir(), secrets.token_hex(4))
        step = across(submit, workers, f"{quoted('%s', program)} {turn}", timeout=job_timeout(stages=2) + len(workers))
        submit.login.run(f"rm -f {turn}-*")
        samples = parse_lines(line for lines in step.lines.values() for line in lines)
        missing = _complete(samples, "memory_triad", sorted(workers))
        requirement(step.result.ok and not missing, "a triad value for every worker: " + "; ".join(missing),
                    step.result)  # fmt: skip
        return samples, step

    samples, step, done = _rounds(terms, measure)
    rounds = f"rounds: {done} of at most {ROUNDS} (each worker's best counts)"
    _judged(request, terms, samples, "memory bandwidth on every worker", step.result, rounds, rounds=done)


def test_shared_storage_write_and_read_throughput(request, submit, target, workers, run_id):
    """Every worker writes a file to the shared home and the next worker of a ring reads it past its own page
    cache (O_DIRECT, else the file's cached pages dropped before each pass: _tb_storage.py ``reading``), one step:
    write and read throughput per worker, judged like every metric, measured again while the judges disagree (at
    most :data:`ROUNDS` rounds). The workers write together and read together, each phase opened by a barrier on
    the shared home, so every worker's trials share the storage (and, on the local substrate, the host's cores)
    with the same peers for the same time: the last to start is never alone."""
    from pytest_slurmflox.model.declared import HOME

    declared(target, HOME)
    if not target.spec.expect.settings.worker_home_path:
        pytest.skip("missing capability shared-home: WORKER_HOME_PATH is empty, workers mount no shared home")
    if len(workers) < 2:
        pytest.skip("missing capability two-workers: the cohort has fewer than two workers")
    terms = Terms.of(request, target)
    outdir = submit.made_outdir()
    pairs = ring(sorted(workers))
    keep = pairs[0][0]  # the first writer's file stays for the login endpoint's read

    def measure() -> tuple[list[Sample], object]:
        own = f"tb-{run_id}-{time.time_ns()}"

        def path(node: str) -> str:
            return quoted("%s/%s-%s.dat", outdir, own, node)

        dd = f"dd if=/dev/zero bs=1M count={STORAGE_MIB} conv=fsync status=none of="
        writes = ring_case(pairs, lambda me, _r: timed(dd + path(me), 1, "storage_write"))
        reads = ring_case([(r, w) for w, r in pairs], lambda _me, writer: (
            reading(path(writer), "storage_read") + ("" if writer == keep else f"; rm -f {path(writer)}")))  # fmt: skip
        marks = quoted("%s/%s", outdir, f"{own}-mark")
        script = f"{barrier(marks + '-write', workers)}; {writes}; {barrier(marks + '-read', workers)}; {reads}"
        step = across(submit, workers, script, timeout=job_timeout(stages=2))
        at_login = target.login.run(command_line(
            "sh -c", [f"{reading(path(keep), 'storage_read_login')}; rm -f {path(keep)} {marks}-*"]))  # fmt: skip
        samples = storage_samples({**step.lines, "login": at_login.stdout.splitlines()})
        missing = [
            m for metric in ("storage_write", "storage_read") for m in _complete(samples, metric, sorted(workers))
        ]
        missing += _complete(samples, "storage_read_login", ["login"])
        requirement(step.result.ok and at_login.ok and not missing, "a storage value for every worker and the "
                    "login endpoint: " + "; ".join(missing), step.result, at_login)  # fmt: skip
        return samples, (step, at_login)

    samples, (step, at_login), done = _rounds(terms, measure)
    rounds = f"rounds: {done} of at most {ROUNDS} (each worker's best counts)"
    _judged(request, terms, samples, "shared-storage throughput on every worker and at login", step.result, at_login,
            rounds, rounds=done)  # fmt: skip


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
    terms = Terms.of(request, target)
    _judged(request, terms, samples, f"scheduler timings (burst of {n} jobs)", one, launch.result, burst)
