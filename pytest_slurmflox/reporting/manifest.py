"""The manifest a signed sign-off signs: what a run's folder held when it was signed, and how a folder differs.

Why a manifest: a run's folder (``reports/<run id>/``) is files anyone can edit. The manifest names every file of
the folder with its sha256 (``report.html``, ``junit.xml``, ``evidence.json`` and the long outputs under ``logs/``),
the target file the run judged against (its path as the run had it, and its sha256), the plugin's version, the
verdict line and who signs it (the key's fingerprint and comment); the signature covers the manifest's bytes
(reporting/signing.py). A reader who trusts the signer's key then trusts every byte the manifest names.

Pure: hashing files and comparing; no process, no key.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..base.digest import sha256_file

#: The manifest's schema, first in the file.
SCHEMA = "slurmflox-signoff/1"
#: The manifest and its signature, in the run's folder; neither is listed in the manifest.
MANIFEST = "manifest.json"
SIGNATURE = MANIFEST + ".sig"


def folder_files(root: Path) -> dict[str, str]:
    """Every regular file below ``root`` but the manifest and its signature: relative POSIX path -> sha256."""
    return {
        path.relative_to(root).as_posix(): sha256_file(path)
        for path in sorted(root.rglob("*"))
        if path.is_file() and path.relative_to(root).as_posix() not in (MANIFEST, SIGNATURE)
    }


@dataclass(frozen=True)
class Manifest:
    """What a signature vouches for (see the module docstring)."""

    run_id: str
    plugin: str
    verdict: str
    signed_at: str
    signer: dict[str, str]
    target: dict[str, str]
    files: dict[str, str] = field(default_factory=dict)

    def text(self) -> str:
        """The bytes that are signed: JSON, keys in a fixed order, one trailing newline."""
        doc = {
            "schema": SCHEMA,
            "run": self.run_id,
            "plugin": self.plugin,
            "verdict": self.verdict,
            "signed_at": self.signed_at,
            "signer": self.signer,
            "target": self.target,
            "files": dict(sorted(self.files.items())),
        }
        return json.dumps(doc, indent=2) + "\n"

    @classmethod
    def parse(cls, text: str) -> Manifest:
        """A manifest read back; a ValueError naming what is wrong with it otherwise."""
        try:
            doc: Any = json.loads(text)
        except ValueError as exc:
            raise ValueError(f"{MANIFEST} is not JSON: {exc}") from None
        if not isinstance(doc, dict) or doc.get("schema") != SCHEMA:
            raise ValueError(f"{MANIFEST} is not a {SCHEMA} manifest")
        try:
            return cls(
                run_id=str(doc["run"]),
                plugin=str(doc["plugin"]),
                verdict=str(doc["verdict"]),
                signed_at=str(doc["signed_at"]),
                signer={str(k): str(v) for k, v in dict(doc["signer"]).items()},
                target={str(k): str(v) for k, v in dict(doc["target"]).items()},
                files={str(k): str(v) for k, v in dict(doc["files"]).items()},
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"{MANIFEST} lacks or mangles {exc}") from None


def target_record(path: Path | None, source: str) -> dict[str, str]:
    """The target file as the run had it: its path, how it was found, and its sha256 ("" when it has none)."""
    if path is None:
        return {"path": "", "source": "no target file", "sha256": ""}
    digest = sha256_file(path) if path.is_file() else ""
    return {"path": str(path), "source": source, "sha256": digest}


def differences(manifest: Manifest, root: Path) -> list[str]:
    """How ``root`` differs from what ``manifest`` names, one line per file (empty: the folder is as signed)."""
    found = folder_files(root)
    lines = [
        f"{name}: changed since it was signed"
        for name in sorted(manifest.files)
        if name in found and found[name] != manifest.files[name]
    ]
    lines += [f"{name}: missing (it was signed)" for name in sorted(manifest.files) if name not in found]
    lines += [
        f"{name}: added after signing (not in {MANIFEST})" for name in sorted(found) if name not in manifest.files
    ]
    return lines
