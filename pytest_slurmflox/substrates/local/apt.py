"""The host side of the local substrate: is this host usable, which mirror does it use, what must apt add.

The local substrate runs real daemons in namespaces, so it needs root on a Debian-family host whose apt it can
use. We never hard-code a mirror: the node image is built from the first Debian archive the host's own apt
configuration names (the only network the substrate is allowed to reach besides loopback). Missing host tools
are installed with apt-get, waiting for a dpkg lock held by someone else instead of failing on it.
"""

from __future__ import annotations

import fcntl
import os
import re
import shutil
import subprocess
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from ...base.waits import WaitTimedOut, poll_missing
from .. import SubstrateUnavailable

Progress = Callable[[str], None]

#: Every program the local substrate runs on the host -> the Debian package that provides it. The substrate's own
#: package step installs whatever is missing, so nothing is found only because the developer's machine had it.
#: tests/unit/test_host_programs.py derives the programs
#: from the code (argv lists, the Nix runner's commands, the host side of the shell scripts) and fails when one is
#: not listed here. Most are Essential or Priority required on Debian; listing them anyway keeps a minimal image
#: (or trixie, where ``hostname`` is no longer Essential) honest.
HOST_PROGRAMS: dict[str, str] = {
    "mmdebstrap": "mmdebstrap",  # the node image (image.py)
    "ip": "iproute2",  # the fabric's namespaces, bridge and veths (network.py)
    "unshare": "util-linux",  # a node's namespaces (node.py), the Nix store's mount namespace (nix.py)
    "nsenter": "util-linux",  # into a node's network namespace (node.py) and into a node (nsrunner.py)
    "mount": "mount",  # node-boot.sh and the Nix runner
    "tar": "tar",  # unpacking the node image (image.py)
    "nix-instantiate": "nix-bin",  # the Nix runtime provider's generations (nix.py)
    "nix-store": "nix-bin",
    "nix-env": "nix-bin",
    "sh": "dash",
    "bash": "bash",
    "env": "coreutils",
    "rm": "coreutils",
    "mkdir": "coreutils",
    "cp": "coreutils",
    "mv": "coreutils",
    "ln": "coreutils",
    "touch": "coreutils",
    "install": "coreutils",
    "chroot": "coreutils",
    "chmod": "coreutils",
    "tee": "coreutils",  # the fabric namespace's own settings (network.py)
    "sed": "sed",  # the node image's customize script (image.py)
    "grep": "grep",
    "hostname": "hostname",  # node-boot.sh names the node's UTS namespace
    "apt-get": "apt",  # this module's own package step
}

_DPKG_LOCKS = ("/var/lib/dpkg/lock-frontend", "/var/lib/dpkg/lock", "/var/lib/apt/lists/lock")


def require_root_debian(os_release: Path = Path("/etc/os-release")) -> None:
    """Refuse clearly (SubstrateUnavailable) unless we are root on a Debian-family host."""
    if os.geteuid() != 0:
        raise SubstrateUnavailable(
            "the local substrate needs root (it creates network/mount/UTS/PID namespaces and overlay mounts); "
            "run as root or choose another substrate"
        )
    ids = _os_release_ids(os_release)
    if not ids & {"debian", "ubuntu"} or shutil.which("apt-get") is None:
        raise SubstrateUnavailable(
            f"the local substrate needs a Debian or Ubuntu host with apt (found ID/ID_LIKE {sorted(ids) or '?'})"
        )


def _os_release_ids(path: Path) -> set[str]:
    try:
        text = path.read_text()
    except OSError:
        return set()
    ids: set[str] = set()
    for line in text.splitlines():
        key, _, value = line.partition("=")
        if key in ("ID", "ID_LIKE"):
            ids.update(value.strip().strip('"').split())
    return ids


# --------------------------------------------------------------------------------------------- mirror
@dataclass(frozen=True)
class AptSource:
    types: tuple[str, ...]
    uris: tuple[str, ...]
    suites: tuple[str, ...]
    components: tuple[str, ...]


def parse_sources_list(text: str) -> list[AptSource]:
    """One-line format (``deb [opts] URI suite comp...``)."""
    out = []
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        line = re.sub(r"\[[^\]]*\]", " ", line)
        parts = line.split()
        if len(parts) >= 3 and parts[0] in ("deb", "deb-src"):
            out.append(AptSource((parts[0],), (parts[1],), (parts[2],), tuple(parts[3:])))
    return out


