"""How much memory a task may hold by the cluster's own configuration, and whether the kernel held it to that (T8).

Slurm's rule, from its source (SchedMD/slurm ``src/plugins/task/cgroup/task_cgroup_memory.c``, the same from 22.05
to 25.11): for a request of ``mem`` MiB task/cgroup writes a RAM limit ``mlb = mem * AllowedRAMSpace%`` and, only
with ``ConstrainSwapSpace=yes``, a RAM+swap limit ``mls = mlb + mem * AllowedSwapSpace%``, each at least MinRAMSpace
(the caps MaxRAMPercent and MaxSwapPercent of the node's RealMemory are far above the check's 64 MiB and are not
modelled). With ``ConstrainRAMSpace=no`` but swap constrained, the RAM limit is ``mls`` too (AllowedRAMSpace counted
as 100%); with neither constrained, Slurm makes no memory cgroup at all. Cgroup v1 gets ``memory.limit_in_bytes =
mlb`` and ``memory.memsw.limit_in_bytes = mls``; v2 (``src/plugins/cgroup/v2/cgroup_v2.c``) ``memory.max = mlb`` and
``memory.swap.max = mls - mlb``. With ``ConstrainSwapSpace=no`` (Slurm's default) nothing limits swap: on a worker
with swap, a task beyond its RAM limit is swapped out instead of killed, and that is the cluster enforcing exactly
what it declares.

Where each value comes from:

- the promise: cgroup.conf as Slurm reports it, the ``Cgroup Support Configuration:`` section that ``scontrol show
  config`` prints at its end (``src/api/config_info.c``, 22.05 and later; keys and defaults: cgroup.conf(5),
  https://slurm.schedmd.com/cgroup.conf.html), never a file a worker wrote;
- what the kernel enforces: the limits the task reads itself (:func:`probe`), every level from its own cgroup (found
  from /proc/self/cgroup) up to the root it sees, the smallest of each holding, and the worker's swap
  (/proc/meminfo ``SwapTotal``);
- what the task held: its own cgroup's peak RAM, v2 ``memory.peak`` (Linux 5.19+), v1
  ``memory.max_usage_in_bytes``. The peak is the kernel's own high-water mark of everything charged to the task's
  cgroup (every process of the task, page cache included: an upper bound on their resident memory), the counter the
  limit is enforced against, so a survivor that held more RAM than its limit shows it. A process's VmHWM misses the
  task's other processes and is readable only while that process lives; ``memory.current`` at the end shows what
  is left, not what was used.

What the configuration promises is what Slurm does, never what it should do: a configured leniency is not a
promise. How much a ``--mem`` task may hold is what the target declares (``expect.limits``,
model/declaredlimits.py), Slurm's defaults where it is silent: ``AllowedRAMSpace`` 100 and ``AllowedSwapSpace`` 0
percent, and ``--mem`` holding RAM and swap together (``constrain_swap_space``; cgroup.conf's own default leaves
swap unconstrained, which on a worker with swap lets a task grow past its ``--mem``: a leniency to declare).
:func:`loosened` holds the configured values to the declared ones; :func:`allowance` bounds what the kernel
may let each task hold, so a worker with swap under ``ConstrainSwapSpace=no`` FAILs, named, unless declared.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from ..model.declaredlimits import DeclaredLimits

MIB = 2**20
#: A limit at or above this is no limit (v1 prints 9223372036854771712 for unlimited; v2 prints ``max``).
UNLIMITED = 2**62
#: How far the kernel's limit may lie from Slurm's arithmetic: the kernel rounds a limit down to its page (4 KiB;
#: 64 KiB on some arm64 kernels), and Slurm computes a percentage in single-precision floating point.
SLACK = 64 * 1024
#: The files that hold a RAM limit, a swap (v2) or RAM+swap (v1) limit, and the task cgroup's peak RAM.
RAM_FILES = ("memory.max", "memory.limit_in_bytes")
SWAP_FILE = "memory.swap.max"
MEMSW_FILE = "memory.memsw.limit_in_bytes"
PEAK_FILES = ("memory.peak", "memory.max_usage_in_bytes")
#: The check's request and buffers: the control fits in the request, the hog is eight times it.
MEM_MB, FITS_MB, HOG_MB = 64, 8, 512
#: Slurm's default MinRAMSpace (MB, cgroup.conf(5)): no task is limited below it.
MIN_RAM_MB = 30.0


def _yes(value: str) -> bool:
    return value.strip().lower() == "yes"


def _number(value: str) -> float:
    """``100.0%``, ``30 MB``, ``30MB`` -> the number."""
    found = re.match(r"\s*([0-9]+(?:\.[0-9]+)?)", value)
    if not found:
        raise ValueError(f"{value!r} is not a number")
    return float(found.group(1))


def mib(value: int | None) -> str:
    """Bytes as MiB for a verdict (``max``: no limit)."""
    if value is None:
        return "max"
    return f"{value // MIB} MiB" if value % MIB == 0 else f"{value / MIB:.2f} MiB"


@dataclass(frozen=True)
class Promise:
    """What the cluster's cgroup.conf makes task/cgroup write for a ``--mem`` request (Slurm's defaults where a key
    is not shown)."""

    constrain_ram: bool
    constrain_swap: bool
    allowed_ram: float = 100.0  #: percent
    allowed_swap: float = 0.0  #: percent
    min_ram_mb: float = MIN_RAM_MB

    @property
    def shown(self) -> str:
        """The configured values, as a verdict names them."""
        yes = {True: "yes", False: "no"}
        return (
            f"cgroup.conf (scontrol show config): ConstrainRAMSpace={yes[self.constrain_ram]} "
            f"AllowedRAMSpace={self.allowed_ram:g}% ConstrainSwapSpace={yes[self.constrain_swap]} "
            f"AllowedSwapSpace={self.allowed_swap:g}% MinRAMSpace={self.min_ram_mb:g} MB"
        )

    def _percent(self, mem_mb: int, percent: float) -> int:
        return int(mem_mb * MIB * (percent / 100.0))

    def ram_swap(self, mem_mb: int) -> int | None:
        """The RAM+swap limit Slurm writes (``mls``), or None when it limits no swap (ConstrainSwapSpace=no)."""
        if not self.constrain_swap:
            return None
        ram = self._percent(mem_mb, self.allowed_ram if self.constrain_ram else 100.0)
        floor = int(self.min_ram_mb * MIB)
        return max(floor, max(floor, ram) + self._percent(mem_mb, self.allowed_swap))

    def ram(self, mem_mb: int) -> int | None:
        """The RAM limit Slurm writes (``mlb``), or None when it constrains neither RAM nor swap."""
        if not self.constrain_ram:
            return self.ram_swap(mem_mb)
        return max(int(self.min_ram_mb * MIB), self._percent(mem_mb, self.allowed_ram))


def configured(config: Mapping[str, str]) -> Promise | None:
    """The promise of the cluster whose ``scontrol show config`` (key -> value, authkeys.parse_show_config) is
    given, or None when it shows no cgroup section (no ``ConstrainRAMSpace`` key: nothing to judge against)."""
    if "ConstrainRAMSpace" not in config:
        return None
    return Promise(
        constrain_ram=_yes(config["ConstrainRAMSpace"]),
        constrain_swap=_yes(config.get("ConstrainSwapSpace", "no")),
        allowed_ram=_number(config.get("AllowedRAMSpace") or "100"),
        allowed_swap=_number(config.get("AllowedSwapSpace") or "0"),
        min_ram_mb=_number(config.get("MinRAMSpace") or "30"),
    )


def loosened(promise: Promise, declared: DeclaredLimits) -> list[str]:
    """What the configured cgroup.conf loosens beyond what the target declares, each naming both values (empty:
    nothing; swap left unconstrained is judged per worker, by :func:`allowance_problem`, since it loosens nothing
    on a worker without swap)."""
    found = []
    if promise.constrain_ram and promise.allowed_ram > declared.allowed_ram_space:
        found.append(
            f"configured AllowedRAMSpace={promise.allowed_ram:g}% lets a task hold more RAM than its --mem: "
            + declared.shown("allowed_ram_space")
        )
    if promise.constrain_swap and promise.allowed_swap > declared.allowed_swap_space:
        found.append(
            f"configured AllowedSwapSpace={promise.allowed_swap:g}% lets a task swap beyond its --mem: "
            + declared.shown("allowed_swap_space")
        )
    return found


def allowance(declared: DeclaredLimits, mem_mb: int) -> int | None:
    """The RAM and swap together the target lets a ``--mem=mem_mb`` task hold (None: swap declared unlimited):
    ``mem`` times the declared AllowedRAMSpace plus AllowedSwapSpace, at least Slurm's default MinRAMSpace."""
    if not declared.constrain_swap_space:
        return None
    share = (declared.allowed_ram_space + declared.allowed_swap_space) / 100.0
    return max(int(MIN_RAM_MB * MIB), int(mem_mb * MIB * share))


