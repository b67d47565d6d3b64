"""Base images: what a VM boots from, where it is cached, and proof that the cached bytes are the right ones.

Two kinds of base image exist:

* the reference's AlmaLinux GenericCloud image, named by ``BASE_IMAGE`` (a file name), downloaded once into
  ``<workdir>/base/`` and verified against the sha256 the AlmaLinux mirror publishes for it;
* a local image: ``BASE_IMAGE`` (or the substrate's ``image`` argument) is a path to an existing file. If a
  ``<image>.boot.json`` sidecar lies next to it (as the Debian test image has), it names the kernel/initrd for
  direct kernel boot, the guest family and the expected sha256, which is verified before every use.

A download is written to a temporary name and renamed only after its checksum matched, so an interrupted
download is never taken for a cached image.
"""

from __future__ import annotations

import hashlib
import json
import re
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from ...base.digest import sha256_file
from .. import SubstrateUnavailable

ALMALINUX_BASE_URL = "https://repo.almalinux.org/almalinux/10/cloud/x86_64/images/"
CHECKSUM_FILE = "CHECKSUM"


class ImageError(SubstrateUnavailable):
    """A base image is missing, unreadable or has the wrong checksum."""


@dataclass(frozen=True)
class BootSpec:
    """A verified base image and how to boot it.

    ``kernel``/``initrd``/``append`` are set for images without a bootloader (direct kernel boot). ``family``
    selects the guest package manager (``debian`` -> apt, ``almalinux`` -> dnf) and the login conventions.
    """

    image: Path
    sha256: str
    family: str = "almalinux"
    kernel: Path | None = None
    initrd: Path | None = None
    append: str = ""

    @staticmethod
    def sidecar_of(image: Path) -> Path:
        return image.with_name(image.name + ".boot.json")

    def to_json(self) -> dict[str, str]:
        doc = {"image": self.image.name, "sha256": self.sha256, "family": self.family, "append": self.append}
        if self.kernel:
            doc["kernel"] = self.kernel.name
        if self.initrd:
            doc["initrd"] = self.initrd.name
        return doc

    def save(self) -> None:
        """Write the sidecar (last, atomically): its presence marks a complete image."""
        from ...model.workdir import atomic_write

        atomic_write(self.sidecar_of(self.image), json.dumps(self.to_json(), indent=2) + "\n")

    @classmethod
    def load(cls, image: Path) -> BootSpec:
        """Read ``image``'s sidecar; paths in it are relative to the image's directory."""
        doc = json.loads(cls.sidecar_of(image).read_text())
        here = image.parent
        return cls(
            image=image,
            sha256=doc["sha256"],
            family=doc.get("family", "almalinux"),
            kernel=here / doc["kernel"] if doc.get("kernel") else None,
            initrd=here / doc["initrd"] if doc.get("initrd") else None,
            append=doc.get("append", ""),
        )

    def verify(self) -> BootSpec:
        """Raise ImageError unless every file exists and the image matches its sha256."""
        for path in (self.image, self.kernel, self.initrd):
            if path is not None and not path.is_file():
                raise ImageError(f"base image file {path} is missing")
        actual = sha256_file(self.image)
        if actual != self.sha256:
            raise ImageError(
                f"base image {self.image} has sha256 {actual}, expected {self.sha256}: "
                "remove it so it is fetched/built again"
            )
        return self


def parse_checksum_file(text: str, name: str) -> str | None:
    """The sha256 for ``name`` from a CHECKSUM file (BSD ``SHA256 (name) = hex`` or GNU ``hex  name``)."""
    for line in text.splitlines():
        match = re.match(r"SHA256 \((?P<n>[^)]+)\) = (?P<h>[0-9a-f]{64})\s*$", line.strip())
        if match and match["n"] == name:
            return match["h"]
        match = re.match(r"(?P<h>[0-9a-f]{64})\s+\*?(?P<n>\S+)\s*$", line.strip())
        if match and match["n"] == name:
            return match["h"]
    return None


def image_url(name: str, base_url: str = ALMALINUX_BASE_URL) -> str:
    return base_url + name


def local_image(path: Path) -> BootSpec:
    """A user-supplied image file. With a sidecar it is verified; without, its current hash is recorded."""
    path = path.expanduser().resolve()
    if not path.is_file():
        raise ImageError(f"BASE_IMAGE {path} does not exist")
    if BootSpec.sidecar_of(path).exists():
        return BootSpec.load(path).verify()
    family = "debian" if "debian" in path.name.lower() else "almalinux"
    return BootSpec(image=path, sha256=sha256_file(path), family=family)


def cached_or_fetch(name: str, base_dir: Path, progress, *, base_url: str = ALMALINUX_BASE_URL) -> BootSpec:
    """The named cloud image from ``base_dir``, downloading and verifying it first if it is not cached.

    Only called when the caller has established that the host is online; the download goes to the
    image mirror named by ``base_url``.
    """
    image = base_dir / name
    if BootSpec.sidecar_of(image).exists() and image.exists():
        return BootSpec.load(image).verify()
    base_dir.mkdir(parents=True, exist_ok=True)
    progress(f"downloading {name} checksum list from {base_url}")
    with urllib.request.urlopen(base_url + CHECKSUM_FILE, timeout=60) as response:
        expected = parse_checksum_file(response.read().decode(errors="replace"), name)
    if expected is None:
        raise ImageError(f"{base_url}{CHECKSUM_FILE} lists no sha256 for {name}")
    partial = image.with_name("." + image.name + ".partial")
    progress(f"downloading {name}")
    digest = hashlib.sha256()
    with urllib.request.urlopen(image_url(name, base_url), timeout=60) as response, partial.open("wb") as out:
        for block in iter(lambda: response.read(1 << 20), b""):
            digest.update(block)
            out.write(block)
    if digest.hexdigest() != expected:
        partial.unlink(missing_ok=True)
        raise ImageError(f"downloaded {name} has sha256 {digest.hexdigest()}, the mirror says {expected}")
    partial.replace(image)
    spec = BootSpec(image=image, sha256=expected, family="almalinux")
    spec.save()
    return spec