def parse_deb822(text: str) -> list[AptSource]:
    """deb822 format (``*.sources``): stanzas separated by blank lines; ``Enabled: no`` is skipped."""
    out = []
    for stanza in re.split(r"\n\s*\n", text):
        fields: dict[str, str] = {}
        last = None
        for raw in stanza.splitlines():
            if raw.lstrip().startswith("#"):
                continue
            if raw[:1] in (" ", "\t") and last:
                fields[last] += " " + raw.strip()
                continue
            key, sep, value = raw.partition(":")
            if sep:
                last = key.strip().lower()
                fields[last] = value.strip()
        if not fields.get("uris") or fields.get("enabled", "yes").lower() == "no":
            continue
        out.append(
            AptSource(
                tuple(fields.get("types", "deb").split()),
                tuple(fields["uris"].split()),
                tuple(fields.get("suites", "").split()),
                tuple(fields.get("components", "").split()),
            )
        )
    return out


def host_sources(etc_apt: Path = Path("/etc/apt")) -> list[AptSource]:
    """Every enabled apt source of the host, in apt's reading order."""
    sources: list[AptSource] = []
    main = etc_apt / "sources.list"
    if main.is_file():
        sources += parse_sources_list(main.read_text())
    extra = etc_apt / "sources.list.d"
    if extra.is_dir():
        for path in sorted(extra.iterdir()):
            if path.suffix == ".list":
                sources += parse_sources_list(path.read_text())
            elif path.suffix == ".sources":
                sources += parse_deb822(path.read_text())
    return sources


def debian_mirror(sources: Iterable[AptSource]) -> str:
    """The URI of the host's main Debian archive (not -security, not a third-party repo).

    Recognised by what it serves: a ``deb`` source whose suites are plain Debian release names and whose
    components include ``main``. Raises SubstrateUnavailable when the host names none.
    """
    release = re.compile(r"(buster|bullseye|bookworm|trixie|forky|sid|stable|testing|unstable)(-updates)?\Z")
    for src in sources:
        if "deb" not in src.types or "main" not in src.components:
            continue
        if not any(release.match(s) for s in src.suites):
            continue
        for uri in src.uris:
            if uri.startswith(("http://", "https://", "file:/")) and "security" not in uri:
                return uri.rstrip("/")
    raise SubstrateUnavailable(
        "the host's apt configuration names no Debian archive (deb ... <release> main); the local substrate "
        "builds its node image only from the mirror the host already uses"
    )


# --------------------------------------------------------------------------------------------- install
def missing_packages(tools: dict[str, str] | None = None) -> list[str]:
    """Debian packages providing host programs that are not on PATH."""
    tools = HOST_PROGRAMS if tools is None else tools
    want = {pkg for cmd, pkg in tools.items() if shutil.which(cmd) is None}
    return sorted(want)


def wait_for_dpkg_lock(
    progress: Progress, timeout: float = 900.0, locks: tuple[str, ...] = _DPKG_LOCKS, poll: float = 2.0
) -> None:
    """Block until nobody holds dpkg/apt locks (another apt run on a shared host), or time out clearly."""
    told: list[str] = []

    def held() -> str | None:
        busy = [p for p in locks if _locked(p)]
        if busy and not told:
            progress(f"apt: waiting for the dpkg lock ({busy[0]} is held by another apt/dpkg run)")
            told.append(busy[0])
        return busy[0] if busy else None

    try:
        poll_missing(held, what="the dpkg lock", timeout=timeout, interval=poll)
    except WaitTimedOut as exc:
        raise SubstrateUnavailable(f"apt: {exc.last} stayed locked for {timeout:.0f}s; try again later") from None


def _locked(path: str) -> bool:
    try:
        fd = os.open(path, os.O_RDWR)
    except OSError:
        return False
    try:
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return True
    else:
        fcntl.lockf(fd, fcntl.LOCK_UN)
        return False
    finally:
        os.close(fd)


def ensure_host_packages(progress: Progress, tools: dict[str, str] | None = None) -> list[str]:
    """Install whatever host package the substrate needs and lacks; returns what was installed."""
    need = missing_packages(tools)
    if not need:
        return []
    progress(f"apt: installing host packages the local substrate needs: {' '.join(need)}")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for argv in (["apt-get", "update"], ["apt-get", "install", "-y", "--no-install-recommends", *need]):
        for attempt in range(3):
            wait_for_dpkg_lock(progress)
            proc = subprocess.run(argv, capture_output=True, text=True, env=env, check=False)
            if proc.returncode == 0:
                break
            if "Could not get lock" in proc.stderr and attempt < 2:
                continue
            raise SubstrateUnavailable(
                f"apt: `{' '.join(argv)}` failed (exit {proc.returncode}): {proc.stderr.strip()[-800:]}"
            )
    still = missing_packages(tools)
    if still:
        raise SubstrateUnavailable(f"apt installed {need} but {still} still provide no command on PATH")
    return need