def allowance_problem(seen: Observed, declared: DeclaredLimits, mem_mb: int) -> str | None:
    """Whether the kernel lets the task hold more RAM and swap than the target allows for ``--mem=mem_mb``."""
    allowed, room = allowance(declared, mem_mb), seen.room
    if allowed is None or room is None or room <= allowed + SLACK:  # no RAM limit at all: _limit_problem
        return None
    keys = ("allowed_ram_space", "allowed_swap_space", "constrain_swap_space")
    return (
        f"the kernel lets the task hold {mib(room)} of RAM and swap, more than the {mib(allowed)} the target allows "
        f"for --mem={mem_mb} ({'; '.join(declared.shown(k) for k in keys)})"
    )


def probe(fits_mb: int = FITS_MB, hog_mb: int = HOG_MB) -> str:
    """The task's script: every memory limit from its own cgroup up to the root it sees (``limit=FILE VALUE DIR``),
    the worker's swap (``swaptotal=KB``), a buffer of ``fits_mb`` (the control: a kill below is the limit, not the
    probe) and one of ``hog_mb`` each read at once into dd's buffer (``fits=`` and ``hog=`` dd's exit status; 137:
    the OOM killer), then the task cgroup's peak RAM (``peak=FILE BYTES DIR``). The limits come first, so a task
    whose shell is killed with its buffer still shows them; files are read with shell builtins (no process per
    file: the step's time stays the buffers')."""
    return rf"""
while read -r k v _; do [ "$k" = SwapTotal: ] && echo "swaptotal=$v"; done < /proc/meminfo
peaks=
while IFS=: read -r _ ctrl path; do
    case ",$ctrl," in
        *,memory,*) base=/sys/fs/cgroup/memory; files="{RAM_FILES[1]} {MEMSW_FILE}"; pk={PEAK_FILES[1]};;
        ,,) base=/sys/fs/cgroup; files="{RAM_FILES[0]} {SWAP_FILE}"; pk={PEAK_FILES[0]};;
        *) continue;;
    esac
    d=$base${{path%/}}
    [ -r "$d/$pk" ] && peaks="$peaks $d/$pk"
    while :; do
        for f in $files; do [ -r "$d/$f" ] && read -r v < "$d/$f" && echo "limit=$f $v $d"; done
        [ "$d" = "$base" ] || [ "${{d#"$base"/}}" = "$d" ] && break
        d=${{d%/*}}
    done
done < /proc/self/cgroup
dd if=/dev/zero of=/dev/null bs={fits_mb}M count=1 status=none; echo fits=$?
dd if=/dev/zero of=/dev/null bs={hog_mb}M count=1 status=none; echo hog=$?
for p in $peaks; do read -r v < "$p" && echo "peak=${{p##*/}} $v ${{p%/*}}"; done
echo done
"""


