"""TB's shared-storage shell: timed trials, the read that bypasses the reader's cache, and the barrier.

Each trial prints ``<metric> <start ns> <end ns> <passes> [<how>]``; :func:`storage_samples` makes them MB/s
samples (judges/baselines.py). The programs run on the workers and at the login endpoint, built from quoted paths.
"""

from __future__ import annotations

from collections.abc import Iterable

from pytest_slurmflox.base.run import quoted
from pytest_slurmflox.judges.baselines import Sample

from ._tb_programs import TRIAL_MS, TRIALS

#: Each worker's file on the shared home (MiB).
STORAGE_MIB = 32
#: The storage metrics' line names: a worker's write, the next worker's read, the login endpoint's read.
STORAGE_METRICS = ("storage_write", "storage_read", "storage_read_login")
#: How long a worker waits at a barrier for the others' marks (s).
VISIBLE_WITHIN = 30
#: A read trial's method word -> what the evidence says of it.
READ_METHODS = {
    "direct": "read with O_DIRECT (the reader's page cache bypassed)",
    "dropped": "the file's cached pages dropped before each pass (posix_fadvise DONTNEED; O_DIRECT refused here)",
}


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


def timed(command: str, passes: int, metric: str, how: str = "") -> str:
    """Shell that runs :data:`TRIALS` timed trials of ``command`` (each going ``passes`` times through the file):
    a trial repeats it for at least :data:`TRIAL_MS` of wall time and prints ``<metric> <start ns> <end ns>
    <passes>`` (and `` <how>``, a shell word saying how it read, when given); a failing ``command`` ends the trial
    without a line."""
    said = f" {how}" if how else ""
    return (f"for _ in $(seq {TRIALS}); do s=$(date +%s%N); n=0; while {command}; do n=$((n+{passes})); "
            f"e=$(date +%s%N); [ $((e-s)) -ge {TRIAL_MS}000000 ] && {{ echo {metric} $s $e $n{said}; break; }}; "
            "done; done")  # fmt: skip


def reading(file: str, metric: str) -> str:
    """Shell: timed reads of ``file`` (quoted) that bypass the reader's page cache, so the storage answers, not
    this host's memory: ``dd iflag=direct`` (O_DIRECT) where the filesystem allows it, else the file's cached
    pages dropped before each pass (``dd iflag=nocache count=0``: posix_fadvise DONTNEED, GNU dd's documented way)
    and the file read through once. Each line says which (``direct`` or ``dropped``); a 32 MiB file read again
    and again from the page cache measured the reader's memory, not the shared storage."""
    direct = f"dd if={file} of=/dev/null bs=1M iflag=direct status=none"
    dropped = f"dd if={file} iflag=nocache count=0 status=none && cat {file} >/dev/null"
    probe = f"if {direct} 2>/dev/null; then how=direct; else how=dropped; fi"
    return f"{probe}; {timed(f'if [ $how = direct ]; then {direct}; else {dropped}; fi', 1, metric, '$how')}"


def storage_samples(lines: dict[str, list[str]]) -> list[Sample]:
    """``storage_write|storage_read|storage_read_login <start ns> <end ns> <passes> [<how>]`` lines per worker (one
    per :func:`timed` trial) as MB/s samples of that worker (``how``: the read method), the best of its lines per
    metric."""
    samples = []
    for node, said in lines.items():
        for line in said:
            parts = line.split()
            how = parts[4] if len(parts) == 5 and parts[4] in READ_METHODS else ""
            parts = parts[:4] if how else parts
            if len(parts) == 4 and parts[0] in STORAGE_METRICS and all(p.isdigit() for p in parts[1:]):
                seconds = max(int(parts[2]) - int(parts[1]), 1) / 1e9
                rate = int(parts[3]) * STORAGE_MIB * 1.048576 / seconds
                samples.append(Sample(parts[0], node, rate, READ_METHODS.get(how, "")))
    best: dict[tuple[str, str], Sample] = {}
    for sample in samples:  # the fastest of a worker's trials: one pass of a few ms is mostly the host's jitter
        key = (sample.metric, sample.subject)
        if key not in best or sample.value > best[key].value:
            best[key] = sample
    return list(best.values())
