"""A small bootable Debian test image for the qemu substrate, built from the host's own Debian mirror.

Why it exists: the reference image (AlmaLinux GenericCloud) needs the internet, and VM-layer tests must run
offline with guests isolated (``restrict=on``). So the tests build a minimal Debian image that already carries
everything the VM layer uses (cloud-init, sshd, sudo, NFS server and client, iproute2, ping) and boot it with
direct kernel boot (no bootloader needed). The mirror is read from the host's apt configuration, never
hard-coded. The result is cached: a later run (or CI job with a kept cache) reuses it.

The built image comes with a ``<image>.boot.json`` sidecar (kernel, initrd, kernel command line, guest
family, sha256) that :mod:`.images` understands, so the same file also works as ``BASE_IMAGE=/path/image``.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from ...base.digest import sha256_file
from ...base.run import quoted
from .images import BootSpec

#: Packages the VM layer needs inside an offline guest (the issue's list).
PACKAGES = (
    "systemd-sysv",
    "udev",
    "linux-image-cloud-amd64",
    "initramfs-tools",
    "cloud-init",
    "openssh-server",
    "sudo",
    "nfs-kernel-server",
    "nfs-common",
    "iproute2",
    "iputils-ping",
    # every guest script downloads with curl (provision/guest/_lib.sh fetch); without it the first fetch fails
    # with "curl: command not found" instead of stopping with the offline message
    "curl",
    "ca-certificates",
    # the kernel modules k8s-node-prep.sh loads (overlay, br_netfilter) need modprobe
    "kmod",
    # not in the list, but without D-Bus systemd-logind never starts and the guest ignores the ACPI
    # power button that QMP system_powerdown presses (measured: down then waits for its timeout)
    "dbus",
)
#: Bump when the recipe changes so a cached image of an older recipe is rebuilt.
RECIPE = 3
IMAGE_NAME = f"debian-test-r{RECIPE}.qcow2"

_CLOUD_CFG = """\
# written by pytest-slurmflox testimage: seeds come from a NoCloud disk only
datasource_list: [ NoCloud, None ]
locale: C.UTF-8
"""

_FSTAB = "LABEL=root / ext4 defaults,errors=remount-ro 0 1\n"


class ImageBuildError(RuntimeError):
    """The test image could not be built; the message names the failing step."""


def host_debian_mirror(sources_dir: Path = Path("/etc/apt")) -> tuple[str, str]:
    """(mirror URI, suite) of the host's main Debian source, from its apt configuration.

    Reads deb822 ``*.sources`` and one-line ``*.list`` files; a source whose suite ends in ``-security`` or
    ``-updates`` is not the main archive. Raises ImageBuildError when nothing usable is configured.
    """
    candidates: list[tuple[str, str]] = []
    files = [sources_dir / "sources.list", *sorted((sources_dir / "sources.list.d").glob("*"))]
    for path in files:
        if not path.is_file():
            continue
        text = path.read_text(errors="replace")
        if path.suffix == ".sources":
            for stanza in re.split(r"\n\s*\n", text):
                fields: dict[str, str] = {}
                for line in stanza.splitlines():
                    if line.startswith("#") or ":" not in line:
                        continue
                    key, _, value = line.partition(":")
                    fields[key.strip().lower()] = value.strip()
                if "deb" not in fields.get("types", "").split() or fields.get("enabled", "yes") == "no":
                    continue
                for uri in fields.get("uris", "").split():
                    for suite in fields.get("suites", "").split():
                        candidates.append((uri, suite))
        elif path.suffix == ".list" or path.name == "sources.list":
            for line in text.splitlines():
                parts = re.sub(r"\[[^]]*\]", "", line).split()
                if len(parts) >= 3 and parts[0] == "deb":
                    candidates.append((parts[1], parts[2]))
    for uri, suite in candidates:
        if "debian" in uri and not suite.endswith(("-security", "-updates", "-backports")):
            return uri, suite
    raise ImageBuildError(f"no Debian main archive found in the apt sources under {sources_dir}")


def _run(argv: list[str], step: str, timeout: float = 1200) -> None:
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-15:]
        raise ImageBuildError(f"{step} failed (exit {proc.returncode}):\n" + "\n".join(tail))


def _mmdebstrap_argv(suite: str, root: Path, mirror: str) -> list[str]:
    """The rootfs build: minbase plus PACKAGES, host keys and machine-id emptied, networkd on, NFS server off."""
    hooks = [
        'rm -f "$1"/etc/ssh/ssh_host_*',
        ': > "$1"/etc/machine-id',
        'rm -f "$1"/var/lib/dbus/machine-id',
        'chroot "$1" systemctl enable systemd-networkd',
        'chroot "$1" systemctl disable nfs-kernel-server || true',
        'rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/*.bin',
    ]
    return [
        "mmdebstrap",
        "--variant=minbase",
        "--include=" + ",".join(PACKAGES),
        "--customize-hook=" + quoted("printf '%%s' %s > \"$1\"/etc/cloud/cloud.cfg.d/99_slurmflox.cfg", _CLOUD_CFG),
        "--customize-hook=" + quoted("printf '%%s' %s > \"$1\"/etc/fstab", _FSTAB),
        *("--customize-hook=" + h for h in hooks),
        suite,
        str(root),
        mirror,
    ]


def build_debian_test_image(
    cache_dir: Path,
    progress: Callable[[str], None] = print,
    *,
    suite: str | None = None,
    size: str = "3G",
) -> BootSpec:
    """Return the cached test image, building it first if needed (needs root, mmdebstrap, mkfs.ext4, qemu-img).

    The image is only published (renamed into place, sidecar written last) after every step succeeded, so a
    half-built image is never mistaken for a cached one.
    """
    cache_dir.mkdir(parents=True, exist_ok=True)
    image = cache_dir / IMAGE_NAME
    sidecar = image.with_name(image.name + ".boot.json")
    if sidecar.exists() and image.exists():
        return BootSpec.load(image)
    for tool in ("mmdebstrap", "mkfs.ext4", "qemu-img"):
        if shutil.which(tool) is None:
            raise ImageBuildError(f"{tool} is not installed (apt-get install mmdebstrap e2fsprogs qemu-utils)")
    mirror, host_suite = host_debian_mirror()
    suite = suite or host_suite
    t0 = time.monotonic()
    progress(f"building Debian {suite} test image from {mirror} (cached in {cache_dir})")
    with tempfile.TemporaryDirectory(dir=cache_dir, prefix=".build-") as tmp:
        root = Path(tmp) / "root"
        _run(_mmdebstrap_argv(suite, root, mirror), "mmdebstrap")
        progress(f"  rootfs ready after {time.monotonic() - t0:.0f}s")
        kernels = sorted((root / "boot").glob("vmlinuz-*"))
        initrds = sorted((root / "boot").glob("initrd.img-*"))
        if not kernels or not initrds:
            raise ImageBuildError("the rootfs has no /boot/vmlinuz-* or /boot/initrd.img-*")
        kernel = cache_dir / f"debian-test-r{RECIPE}.vmlinuz"
        initrd = cache_dir / f"debian-test-r{RECIPE}.initrd"
        shutil.copyfile(kernels[-1], kernel)
        shutil.copyfile(initrds[-1], initrd)
        raw = Path(tmp) / "root.raw"
        _run(["truncate", "-s", size, str(raw)], "truncate")
        _run(["mkfs.ext4", "-q", "-L", "root", "-d", str(root), str(raw)], "mkfs.ext4")
        partial = Path(tmp) / "image.qcow2"
        _run(["qemu-img", "convert", "-f", "raw", "-O", "qcow2", str(raw), str(partial)], "qemu-img convert")
        partial.replace(image)
    spec = BootSpec(
        image=image,
        sha256=sha256_file(image),
        kernel=kernel,
        initrd=initrd,
        append="root=LABEL=root ro console=ttyS0 net.ifnames=1",
        family="debian",
    )
    spec.save()
    progress(f"  test image {image.name} built in {time.monotonic() - t0:.0f}s")
    return spec


def describe(spec: BootSpec) -> str:
    return json.dumps(spec.to_json(), indent=2)