@dataclass(frozen=True)
class Limit:
    """One memory file the task read: its name, its value in bytes (None: no limit) and its cgroup directory."""

    file: str
    value: int | None
    where: str

    @property
    def shown(self) -> str:
        return f"{self.file}={mib(self.value)} at {self.where}"


def _limit(text: str) -> Limit | None:
    """``FILE VALUE DIR`` -> a :class:`Limit` (None for a line that is not one)."""
    parts = text.split(" ", 2)
    if len(parts) != 3 or not (parts[1].isdigit() or parts[1] == "max"):
        return None
    value = None if parts[1] == "max" or int(parts[1]) >= UNLIMITED else int(parts[1])
    return Limit(parts[0], value, parts[2])


def _limits(lines: list[str], key: str) -> list[Limit]:
    """The :class:`Limit` lines ``key=FILE VALUE DIR`` of a probe's answer (a malformed one is none)."""
    found = []
    for line in lines:
        name, sep, text = line.partition("=")
        limit = _limit(text) if sep and name == key else None
        if limit is not None:
            found.append(limit)
    return found


def _smallest(limits: list[Limit]) -> Limit | None:
    return min(limits, key=lambda lim: UNLIMITED if lim.value is None else lim.value, default=None)


@dataclass(frozen=True)
class Observed:
    """One worker's :func:`probe` answer."""

    fits: str | None
    hog: str | None
    ram: Limit | None  #: the smallest RAM limit from the task's cgroup up (memory.max / memory.limit_in_bytes)
    swap: Limit | None  #: v2: the smallest memory.swap.max
    memsw: Limit | None  #: v1: the smallest memory.memsw.limit_in_bytes (RAM+swap)
    swap_total: int  #: bytes of swap on the worker
    peak: Limit | None  #: the task cgroup's peak RAM (the largest, should a task see two hierarchies)

    @classmethod
    def parse(cls, lines: list[str]) -> Observed:
        facts = {k: v for k, _, v in (line.partition("=") for line in lines) if k in ("fits", "hog", "swaptotal")}
        limits = _limits(lines, "limit")
        total = facts.get("swaptotal", "")
        return cls(
            fits=facts.get("fits"),
            hog=facts.get("hog"),
            ram=_smallest([lim for lim in limits if lim.file in RAM_FILES]),
            swap=_smallest([lim for lim in limits if lim.file == SWAP_FILE]),
            memsw=_smallest([lim for lim in limits if lim.file == MEMSW_FILE]),
            swap_total=int(total) * 1024 if total.isdigit() else 0,
            peak=max(_limits(lines, "peak"), key=lambda lim: lim.value or 0, default=None),
        )

    @property
    def room(self) -> int | None:
        """The RAM and swap together the kernel lets the task hold (None: unbounded): its RAM limit plus the swap
        its cgroups allow, at most the worker's swap."""
        if self.ram is None or self.ram.value is None:
            return None
        swap = self.swap_total
        if self.swap is not None and self.swap.value is not None:
            swap = min(swap, self.swap.value)
        room = self.ram.value + swap
        if self.memsw is not None and self.memsw.value is not None:
            room = min(room, self.memsw.value)
        return room

    @property
    def shown(self) -> str:
        """What the kernel enforces there, as a verdict names it."""
        found = [lim.shown for lim in (self.ram, self.swap, self.memsw) if lim is not None]
        found.append(f"SwapTotal={mib(self.swap_total)}")
        found.append(f"peak {self.peak.shown}" if self.peak else "no peak counter")
        return ", ".join(found)


