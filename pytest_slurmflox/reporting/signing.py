"""A signed sign-off: the run's manifest signed with an SSH key (``ssh-keygen -Y sign``), and its verification.

Why SSH signatures: OpenSSH is on every machine that reaches a cluster (the runs reach their login with it), its
keys are the ones the people who sign off already have and already hand to others (``authorized_keys``), an
agent or a hardware key signs without the private key touching the disk, and ``ssh-keygen -Y`` signs and verifies
files since OpenSSH 8.1 (2019): no new dependency, no key infrastructure of our own. Who is trusted is an
``allowed_signers`` file (ssh-keygen(1), ALLOWED SIGNERS) the reader keeps: a principal (a name or an address) and
its public key per line. The signatures carry :data:`NAMESPACE`, so a sign-off signature is never mistaken for a
signed commit or file of another use (or the reverse).

Where the signer shows: the key is resolved before the run starts (a key that cannot sign stops it in one line),
so the report states who signs, by fingerprint and comment, before its bytes are hashed; the manifest
(reporting/manifest.py), written after every artifact, names the report's hash with the rest and the signer again;
``--slurmflox-verify`` checks all of it and says who signed which verdict and when.
"""

from __future__ import annotations

import html
import os
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from .manifest import MANIFEST, SIGNATURE, Manifest, differences, folder_files, target_record

#: The ``-n`` namespace of every sign-off signature.
NAMESPACE = "slurmflox-signoff"
#: The ``--slurmflox-sign`` value that signs with the ssh-agent's first key.
AGENT = "agent:"


class SigningError(Exception):
    """A key that cannot sign, or ssh-keygen refusing; the message says which and why."""


def _keygen(*args: str, stdin: bytes | None = None, env: dict[str, str] | None = None) -> tuple[int, str]:
    proc = subprocess.run(
        ["ssh-keygen", *args],
        input=stdin,
        capture_output=True,
        timeout=60,
        check=False,
        env=env,
        stdin=None if stdin is not None else subprocess.DEVNULL,
    )
    return proc.returncode, (proc.stdout + proc.stderr).decode(errors="replace").strip()


@dataclass(frozen=True)
class Signer:
    """A key that signs: its fingerprint (``SHA256:...``), type and comment; ``key`` is the private key's path,
    or the agent key's public line (``agent``)."""

    fingerprint: str
    kind: str
    comment: str
    key: str
    agent: bool = False

    def describe(self) -> str:
        said = f" ({self.comment})" if self.comment else ""
        return f"{self.kind} key {self.fingerprint}{said}" + (" in the ssh-agent" if self.agent else "")

    def record(self) -> dict[str, str]:
        return {"fingerprint": self.fingerprint, "type": self.kind, "comment": self.comment}


def _fingerprint(public: str) -> tuple[str, str, str]:
    """(fingerprint, type, comment) of a public key line, from ``ssh-keygen -l``."""
    rc, out = _keygen("-l", "-f", "-", stdin=public.encode())
    parts = out.split()
    if rc != 0 or len(parts) < 3 or not parts[1].startswith("SHA256:"):
        raise SigningError(f"ssh-keygen -l cannot read the key: {out or rc}")
    return parts[1], parts[-1].strip("()"), " ".join(parts[2:-1])


def resolve_signer(spec: str) -> Signer:
    """The key ``--slurmflox-sign`` names: a private key file, or :data:`AGENT` for the agent's first key."""
    if spec.strip() == AGENT:
        if not os.environ.get("SSH_AUTH_SOCK"):
            raise SigningError("--slurmflox-sign=agent: no ssh-agent (SSH_AUTH_SOCK is not set)")
        proc = subprocess.run(["ssh-add", "-L"], capture_output=True, text=True, timeout=30, check=False)
        lines = [line for line in proc.stdout.splitlines() if line.strip()]
        if proc.returncode != 0 or not lines:
            raise SigningError(f"--slurmflox-sign=agent: the ssh-agent holds no key ({proc.stdout.strip()})")
        return Signer(*_fingerprint(lines[0]), key=lines[0], agent=True)
    path = Path(spec).expanduser()
    if not path.is_file():
        raise SigningError(f"--slurmflox-sign={spec}: no such key file")
    rc, public = _keygen("-y", "-P", "", "-f", str(path))
    if rc != 0:
        raise SigningError(
            f"--slurmflox-sign={spec}: ssh-keygen cannot use this key without a passphrase "
            f"({public}); load it into an ssh-agent and sign with --slurmflox-sign=agent:"
        )
    return Signer(*_fingerprint(public), key=str(path.resolve()))


