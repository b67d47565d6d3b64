"""SlurmClient: what the suites and lifecycle ask of Slurm, over any Runner.

Only Slurm's own CLI is used, in the one-line text forms that exist in every Slurm we target (22.05 through
26.05): ``scontrol -o show ...``, ``squeue -h -o ...``, ``sinfo -h -o ...``. No JSON: ``scontrol --json`` does not
exist in 22.05 and the openapi plugins are optional. Jobs are polled in batches: one ``squeue`` call for every
outstanding job per tick, never one call per job.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from ..base.run import Result, Runner, quoted
from ..base.waits import WaitTimedOut, job_timeout, poll_missing

#: Job states after which a job never runs again.
TERMINAL_STATES = frozenset(
    {
        "COMPLETED",
        "FAILED",
        "CANCELLED",
        "TIMEOUT",
        "NODE_FAIL",
        "PREEMPTED",
        "OUT_OF_MEMORY",
        "BOOT_FAIL",
        "DEADLINE",
        "REVOKED",
        "SPECIAL_EXIT",
    }
)


class SlurmError(RuntimeError):
    """Slurm could not be asked, or answered something we cannot interpret. Never taken as health."""


#: Where a ``Key=`` starts: after whitespace, a key as Slurm spells its fields (an upper-case letter first:
#: ``NodeName``, ``MCS_label``, ``AllocNode:Sid``, ``CPUs/Task``), so lower-case ``x=1`` inside a value is text.
_KEY = re.compile(r"(?:^|(?<=\s))([A-Z][A-Za-z0-9_:/.]*)=")


def parse_kv_line(line: str) -> dict[str, str]:
    """Parse one ``scontrol -o show`` line into KEY -> value.

    ``-o`` joins what ``scontrol show`` prints on several lines with spaces (two where a printed line ended), and
    values may hold spaces (``Reason=Kill task failed [root@...]``, ``OS=Linux 6.1.0 #1 SMP``, ``JobName=a b``,
    ``Comment=note x=1``): text up to the next ``Key=`` (as :data:`_KEY` reads one) continues the previous value,
    which loses only the spaces around it. A ``Key=`` right after a value ending in a backslash is text too.
    What stays ambiguous is free text holding `` Word=``: it reads as a field.
    """
    out: dict[str, str] = {}
    key: str | None = None
    start = 0
    for match in _KEY.finditer(line):
        if key is not None:
            value = line[start : match.start()].strip()
            if value.endswith("\\"):
                continue
            out[key] = value
        key, start = match.group(1), match.end()
    if key is not None:
        out[key] = line[start:].strip()
    return out


@dataclass(frozen=True)
class NodeState:
    name: str
    state: str  #: full state string, e.g. IDLE, MIXED+DRAIN, DOWN+DYNAMIC_NORM
    reason: str
    cpus: int
    real_memory: int
    raw: Mapping[str, str] = field(repr=False, default_factory=dict)

    @property
    def flags(self) -> frozenset[str]:
        return frozenset(self.state.replace("*", "").split("+"))

    @property
    def base(self) -> str:
        return self.state.replace("*", "").split("+")[0]

    @property
    def usable(self) -> bool:
        """Schedulable now: responding, not drained/down/invalid."""
        bad = {
            "DOWN",
            "DRAIN",
            "DRAINING",
            "DRAINED",
            "FAIL",
            "FAILING",
            "NOT_RESPONDING",
            "INVALID",
            "INVALID_REG",
            "FUTURE",
            "POWERED_DOWN",
            "POWERING_DOWN",
            "MAINTENANCE",
            "RESERVED",
        }
        return (
            not (self.flags & bad)
            and "*" not in self.state
            and self.base in {"IDLE", "MIXED", "ALLOCATED", "COMPLETING"}
        )


@dataclass(frozen=True)
class PartitionState:
    name: str
    state: str  #: UP, DOWN, DRAIN, INACTIVE
    nodes: str
    raw: Mapping[str, str] = field(repr=False, default_factory=dict)


@dataclass(frozen=True)
class JobState:
    job_id: str
    state: str
    reason: str
    nodes: str

    @property
    def done(self) -> bool:
        return self.state in TERMINAL_STATES

    def __str__(self) -> str:
        hint = launch_error_hint(self.reason)
        text = f"JobState(job_id={self.job_id!r}, state={self.state!r}, reason={self.reason!r}, nodes={self.nodes!r})"
        return f"{text} [{hint}]" if hint else text


#: slurmd's launch errors (slurm/slurm_errno.h, SchedMD/slurm): when a batch job fails to launch, the node reports
#: the error code as the job's return code, and slurmctld's job_complete() reads any return code whose low 7 bits
#: look like a signal number as a signal (``RaisedSignal:N``). Seen once on this project's local substrate:
#: ``RaisedSignal:53``, i.e. 4021 & 0x7f.
LAUNCH_ERRORS = {
    4010: "ESLURMD_CREATE_BATCH_DIR_ERROR (slurmd could not create the batch directory)",
    4014: "ESLURMD_SETUP_ENVIRONMENT_ERROR (slurmd could not set up the job's environment)",
    4016: "ESLURMD_SET_UID_OR_GID_ERROR (slurmd could not become the job's user)",
    4020: "ESLURMD_EXECVE_FAILED (the job script could not be executed)",
    4021: "ESLURMD_IO_ERROR (slurmstepd could not open the job's stdin/stdout/stderr, e.g. its --output file)",
    4022: "ESLURMD_PROLOG_FAILED (the node's Prolog failed)",
}


def launch_error_hint(reason: str) -> str:
    """For ``RaisedSignal:N`` whose N is a launch error's low 7 bits, what the launch error likely was; else ""."""
    found = re.match(r"RaisedSignal:(\d+)", reason or "")
    if not found:
        return ""
    signal = int(found.group(1))
    named = [f"{code} {what}" for code, what in LAUNCH_ERRORS.items() if code & 0x7F == signal]
    return f"RaisedSignal:{signal} is likely slurmd launch error " + " or ".join(named) if named else ""


