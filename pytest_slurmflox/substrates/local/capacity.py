"""How many workers the local substrate holds on this host, and why: its own limit, not the project's.

COMPUTE_REPLICAS itself goes up to Slurm's node limit (settings.py), because a NodeSet or a customer's partition
can be that large. The local substrate runs every worker on this one host, so it has a limit of its own, the
smallest of three, each from something measured or fixed here:

- **CPU**: 32 workers per core, the largest cohort per core shown to come up and sign off the full acceptance
  run (docs/design-notes.md, "History moved from docstrings"); no larger one is promised.
- **Memory**: idle workers may take half of the host's memory, at :data:`IDLE_WORKER_BYTES` each (the bound
  tests/integration/test_cohort_scale_local.py holds a worker to); the checks' jobs need the rest.
- **Addresses**: the fabric's plan (network.py) puts worker ``i`` at ``.(9 + i)`` of a /24 and isolated workers
  from ``.200``, so worker 190 is the last.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from ...model.settings import SettingsError

WORKERS_PER_CORE = 32
IDLE_WORKER_BYTES = 16 * 1024 * 1024
MEMORY_SHARE = 0.5
ADDRESS_PLAN_WORKERS = 190


@dataclass(frozen=True)
class Capacity:
    """The local substrate's limit on one host (``workers``) and the reason that sets it."""

    workers: int
    why: str

    @classmethod
    def of(cls, cpus: int, memory_bytes: int) -> Capacity:
        """The limit for a host with ``cpus`` usable cores and ``memory_bytes`` of memory."""
        bounds = [
            (
                WORKERS_PER_CORE * max(1, cpus),
                f"CPU: {WORKERS_PER_CORE} per core x {cpus}, measured: 64 workers on 2 cores start in 14 s and "
                "sign off",
                "CPU allows",
            ),
            (
                int(memory_bytes * MEMORY_SHARE) // IDLE_WORKER_BYTES,
                f"memory: half of {memory_bytes / 2**30:.0f} GiB at {IDLE_WORKER_BYTES // 2**20} MiB per idle worker",
                "memory allows",
            ),
            (ADDRESS_PLAN_WORKERS, "addresses: the fabric's plan ends at worker 190", "the address plan"),
        ]
        workers, why, _ = min(bounds, key=lambda bound: bound[0])
        others = ", ".join(f"{label} {n}" for n, reason, label in bounds if reason != why)
        return cls(workers, f"{why}; {others}")

    @classmethod
    def of_host(cls) -> Capacity:
        """This host: the CPUs this process may run on and the memory /proc/meminfo reports."""
        return cls.of(len(os.sched_getaffinity(0)), _mem_total())

    def refuse(self, replicas: int) -> None:
        """Raise :class:`SettingsError` (one line, naming the limit and why) when ``replicas`` exceeds it."""
        if replicas > self.workers:
            raise SettingsError(
                "COMPUTE_REPLICAS",
                str(replicas),
                f"the local substrate's limit on this host is {self.workers} workers ({self.why}); "
                "qemu and kubernetes targets take more",
            )


def _mem_total(meminfo: Path = Path("/proc/meminfo")) -> int:
    found = re.search(r"^MemTotal:\s+(\d+) kB", meminfo.read_text(), re.M)
    return int(found.group(1)) * 1024 if found else 0
