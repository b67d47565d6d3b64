"""Secrets: one list of what must never reach an artifact, one redactor and one scan over it.

The redactor (used while evidence is recorded) and the scan (run over every artifact after a run) learn the same
secret files and look for the same *forms* of each secret, so what the redactor cannot hide, the scan finds.

A secret's forms are computed from its exact bytes: raw, and, because a file may also be quoted without its
trailing newline, with surrounding whitespace stripped when that differs; lowercase and uppercase hex; and base64
at each of the three byte alignments it can have inside a longer encoded stream (the stable middle of each).
A key is random bytes: it can begin or end with a whitespace byte, so forms are never computed from the stripped
value alone (that was the cause of a scan that missed a planted base64 munge key about one run in twenty).
"""

from __future__ import annotations

import base64
import html
import os
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .workdir import Workdir

REDACTED = "[REDACTED]"
#: Shorter values are not treated as secrets (they would redact ordinary words).
MIN_SECRET = 8
#: Shorter forms are not looked for (a 2-character base64 fragment would match everywhere).
MIN_FORM = 12

#: (pattern, replacement): secret-shaped text, whatever its value.
_SHAPES = (
    (re.compile(r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----.*?-----END [A-Z0-9 ]*PRIVATE KEY-----", re.S), REDACTED),
    (re.compile(r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----[^\n]*(?:\n[A-Za-z0-9+/=]+)*"), REDACTED),
    (
        re.compile(r"((?:client-key-data|client-certificate-data|token|password|secret)\s*[:=]\s*)(\S+)", re.I),
        r"\1" + REDACTED,
    ),
    (re.compile(r"(Authorization:\s*Bearer\s+)(\S+)", re.I), r"\1" + REDACTED),
    # a Slurm JWT as `scontrol token` prints it or as slurmrestd's header carries it
    (re.compile(r"((?:SLURM_JWT|X-SLURM-USER-TOKEN)\s*[:=]\s*)(\S+)", re.I), r"\1" + REDACTED),
)
_PEM_PRIVATE = re.compile(rb"-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----")
_CREDENTIAL_LINE = re.compile(r"^\s*(client-key-data|client-certificate-data|token|password)\s*:\s*(\S+)", re.M)
_KEY_BODY_LINE = re.compile(r"[A-Za-z0-9+/=]{40,}")


def base64_forms(secret: bytes) -> list[bytes]:
    """The base64 text that encodes ``secret`` wherever it sits in a longer stream: for each of the three
    alignments, the encoded groups that depend on the secret's bytes only (edge groups mix with neighbours)."""
    forms = [base64.b64encode(secret)]
    for shift in range(3):
        encoded = base64.b64encode(b"\0" * shift + secret)
        start = 4 if shift else 0  # the first group holds filler bytes
        whole_groups = (shift + len(secret)) // 3 * 4
        forms.append(encoded[start:whole_groups])
    return [f for f in forms if len(f) >= MIN_FORM]


def forms_of(secret: bytes) -> list[tuple[str, bytes]]:
    """(kind, bytes) for every form of one secret value (see the module docstring)."""
    values = [secret] + ([secret.strip()] if secret.strip() != secret and len(secret.strip()) >= MIN_SECRET else [])
    out: list[tuple[str, bytes]] = []
    for value in values:
        out.append(("", value))
        out.append((" (hex)", value.hex().encode()))
        out.append((" (hex)", value.hex().upper().encode()))
        out.extend((" (base64)", form) for form in base64_forms(value))
    seen: set[bytes] = set()
    unique = []
    for kind, form in out:
        if len(form) >= MIN_FORM and form not in seen:
            seen.add(form)
            unique.append((kind, form))
    return unique


@dataclass(frozen=True)
class Needle:
    """One byte string that must never appear in an artifact, and what it is (never the value itself)."""

    label: str
    data: bytes


@dataclass(frozen=True)
class Leak:
    path: Path
    label: str


def secret_values(data: bytes) -> Iterator[tuple[str, bytes]]:
    """(label suffix, value): the file's whole content, each credential value of a kubeconfig, each body line of
    a PEM/OpenSSH private key."""
    yield "", data
    text = data.decode(errors="replace")
    for match in _CREDENTIAL_LINE.finditer(text):
        yield f" {match.group(1)}", match.group(2).encode()
    for number, line in enumerate(text.splitlines(), 1):
        if _KEY_BODY_LINE.fullmatch(line.strip()):
            yield f" line {number}", line.strip().encode()


def secret_needles(paths: Iterable[Path]) -> list[Needle]:
    """What a scan looks for in every artifact: every form of every secret value of every file."""
    needles: list[Needle] = []
    for path in paths:
        try:
            data = path.read_bytes()
        except OSError:
            continue
        for suffix, value in secret_values(data):
            if len(value.strip()) < MIN_SECRET:
                continue
            label = f"content of {path.name}" if not suffix else f"{path.name}{suffix}"
            needles.extend(Needle(label + kind, form) for kind, form in forms_of(value))
    return needles


def _views(data: bytes) -> list[bytes]:
    """The file as stored, HTML-unescaped, JSON-unescaped and with data: URIs decoded."""
    views = [data]
    text = data.decode(errors="replace")
    unescaped = html.unescape(text)
    views.append(unescaped.encode())
    views.append(unescaped.replace("\\n", "\n").replace('\\"', '"').replace("\\/", "/").encode())
    for match in re.finditer(r"data:[^;,\"']*(?:;charset=[^;,\"']*)?;base64,([A-Za-z0-9+/=]+)", unescaped):
        try:
            views.append(base64.b64decode(match.group(1)))
        except ValueError:
            continue
    return views


def scan_for_secrets(files: Iterable[Path], needles: Iterable[Needle]) -> list[Leak]:
    """Every (file, secret) where an artifact contains a secret or a private key block (one leak per secret
    value and file: the most specific form's label)."""
    needles = list(needles)
    leaks: list[Leak] = []
    for path in files:
        views = _views(path.read_bytes())
        found: list[str] = []
        for needle in needles:
            if needle.label not in found and any(needle.data in v for v in views):
                found.append(needle.label)
        if any(_PEM_PRIVATE.search(v) for v in views):
            found.append("private key block")
        leaks.extend(Leak(path, label) for label in _most_specific(found))
    return leaks


def _most_specific(labels: list[str]) -> list[str]:
    """Of the labels of one value's forms, keep one: raw beats hex beats base64 (they describe one leak)."""
    by_value: dict[str, str] = {}
    rank = {"": 0, " (hex)": 1, " (base64)": 2}
    for label in labels:
        base, kind = label, ""
        for suffix in (" (hex)", " (base64)"):
            if label.endswith(suffix):
                base, kind = label[: -len(suffix)], suffix
        current = by_value.get(base)
        if current is None or rank[kind] < rank[current[len(base) :]]:
            by_value[base] = label
    return sorted(by_value.values())


@dataclass
class Redactor:
    """Replaces known secret values (in all their forms) and secret-shaped text."""

    secrets: list[bytes] = field(default_factory=list)
    #: the forms of the secrets learned so far, longest first; recomputed whenever a secret is learned (redaction
    #: runs on every string of every report, so the forms are not recomputed per call)
    _forms: tuple[str, ...] = field(default=(), init=False, repr=False, compare=False)

    def add_value(self, value: bytes | str) -> None:
        raw = value.encode() if isinstance(value, str) else value
        if len(raw.strip()) >= MIN_SECRET and raw not in self.secrets:
            self.secrets.append(raw)
            forms = {f.decode(errors="replace") for secret in self.secrets for _, f in forms_of(secret)}
            self._forms = tuple(sorted(forms, key=len, reverse=True))

    def add_file(self, path: Path) -> None:
        """Learn a secret file's content (and, for PEM/kubeconfig text, its credential lines)."""
        try:
            data = path.read_bytes()
        except OSError:
            return
        for _, value in secret_values(data):
            self.add_value(value)

    def learn(self, workdir: Workdir | None, spec: Any = None) -> None:
        """Learn every credential file of a deployment / target (:func:`secret_files`: the work dir's keys and
        the target's login key, admin key and kubeconfig). The one way the redactor is taught, so what it hides
        is what the artifact scan looks for."""
        for path in secret_files(workdir, spec):
            self.add_file(path)

    def __call__(self, text: str) -> str:
        for form in self._forms:
            if form in text:
                text = text.replace(form, REDACTED)
        for shape, replacement in _SHAPES:
            text = shape.sub(replacement, text)
        return text


#: File names that hold credentials wherever they appear in a work dir (the local substrate keeps its Slurm auth
#: key and the login node's host key under local/, the accounting database password and the auth/jwt key as
#: local/accounting/{db_password,jwt_hs256}.key, the QEMU substrate kubeadm's keys under k8s/).
_SECRET_NAME = re.compile(r"(.*\.key|id_[^.]+|ssh_host_.*_key|kubeconfig|admin\.conf|.*\.pem)")
_SECRET_MAX = 1 << 20


def _secret_named(path: Path) -> bool:
    return bool(_SECRET_NAME.fullmatch(path.name)) and not path.name.endswith(".pub")


def secret_files(workdir: Workdir | None, spec: Any = None) -> list[Path]:
    """The credential files of a deployment / target: what the redactor learns and the scan looks for.

    The work dir's well-known secrets (munge key, SSH key, kubeconfig), every credential-named file below a work
    dir that records a deployment (``*.key``, ``id_*``, ``ssh_host_*_key``, ``kubeconfig``, ``*.pem``; on the work
    dir's own file system), and the target file's key and kubeconfig. A directory that records no deployment (a
    ``SLURMFLOX_WORKDIR`` pointing anywhere) is never walked.
    """
    paths: list[Path] = []
    roots = {w for w in (workdir, Workdir(spec.workdir) if spec is not None and spec.workdir else None) if w}
    for wd in sorted(roots, key=lambda w: str(w.root)):
        paths += [wd.munge_key, wd.ssh_key, wd.kubeconfig]
        if wd.deployment.is_file():
            paths += _credential_files_below(wd.root)
    if spec is not None:
        paths += [e.key for e in (spec.login, spec.admin) if e is not None and e.key is not None]
        if spec.kubernetes is not None and spec.kubernetes.kubeconfig is not None:
            paths.append(spec.kubernetes.kubeconfig)
    seen: list[Path] = []
    for p in paths:
        try:
            small = p.is_file() and not p.is_symlink() and p.stat().st_size <= _SECRET_MAX
        except OSError:
            small = False
        if small and p not in seen:
            seen.append(p)
    return seen


def _credential_files_below(root: Path) -> list[Path]:
    """Credential-named files below ``root``, sorted, without crossing into another file system (a node's root
    file system mounted below a work dir is the node's, not the deployment's record)."""
    try:
        device = root.stat().st_dev
    except OSError:
        return []
    found: list[Path] = []
    for where, dirs, files in os.walk(root):
        here = Path(where)
        dirs[:] = [d for d in dirs if _same_device(here / d, device)]
        found += [here / name for name in files if _secret_named(here / name)]
    return sorted(found)


def _same_device(path: Path, device: int) -> bool:
    try:
        return path.lstat().st_dev == device
    except OSError:
        return False


__all__ = [
    "REDACTED",
    "Leak",
    "Needle",
    "Redactor",
    "base64_forms",
    "forms_of",
    "scan_for_secrets",
    "secret_files",
    "secret_needles",
]
