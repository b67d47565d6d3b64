"""Submitting work the way a user does: from the login endpoint, as the unprivileged user, with traceable names.

Every job a check submits is named ``sfx-<run id>-<check>`` so an operator can find (and cancel) what an
acceptance run left, and every check cancels its own unfinished jobs when it ends. Waiting is batched through
:meth:`SlurmClient.wait` (one squeue per tick for all outstanding jobs), never ``sbatch --wait``, whose hard-coded
2/8/32 s back-off would dominate the run time.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..base.run import Result, Runner, command_line, quoted
from ..base.waits import job_timeout
from ..model.siteaccess import SiteAccess
from .sbatchchain import ChainEntry, chain_command, chain_ids
from .slurm import SHORT_JOB, TERMINAL_STATES, JobState, SlurmClient

if TYPE_CHECKING:
    from ..model.runrecord import RunRecords

#: Default of :meth:`Jobs.srun`: a step whose command runs up to two minutes (the longest probe: compiling an MPI
#: hello world on a loaded host) plus its pass.
STEP_TIMEOUT = job_timeout(120)

#: Where a run's job output lives in the user's (shared) home; removed at session end unless --slurmflox-keep.
RUNS_DIR = '"$HOME"/slurmflox-runs'  #: shell text: the user's home, expanded by the far side's shell
#: What a run id may be: it names a directory under :data:`RUNS_DIR` (``rm -rf`` in the sweep), a Slurm job name and
#: the report folder, so a narrow set of characters that no shell, path or job name reads as syntax.
RUN_ID_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")


def is_run_id(value: str) -> bool:
    """Whether ``value`` is a safe run id: the pattern, and no ``..`` (a path out of the runs directory)."""
    return bool(RUN_ID_PATTERN.fullmatch(value)) and ".." not in value


@dataclass
class Jobs:
    """Job helpers for one check."""

    login: Runner
    slurm: SlurmClient
    run_id: str
    label: str
    partition: str = "all"
    #: What the site requires of every job (``slurm.account``, ``qos``, ``reservation``, ``extra_args``).
    site: SiteAccess = field(default_factory=SiteAccess)
    submitted: list[str] = field(default_factory=list)
    #: Makes the name this instance's own: under pytest-xdist a module fixture runs once per worker with the same
    #: run id and label, and one worker's cleanup (which cancels by name prefix) must not end the other's jobs.
    nonce: str = field(default_factory=lambda: secrets.token_hex(3))
    #: :meth:`made_outdir`'s answer, asked once per instance: every ``sbatch`` after the first costs one command
    #: on the login node, not three.
    resolved_outdir: str = field(default="", repr=False)
    #: Seconds a step that needs every worker waits for workers other jobs hold (busy.py; suites/_busy.py), None
    #: for a caller that never waits (the run's sweep, early jobs): the fixtures give the run's budget.
    busy_timeout: float | None = None
    #: This start of the run's records (runrecord.py): where the run's one busy budget is kept; None never waits.
    records: RunRecords | None = None

    @classmethod
    def of(
        cls,
        target: Any,
        run_id: str,
        label: str,
        *,
        busy_timeout: float | None = None,
        records: RunRecords | None = None,
    ) -> Jobs:
        """A check's jobs on a live target (``connection.Target``): its login, its Slurm client, the target file's
        partition and site access. The one way the plugin and the suites make them, so no job misses the site's
        account, QOS or reservation."""
        spec = target.spec
        return cls(
            target.login,
            target.slurm,
            run_id,
            label,
            partition=spec.partition,
            site=spec.site,
            busy_timeout=busy_timeout,
            records=records,
        )

    @property
    def name(self) -> str:
        """``sfx-<run id>-<check>-<nonce>``: the nonce keeps a check's named cancel (:meth:`cleanup`, a prefix) to
        this instance's jobs (seen: under ``-n 2`` T7's module fixture ran on both xdist workers with one run id, and
        one worker's cleanup CANCELLED the other's time-limit job)."""
        return f"sfx-{self.run_id}-{re.sub(r'[^A-Za-z0-9_.-]+', '-', self.label)[:60]}-{self.nonce}"

    @property
    def outdir(self) -> str:
        """Shell text of this run's output directory in the user's (shared) home: ``$HOME`` expanded by the far
        side's shell, the run id quoted (tests/unit/test_structure_quoting.py lets ``outdir`` into command lines)."""
        return quoted(f"{RUNS_DIR}/%s", self.run_id)

    def made_outdir(self) -> str:
        """Create :attr:`outdir` (once per instance) and return its absolute path: a plain value (no ``$HOME``), to
        be quoted."""
        if not self.resolved_outdir:
            line = f"mkdir -p {self.outdir} && cd {self.outdir} && pwd"
            self.resolved_outdir = self.login.run(line).check().stdout.strip()
        return self.resolved_outdir

    @property
    def placement(self) -> tuple[str, ...]:
        """Where and under what every job, step and allocation of the run goes: the partition and the site's
        account, QOS, reservation and extra options (argv words: a command line quotes each). A check that builds
        its own ``srun``/``sbatch``/``salloc`` line puts these after ``-J <name>`` and before its own options."""
        return (f"--partition={self.partition}", *self.site.options)

    def srun(
        self, args: str, command: str, *, timeout: float = STEP_TIMEOUT, env: dict[str, str] | None = None
    ) -> Result:
        """``srun`` from the login endpoint, named and placed (:attr:`placement`). ``args`` and ``command`` are
        shell text, used as given."""
        line = command_line("srun", ["-J", self.name, *self.placement]) + f" {args} {command}"
        return self.login.run(line, timeout=timeout, env=env)

    def sbatch(self, script: str, *options: str, suffix: str = "") -> str:
        """Submit ``script`` as an ordinary batch script; output goes to ``<outdir>/<jobid>.out``."""
        job_id = self.slurm.sbatch(script, *self._placed(suffix), *options)
        self.submitted.append(job_id)
        return job_id

    def _placed(self, suffix: str = "") -> tuple[str, ...]:
        """The options every job of this check carries: its traceable name, its :attr:`placement` (partition, the
        site's access), and its output in the run's directory (outdir is shell text that may name $HOME: its
        absolute path, created once)."""
        out = self.made_outdir()
        name = self.name + (f"-{suffix}" if suffix else "")
        return f"--job-name={name}", *self.placement, f"--output={out}/%j.out"

    def sbatch_chain(self, entries: Sequence[tuple[str, str, Sequence[str]]]) -> list[str | None]:
        """Submit each ``(suffix, script, options)`` like :meth:`sbatch`, all in one command on the login node
        (sbatchchain.py: an option may name ``{prior:<i>}``, entry i's id). Returns each entry's job id, None where
        sbatch refused it or it was not sent; what sbatch said is in the command's result, not raised."""
        chain = [ChainEntry(script, (*self._placed(suffix), *options)) for suffix, script, options in entries]
        command, mark = chain_command(chain)
        res = self.slurm.user.run(command, timeout=60 + 10 * len(chain))
        ids = chain_ids(res.stdout, mark, len(chain))
        self.submitted.extend(job for job in ids if job)
        return ids

    def wait(
        self,
        *job_ids: str,
        timeout: float = SHORT_JOB,
        until: frozenset[str] = TERMINAL_STATES,
        what: str | None = None,
    ) -> dict[str, JobState]:
        return self.slurm.wait(job_ids, timeout=timeout, until=until, what=what)

    def output(self, job_id: str) -> str:
        return self.login.run("cat " + self.outdir + quoted("/%s.out", job_id)).check().stdout

    def cleanup(self) -> None:
        """Cancel whatever this check submitted and did not see finish (never other users' jobs): the ids it
        read, and by name whatever else it started (an ``srun`` whose client timed out, a salloc)."""
        if self.submitted:
            states = self.slurm.jobs(self.submitted)
            live = [job_id for job_id, state in states.items() if not state.done]
            if live:
                self.slurm.cancel(*live)
        self.slurm.cancel_named(self.name)
