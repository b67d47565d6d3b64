"""The sha256 of a file, read in 1 MiB blocks: one helper for every file the project pins or signs (node image
archives, VM base images, the artifacts a sign-off manifest lists)."""

from __future__ import annotations

import hashlib
from pathlib import Path


def sha256_file(path: Path) -> str:
    """Hex sha256 of the file at ``path`` (any size: never read whole)."""
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
