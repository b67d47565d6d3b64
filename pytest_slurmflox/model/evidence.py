"""Evidence: every command a check runs, redacted, attached to the check that ran it.

Runners hand each :class:`~pytest_slurmflox.base.run.Result` to an observer. The session's :class:`EvidenceLog` is that
observer: it redacts the result and appends it to the evidence of the test currently running. The plugin moves
a test's evidence into its report's ``user_properties`` (which pytest-xdist serializes), so the controller can
write HTML, JUnit and evidence.json from reports alone.

Redaction is by value and by shape. By value: the bytes of secrets this deployment holds (the munge key, private
keys, kubeconfig credentials) are replaced wherever they appear, also base64- or hex-encoded. By shape: PEM
private key blocks, kubeconfig/bearer token fields and ``password=``-like assignments.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from ..base.run import Result
from .secrets import Redactor

#: The report property a check's measured values travel in (group TB, suites/test_tb_baselines.py), JSON: a list of
#: ``{metric, subject, value, unit, over, method}``; evidence.json shows them as the check's ``metrics``.
METRICS = "slurmflox_metrics"
#: The report property a check's comparisons travel in, JSON: a list of lines, each an expectation beside what the
#: cluster showed (T7's declared and configured overtime, T8's memory limits); evidence.json shows them as
#: ``judged``, on a PASS as on a FAIL.
JUDGED = "slurmflox_judged"


@dataclass(frozen=True)
class Record:
    """One command as evidence (the redacted form of a Result)."""

    command: str
    where: str
    user: str
    exit_status: int
    stdout: str
    stderr: str
    duration: float
    started: float

    @classmethod
    def of(cls, result: Result, redact: Redactor) -> Record:
        return cls(
            command=redact(result.command),
            where=result.where,
            user=result.user,
            exit_status=result.exit_status,
            stdout=redact(result.stdout),
            stderr=redact(result.stderr),
            duration=round(result.duration, 4),
            started=round(result.started, 3),
        )

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass
class EvidenceLog:
    """The observer every runner of a session reports to; collects per-test evidence."""

    redact: Redactor = field(default_factory=Redactor)
    current: list[Record] | None = None
    outside: list[Record] = field(default_factory=list)  #: commands run outside any test (setup, lifecycle)

    def __call__(self, result: Result) -> None:
        record = Record.of(result, self.redact)
        (self.current if self.current is not None else self.outside).append(record)

    def start(self) -> list[Record]:
        self.current = []
        return self.current

    def stop(self) -> list[Record]:
        records, self.current = self.current or [], None
        return records