#: From Slurm 26.05 on, slurmstepd writes its OOM report into the task's stderr without naming its node (measured on
#: sid's 26.05.5: ``[2026-12-06T05:34:49.941] error: Detected 1 oom_kill event in StepId=49.0. Some of the step tasks
#: have been OOM Killed.``, one such line per worker, where 24.11 wrote ``slurmstepd-<node>: error: ...``), and srun
#: still names only the first task it saw killed. Under ``srun --label`` the report carries the rank of the task it
#: was written to, and the task's own marked lines carry the same rank beside its node: that ties report to worker.
LABELLED_REPORT_SINCE = (26, 5)


def step_args(version: tuple[int, ...], mem_mb: int = MEM_MB) -> str:
    """The srun options of the probe's one step on a cluster that reports ``version`` (``sinfo --version`` as
    numbers): ``--mem``, and ``--label`` where slurmstepd's OOM report names no node (:data:`LABELLED_REPORT_SINCE`)."""
    return f"--mem={mem_mb}" + (" --label" if version >= LABELLED_REPORT_SINCE else "")


def oom_reported(output: str, node: str) -> bool:
    """Whether Slurm reported an OOM kill of ``node``'s task: each worker's slurmstepd reports its own
    (``slurmstepd-<node>: error: Detected 1 oom_kill event``; 22.05: ``oom-kill event(s)``; 26.05 names no node,
    and under ``--label`` the report carries the rank of the task whose marked lines name ``node``:
    ``1: [time] error: Detected 1 oom_kill event``); srun names only the first task it saw killed
    (``<node>: task N: Out Of Memory``)."""
    name = re.escape(node)
    stepd = rf"slurmstepd-{name}: error: Detected \d+ oom[-_]kill event"
    if re.search(rf"{stepd}|\b{name}: task \d+: Out Of Memory", output):
        return True
    ranks = set(re.findall(rf"^ *(\d+): [^|\n]*\|{name}\|", output, re.MULTILINE))
    labelled = re.findall(r"^ *(\d+): (?:\[[^\]\n]*\] )?error: Detected \d+ oom[-_]kill event", output, re.MULTILINE)
    return bool(ranks.intersection(labelled))