def sign_run(
    root: Path, signer: Signer, *, run_id: str, plugin: str, verdict: str, target: Path | None, target_source: str
) -> Path:
    """Write ``root``'s manifest (every file in it now) and its signature; returns the signature's path."""
    manifest = Manifest(
        run_id=run_id,
        plugin=plugin,
        verdict=verdict,
        signed_at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        signer=signer.record(),
        target=target_record(target, target_source),
        files=folder_files(root),
    )
    (root / MANIFEST).write_text(manifest.text())
    (root / SIGNATURE).unlink(missing_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        key = signer.key
        if signer.agent:  # ssh-keygen signs through the agent when given the public key
            key = str(Path(tmp) / "agent-key.pub")
            Path(key).write_text(signer.key + "\n")
        rc, out = _keygen("-Y", "sign", "-f", key, "-n", NAMESPACE, str(root / MANIFEST))
    if rc != 0 or not (root / SIGNATURE).is_file():
        raise SigningError(f"ssh-keygen -Y sign with {signer.describe()} failed: {out}")
    return root / SIGNATURE


def verify_run(root: Path, allowed: Path) -> tuple[bool, list[str]]:
    """Check ``root`` against its signed manifest and the ``allowed`` signers: (verified, the lines to say)."""
    for name in (MANIFEST, SIGNATURE):
        if not (root / name).is_file():
            return False, [f"{root / name}: missing; the folder is not a signed sign-off"]
    if not allowed.is_file():
        return False, [f"--slurmflox-allowed-signers={allowed}: no such file"]
    text = (root / MANIFEST).read_bytes()
    sig = str(root / SIGNATURE)
    rc, out = _keygen("-Y", "check-novalidate", "-n", NAMESPACE, "-s", sig, stdin=text)
    if rc != 0:
        return False, [f"{MANIFEST}: changed since it was signed, or {SIGNATURE} is not its signature ({out})"]
    key = next((w for w in out.split() if w.startswith("SHA256:")), "an unnamed key")
    rc, principals = _keygen("-Y", "find-principals", "-s", sig, "-f", str(allowed))
    if rc != 0 or not principals:
        return False, [f"unknown signer: key {key} is not in {allowed}"]
    principal = principals.splitlines()[0].strip()
    rc, out = _keygen("-Y", "verify", "-f", str(allowed), "-I", principal, "-n", NAMESPACE, "-s", sig, stdin=text)
    if rc != 0:
        return False, [f"the signature of {principal} (key {key}) does not verify: {out}"]
    try:
        manifest = Manifest.parse(text.decode(errors="replace"))
    except ValueError as exc:
        return False, [str(exc)]
    problems = differences(manifest, root)
    if manifest.signer.get("fingerprint") != key:  # the report and manifest state a signer: it must be this key
        problems.insert(0, f"{MANIFEST} names signer {manifest.signer.get('fingerprint')}, but {key} signed it")
    target = manifest.target
    said = [
        f"signed by {principal} (key {key}) at {manifest.signed_at}: {manifest.verdict}",
        f"run {manifest.run_id}, {manifest.plugin}, target {target.get('path') or '(none)'}"
        + (f" sha256 {target['sha256']}" if target.get("sha256") else ""),
    ]
    if problems:
        return False, [*said, *(f"FAILED: {line}" for line in problems)]
    return True, [*said, f"{len(manifest.files)} files as signed: {', '.join(sorted(manifest.files))}"]


def signed_html(signer: Signer, run_root: Path) -> str:
    """The report's statement that the run is signed, and by whom (before the report is hashed)."""
    return (
        '<p id="slurmflox-signed" class="sfx-signed"><strong>Signed sign-off</strong>: this folder\'s '
        f"{MANIFEST} (the sha256 of this report, junit.xml, evidence.json and every other file, the target file, the "
        f"plugin version and the verdict line) is signed with {html.escape(signer.describe())}, namespace "
        f"{NAMESPACE}, in {SIGNATURE}. Check it: <code>pytest --slurmflox-verify={html.escape(str(run_root))} "
        "--slurmflox-allowed-signers=FILE</code></p>"
    )


def verify_command(root: Path, allowed: str | None) -> int:
    """``--slurmflox-verify``: print what :func:`verify_run` says, one line each; exit 0 verified, 1 not."""
    if not allowed:
        print("slurmflox: --slurmflox-verify needs --slurmflox-allowed-signers=FILE (who you trust to sign)")
        return 1
    ok, lines = verify_run(root, Path(allowed).expanduser())
    for line in lines:
        print(f"slurmflox: {line}")
    print(f"slurmflox: {root}: " + ("VERIFIED" if ok else "NOT VERIFIED"))
    return 0 if ok else 1