#: Pending reasons with which Slurm says a job can never start as asked (a request beyond every node of the
#: partition, a constraint no node has): waiting out a timeout would only hold up the checks queued behind it.
NEVER_RUNS = frozenset({"PartitionConfig", "BadConstraints", "PartitionTimeLimit", "InvalidQOS", "InvalidAccount"})


class NeverRuns(SlurmError):
    """Slurm says a job can never run; the message carries Slurm's reason."""


#: squeue output: id|state|reason|nodes (an argument, so the shell never sees the pipes).
JOB_FORMAT = "%i|%T|%r|%N"

#: Default of :meth:`SlurmClient.wait`: short jobs started together, one scheduling pass
#: (pytest_slurmflox/base/waits.py).
SHORT_JOB = job_timeout()


@dataclass
class SlurmClient:
    """Slurm as seen from a login endpoint. ``admin`` (root) is used only for state-changing operations."""

    user: Runner
    admin: Runner | None = None
    partition: str = "all"
    poll_interval: float = 0.15

    # -- reading -----------------------------------------------------------------------------------
    def version(self) -> str:
        """The version the cluster's own client reports (``sinfo --version``), e.g. ``24.11.5``.

        Upstream prints ``slurm 24.11.5``; Debian's build prints ``slurm-wlm 22.05.8`` (measured on bookworm), so
        the number is taken, not the word before it. Raises SlurmError when no version number is in the answer."""
        res = self.user.run("sinfo --version").check()
        found = re.search(r"\b(\d+\.\d+(?:\.\d+)?)\b", res.stdout)
        if found is None:
            raise SlurmError("sinfo --version printed no version number:\n" + res.describe())
        return found.group(1)

    def ping(self) -> Result:
        """``scontrol ping``; raises SlurmError unless a controller answers UP."""
        res = self.user.run("scontrol ping", timeout=30)
        if not res.ok or "is UP" not in res.stdout:
            raise SlurmError("slurmctld is not reachable:\n" + res.describe())
        return res

    def partition_nodes(self, name: str | None = None) -> list[str]:
        """Node names of a partition (default: the client's), as ``sinfo`` lists them; raises SlurmError."""
        res = self.user.run("sinfo -h -N -o %N -p", name or self.partition, timeout=30)
        if not res.ok:
            raise SlurmError("sinfo failed:\n" + res.describe())
        return sorted(set(res.stdout.split()))

    def active_jobs(self, name: str | None = None) -> list[str]:
        """Ids of the jobs a partition still runs (running, completing, configuring or suspended)."""
        states = "RUNNING,COMPLETING,CONFIGURING,SUSPENDED"
        res = self.user.run("squeue -h -o %i -t", states, "-p", name or self.partition, timeout=30)
        if not res.ok:
            raise SlurmError("squeue failed:\n" + res.describe())
        return res.stdout.split()

    def nodes(self) -> list[NodeState]:
        res = self.user.run("scontrol -o show node", timeout=30)
        if not res.ok:
            if "No nodes in the system" in res.stdout + res.stderr:
                return []
            raise SlurmError("cannot list nodes:\n" + res.describe())
        nodes = []
        for line in res.stdout.splitlines():
            if not line.startswith("NodeName="):
                continue
            kv = parse_kv_line(line)
            nodes.append(
                NodeState(
                    name=kv["NodeName"],
                    state=kv.get("State", "UNKNOWN"),
                    reason=kv.get("Reason", ""),
                    cpus=int(kv.get("CPUTot", "0") or 0),
                    real_memory=int(kv.get("RealMemory", "0") or 0),
                    raw=kv,
                )
            )
        return nodes

    def partition_state(self, name: str | None = None) -> PartitionState:
        name = name or self.partition
        res = self.user.run("scontrol -o show partition", name, timeout=30)
        if not res.ok or not res.stdout.startswith("PartitionName="):
            raise SlurmError(f"partition {name} state unknown:\n" + res.describe())
        kv = parse_kv_line(res.stdout.splitlines()[0])
        state = kv.get("State")
        if not state:
            raise SlurmError(f"partition {name} reports no State:\n" + res.describe())
        return PartitionState(name=kv["PartitionName"], state=state, nodes=kv.get("Nodes", ""), raw=kv)

    def job_info(self, job_id: str) -> dict[str, str]:
        res = self.user.run("scontrol -o show job", job_id).check()
        return parse_kv_line(res.stdout.splitlines()[0])

    def end_time(self, job_id: str) -> float | None:
        """When Slurm ended the job (epoch seconds, ``EndTime`` with ``SLURM_TIME_FORMAT=%s``), None while it has
        not ended or when the controller no longer knows it. The cluster's clock: a measurement, never a verdict."""
        res = self.user.run("scontrol -o show job", job_id, env={"SLURM_TIME_FORMAT": "%s"})
        found = re.search(r"\bEndTime=(\d+)\b", res.stdout) if res.ok else None
        return float(found.group(1)) if found else None

    def last_end(self, job_ids: Iterable[str]) -> float | None:
        """When the last of the given jobs that ended (array tasks included) ended: epoch seconds, squeue's EndTime
        under ``SLURM_TIME_FORMAT=%s``, one call for all. None when none has ended or Slurm no longer knows them.
        A pending job's EndTime is Slurm's estimate, so only finished jobs count. A measurement (where the span of
        a check that collected early jobs ends), never a verdict."""
        ids = sorted(set(job_ids))
        if not ids:
            return None
        env = {"SLURM_TIME_FORMAT": "%s"}
        res = self.user.run("squeue -h -t all -o", "%i|%T|%e", "-j", ",".join(ids), env=env, timeout=30)
        ends = [
            float(parts[2])
            for parts in (line.split("|") for line in res.stdout.splitlines())
            if len(parts) == 3 and parts[1] in TERMINAL_STATES and parts[2].isdigit()
        ]
        return max(ends) if ends else None

    def jobs(self, job_ids: Iterable[str]) -> dict[str, JobState]:
        """One ``squeue`` call for all the given jobs (array tasks included, keyed by their own id)."""
        ids = sorted(set(job_ids))
        if not ids:
            return {}
        res = self.user.run("squeue -h -t all -o", JOB_FORMAT, "-j", ",".join(ids), timeout=30)
        if not res.ok and "Invalid job id" not in res.stderr:
            raise SlurmError("squeue failed:\n" + res.describe())
        states: dict[str, JobState] = {}
        for line in res.stdout.splitlines():
            parts = line.split("|")
            if len(parts) == 4:
                states[parts[0]] = JobState(parts[0], parts[1], parts[2], parts[3])
        return states

    # -- submitting --------------------------------------------------------------------------------
    def sbatch(self, script: str, *options: str, cwd: str | None = None) -> str:
        """Submit ``script`` (text, on stdin) with sbatch options; returns the job id."""
        line = quoted("cd %s && sbatch --parsable", cwd) if cwd else "sbatch --parsable"
        res = self.user.run(line, *options, input=script, timeout=60).check()
        return res.stdout.strip().split(";")[0]

    def wait(
        self,
        job_ids: Iterable[str],
        *,
        timeout: float = SHORT_JOB,
        until: frozenset[str] = TERMINAL_STATES,
        what: str | None = None,
    ) -> dict[str, JobState]:
        """Poll all jobs together until each is in ``until`` (default: finished). Raises :class:`SlurmError` on
        timeout, and :class:`NeverRuns` at once when Slurm gives a pending job a reason in :data:`NEVER_RUNS`. A
        long wait says ``what`` it waits for (default: the jobs and the states awaited) with each job's state and
        reason (waits.Status)."""
        pending = set(job_ids)
        if what is None:
            goal = "to end" if until == TERMINAL_STATES else f"to be {' or '.join(sorted(until)[:3])}"
            named = sorted(pending)
            shown = ", ".join(named[:5]) + (f" and {len(named) - 5} more" if len(named) > 5 else "")
            what = f"job{'s' if len(named) > 1 else ''} {shown} {goal}"
        seen: dict[str, JobState] = {}

        def missing() -> str | None:
            states = self.jobs(pending)
            for job_id in list(pending):
                state = states.get(job_id)
                if state is not None:
                    seen[job_id] = state
                    if state.state in until:
                        pending.discard(job_id)
            if not pending:
                return None
            never = [seen[j] for j in sorted(pending) if j in seen and seen[j].reason in NEVER_RUNS]
            if never:
                raise NeverRuns(
                    "Slurm says these jobs can never run: "
                    + ", ".join(f"{s.job_id} {s.state} (Reason={s.reason})" for s in never)
                )
            return ", ".join(
                f"{j}={seen[j].state}/{seen[j].reason}" if j in seen else f"{j}=?" for j in sorted(pending)
            )

        if pending:
            try:
                poll_missing(missing, what=what, timeout=timeout, interval=self.poll_interval)
            except WaitTimedOut as exc:
                raise SlurmError(f"jobs not {sorted(until)[:3]}... after {timeout}s: {exc.last}") from None
        return seen

    def cancel(self, *job_ids: str) -> Result:
        return self.user.run("scancel", *job_ids)

    def cancel_named(self, prefix: str) -> list[str]:
        """Cancel the user's own unfinished jobs whose name starts with ``prefix`` (a run's or a check's: an
        ``srun`` whose client timed out leaves a job no id was ever read for). Returns the ids cancelled."""
        res = self.user.run("squeue -h --me -o", "%i|%j", timeout=30)
        ids = sorted(
            {
                job_id
                for job_id, _, name in (line.partition("|") for line in res.stdout.splitlines())
                if name.startswith(prefix)
            }
        )
        if ids:
            self.cancel(*ids)
        return ids

    # -- administration (root) ---------------------------------------------------------------------
    def _admin(self) -> Runner:
        if self.admin is None:
            raise SlurmError("this target has no administrative access (admin runner)")
        return self.admin

    def set_partition(self, state: str, name: str | None = None) -> Result:
        name = name or self.partition
        return self._admin().run("scontrol update", f"partitionname={name}", f"state={state}").check()

    def drain(self, nodes: Iterable[str], reason: str) -> Result | None:
        names = ",".join(nodes)
        if not names:
            return None
        return self._admin().run("scontrol update", f"nodename={names}", "state=DRAIN", f"reason={reason}").check()

    def resume(self, nodes: Iterable[str]) -> Result | None:
        names = ",".join(nodes)
        if not names:
            return None
        return self._admin().run("scontrol update", f"nodename={names}", "state=RESUME").check()

    def delete_node(self, name: str) -> Result:
        return self._admin().run("scontrol delete", f"nodename={name}")