def _limit_problem(seen: Observed, promise: Promise, mem_mb: int) -> str | None:
    """Whether the kernel's limits are the ones the configuration promises for ``--mem=mem_mb``: the RAM limit
    (within :data:`SLACK`) and, on a worker with swap where swap is constrained, no more RAM and swap than that."""
    want = promise.ram(mem_mb)
    if want is None:
        return f"Slurm's configuration limits no task to its --mem={mem_mb} (it constrains neither RAM nor swap)"
    got = seen.ram
    if got is None or got.value is None or abs(got.value - want) > SLACK:
        shown = got.shown if got else "no limit"
        return (
            f"the kernel limits the task's RAM to {mib(got.value if got else None)} ({shown}), not the {mib(want)} "
            f"Slurm's configuration promises for --mem={mem_mb}"
        )
    promised, room = promise.ram_swap(mem_mb), seen.room
    if promised is not None and seen.swap_total and (room is None or room > promised + SLACK):
        return (
            f"the kernel lets the task hold {mib(room)} of RAM and swap, more than the {mib(promised)} Slurm's "
            f"configuration promises for --mem={mem_mb}"
        )
    return None


def _outcome_problem(seen: Observed, promise: Promise, mem_mb: int, hog_mb: int, reported: bool) -> str | None:
    """Whether the ``hog_mb`` buffer ended as the kernel's limits and the configuration allow: killed (and reported
    by Slurm) when RAM and swap together cannot hold it; when they can (swap allowed by the configuration and
    present on the worker), killed or survived, but a survivor must have held no more RAM than its RAM limit
    (:attr:`Observed.peak`: the task that swapped is within it, one that used the RAM is not)."""
    if seen.hog != "0":
        return None if reported else "Slurm did not report an OOM kill there"
    said = f"a task that uses {hog_mb} MiB with --mem={mem_mb} was not killed"
    bounds = [b for b in (seen.room, promise.ram_swap(mem_mb)) if b is not None]
    if bounds and min(bounds) < hog_mb * MIB:
        return f"{said}, though its RAM and swap together may hold only {mib(min(bounds))}"
    peak, limit = seen.peak, seen.ram.value if seen.ram else None
    if peak is None or peak.value is None:
        return (
            f"{said} (swap allowed) and its cgroup shows no peak RAM ({PEAK_FILES[0]} or {PEAK_FILES[1]}): it "
            "cannot be shown to have stayed within its RAM limit"
        )
    if limit is None:
        return f"{said} and held {mib(peak.value)} of RAM ({peak.shown}) under no RAM limit"
    if peak.value > limit:
        return f"{said} and held {mib(peak.value)} of RAM ({peak.shown}), beyond its RAM limit of {mib(limit)}"
    return None


def memory_problem(
    lines: list[str],
    output: str,
    node: str,
    promise: Promise,
    declared: DeclaredLimits | None = None,
    mem_mb: int = MEM_MB,
    hog_mb: int = HOG_MB,
) -> str | None:
    """What is wrong with one worker's :func:`probe` answer (``output``: the step's whole output, for Slurm's OOM
    report), or None: the control fits, the kernel's RAM limit (and, where swap is constrained, its RAM+swap limit)
    is the one ``promise`` makes for ``--mem=mem_mb``, and the ``hog_mb`` buffer ended as those limits allow. A
    problem names what the kernel enforces there and the configured values."""
    seen = Observed.parse(lines)
    if seen.ram is None:
        return f"the task showed no memory limit of its cgroup ({' or '.join(RAM_FILES)}): {lines!r}"
    if seen.fits != "0":
        return f"the {FITS_MB} MiB control within --mem={mem_mb} did not complete: {lines!r}"
    reported = oom_reported(output, node)
    found = [
        _limit_problem(seen, promise, mem_mb),
        allowance_problem(seen, declared or DeclaredLimits(), mem_mb),
        _outcome_problem(seen, promise, mem_mb, hog_mb, reported),
    ]
    problems = [p for p in found if p]
    return f"{'; '.join(problems)} (the kernel: {seen.shown}; {promise.shown})" if problems else None
