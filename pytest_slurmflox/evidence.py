"""Evidence: every command a check runs, redacted, attached to the check that ran it.

Runners hand each :class:`~pytest_slurmflox.run.Result` to an observer. The session's :class:`EvidenceLog` is that
observer: it redacts the result and appends it to the evidence of the test currently running. The plugin moves
a test's evidence into its report's ``user_properties`` (which pytest-xdist serializes), so the controller can
write HTML, JUnit and evidence.json from reports alone.

Redaction is by value and by shape. By value: the bytes of secrets this deployment holds (the munge key, private
keys, kubeconfig credentials) are replaced wherever they appear, also base64- or hex-encoded. By shape: PEM
private key blocks, kubeconfig/bearer token fields and ``password=``-like assignments.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from .run import Result

REDACTED = "[REDACTED]"

#: (pattern, replacement): secret-shaped text, whatever its value.
_SHAPES = (
    (re.compile(r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----.*?-----END [A-Z0-9 ]*PRIVATE KEY-----", re.S), REDACTED),
    (re.compile(r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----[^\n]*(?:\n[A-Za-z0-9+/=]+)*"), REDACTED),
    (
        re.compile(r"((?:client-key-data|client-certificate-data|token|password|secret)\s*[:=]\s*)(\S+)", re.I),
        r"\1" + REDACTED,
    ),
    (re.compile(r"(Authorization:\s*Bearer\s+)(\S+)", re.I), r"\1" + REDACTED),
)


@dataclass
class Redactor:
    """Replaces known secret values and secret-shaped text."""

    secrets: list[bytes] = field(default_factory=list)
    #: (number of secrets, their forms longest first): redaction runs on every string of every report, so the
    #: base64/hex forms are computed once per change, not once per call
    _cache: tuple[int, tuple[str, ...]] = field(default=(0, ()), init=False, repr=False, compare=False)

    def add_value(self, value: bytes | str) -> None:
        raw = value.encode() if isinstance(value, str) else value
        if len(raw.strip()) >= 8 and raw.strip() not in self.secrets:
            self.secrets.append(raw.strip())

    def add_file(self, path: Path) -> None:
        """Learn a secret file's content (and, for PEM/kubeconfig text, its credential lines)."""
        try:
            data = path.read_bytes()
        except OSError:
            return
        self.add_value(data)
        text = data.decode(errors="replace")
        for line in text.splitlines():
            match = re.match(r"\s*(client-key-data|client-certificate-data|token|password)\s*:\s*(\S+)", line)
            if match:
                self.add_value(match.group(2))
            elif len(line.strip()) >= 40 and re.fullmatch(r"[A-Za-z0-9+/=]+", line.strip()):
                self.add_value(line.strip())  # PEM body lines

    def _forms(self) -> Iterable[str]:
        for secret in self.secrets:
            yield secret.decode(errors="replace")
            yield base64.b64encode(secret).decode()
            yield secret.hex()

    def _sorted_forms(self) -> tuple[str, ...]:
        if self._cache[0] != len(self.secrets):
            forms = tuple(sorted({f for f in self._forms() if len(f) >= 8}, key=len, reverse=True))
            self._cache = (len(self.secrets), forms)
        return self._cache[1]

    def __call__(self, text: str) -> str:
        for form in self._sorted_forms():
            if form in text:
                text = text.replace(form, REDACTED)
        for shape, replacement in _SHAPES:
            text = shape.sub(replacement, text)
        return text


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
