"""The local node image: one immutable Debian rootfs shared read-only by every node of every local cluster.

Built with mmdebstrap from the mirror the host's apt names, in two stages:

1. a throw-away *builder* chroot (compiler, libslurm-dev, the suite's MPI, deb-src for the suite) that fetches
   Debian's own slurm-wlm source package, runs ``configure`` only to get ``config.h``, and compiles
   ``contribs/nss_slurm/libnss_slurm.c`` against the packaged libslurm (Debian does not package libnss_slurm,
   and ``LaunchParameters=enable_nss_slurm`` needs it to resolve names of users the worker has no account for),
   plus a tiny MPI program (``mpi-hello``);
2. the *node* rootfs (Slurm daemons, client, sackd where the suite has it, munge, the suite's MPI (mpistack.py),
   sshd) with those two artifacts copied in, packed as a tar archive.

The archive's sha256 is the image identity (the local meaning of WORKER_IMAGE's digest). The cache key is
derived from suite + package list + recipe text, so a recipe change builds a new image and an unchanged one is
reused. The cache lives outside any work dir (default ``/var/cache/slurmflox``, override with --slurmflox-local-cache,
env ``SLURMFLOX_LOCAL_CACHE``) so ``destroy`` and fresh test work dirs keep it.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from filelock import FileLock

from ...base.digest import sha256_file
from ...base.run import quoted
from ...base.waits import Status, lines_or_silence
from .. import SubstrateUnavailable
from .builder import MPI_HELLO_C, SOURCE_FALLBACK_SUITES, builder_packages, builder_script
from .mpistack import mpi_stack

Progress = Callable[[str], None]

IMAGE_REPOSITORY = "slurmflox-node"
DEFAULT_CACHE = Path("/var/cache/slurmflox")
#: Suites the local substrate builds a node image for, and the RPC authentication each one's Slurm supports.
#: trixie ships Slurm 24.11, sid 26.05 (sackd, auth/slurm with AuthInfo=use_client_ids, both from 23.11 on);
#: bookworm ships 22.05, which has neither (measured: its slurm-wlm-basic-plugins has auth_munge.so only, and no
#: sackd package): its cluster uses auth/munge, with the test account on the controller as well (sites with a
#: directory service have it there), because slurmctld then resolves the submitting user itself.
SUITE_AUTH = {"trixie": "slurm", "sid": "slurm", "bookworm": "munge"}
SUPPORTED_SUITES = tuple(SUITE_AUTH)

#: Packages of the node image (the order is irrelevant; the cache key uses the sorted list).
NODE_PACKAGES = (
    "slurmctld",
    "slurmd",
    "slurm-client",
    "slurm-wlm-basic-plugins",
    "munge",
    "gcc",  # mpicc needs a compiler: the suites build their MPI probe on a worker
    "libc6-dev",
    "openssh-server",
    "openssh-client",
    "hostname",
    "procps",
    "iproute2",
    "passwd",
    "nix-bin",  # the worker verifies its realized generation with nix-store --verify-path
    *("slapd", "ldap-utils", "nslcd", "libnss-ldapd"),  # directory identity: slapd on ctl, nslcd on login
    # accounting (slurmdbd over a real MariaDB server, in the `db` node) and REST (slurmrestd on the
    # controller side); Debian's packages, started by node-init.sh like every other daemon (no systemd here)
    "slurmdbd",
    "mariadb-server",
    "mariadb-client",
    "slurmrestd",
    "slurm-wlm-jwt-plugin",  # auth/jwt (AuthAltTypes): slurmctld and slurmdbd verify REST tokens with it
)
#: Packages only a suite whose Slurm authenticates RPCs with auth/slurm gets (sackd is new in 23.11).
AUTH_SLURM_PACKAGES = ("sackd",)


def node_packages(suite: str) -> tuple[str, ...]:
    """The node image's packages for ``suite``: its MPI stack (mpistack.py), sackd only where auth/slurm exists."""
    auth = AUTH_SLURM_PACKAGES if SUITE_AUTH.get(suite) == "slurm" else ()
    return NODE_PACKAGES + mpi_stack(suite).node_packages + auth


def node_customize(suite: str) -> str:
    """NODE_CUSTOMIZE for ``suite``: without sackd in the image, the final check asks for munged instead.

    (The trixie text stays byte-identical, so its recipe key and cached image are unchanged.)"""
    if SUITE_AUTH.get(suite) == "slurm":
        return NODE_CUSTOMIZE
    return NODE_CUSTOMIZE.replace("command -v sackd'", "command -v munged'")


def suite_auth(suite: str) -> str:
    """``slurm`` or ``munge``: the cluster authentication the suite's Slurm supports (see SUITE_AUTH)."""
    return SUITE_AUTH[suite]


#: debconf answers given before the packages are installed: slapd makes no database of its own (the cluster's
#: directory is configured and seeded at boot from the work dir, see directory.py).
NODE_PRESEED = "slapd slapd/no_configuration boolean true\n"

#: Runs on the host with the finished node rootfs as $1 (mmdebstrap customize hook, mode root).
NODE_CUSTOMIZE = r"""
set -eu
root="$1"; art="$2"
install -m 0644 "$art/libnss_slurm.so.2" "$root/usr/lib/x86_64-linux-gnu/libnss_slurm.so.2"
install -m 0755 "$art/mpi-hello" "$root/usr/local/bin/mpi-hello"
cp "$art/slurm-version" "$root/etc/slurmflox-slurm-version"
# #13: no node resolves through LDAP unless its boot says so (the login node does); nslcd.conf is written at boot.
sed -i -E '/^(passwd|group|shadow):/ s/[[:space:]]+ldap//g' "$root/etc/nsswitch.conf"
rm -f "$root/etc/nslcd.conf"
# nss_slurm answers passwd/group lookups for users of running steps (no account on the worker needed).
sed -i -E 's/^(passwd|group):([[:space:]]+)files/\1:\2slurm files/' "$root/etc/nsswitch.conf"
grep -Eq '^passwd:.*slurm' "$root/etc/nsswitch.conf"
printf 'SlurmdSpoolDir=/var/lib/slurm/slurmd\n' > "$root/etc/nss_slurm.conf"
# A base-image command the Flox environments shadow, so PATH precedence is observable.
printf '#!/bin/sh\necho base\n' > "$root/usr/local/bin/flox-probe"
chmod 0755 "$root/usr/local/bin/flox-probe"
# Per-cluster secrets and identities are supplied at boot, never baked in.
rm -f "$root"/etc/ssh/ssh_host_* "$root/etc/munge/munge.key" "$root/etc/slurm/slurm.key"
: > "$root/etc/machine-id"
rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/*.bin "$root"/var/cache/apt/archives/*.deb
mkdir -p "$root/flox/store" "$root/opt/slurmflox" "$root/etc/slurm/flox-task-prolog"
# Fail the build, not a later test, if a runtime library or the MPI toolchain is missing.
if chroot "$root" ldd /usr/lib/x86_64-linux-gnu/libnss_slurm.so.2 | grep -q "not found"; then
    echo "E: libnss_slurm.so.2 has unresolved libraries in the node image" >&2
    exit 1
fi
chroot "$root" sh -c 'command -v mpicc && command -v gcc && command -v slurmd && command -v sackd' >/dev/null
chroot "$root" sh -c 'command -v slurmdbd && command -v slurmrestd && command -v mariadbd' >/dev/null
test -e "$root/usr/lib/x86_64-linux-gnu/slurm-wlm/auth_jwt.so"
"""


@dataclass(frozen=True)
class NodeImage:
    """A built, unpacked node image."""

    digest: str  #: sha256 hex of the archive
    archive: Path
    rootfs: Path  #: the unpacked read-only lower dir
    suite: str
    slurm_version: str

    @property
    def ref(self) -> str:
        """``slurmflox-node:<suite>@sha256:<hex>``: immutable, in the same shape as WORKER_IMAGE."""
        return f"{IMAGE_REPOSITORY}:{self.suite}@sha256:{self.digest}"


def cache_root() -> Path:
    """The default cache; the plugin passes --slurmflox-local-cache (env SLURMFLOX_LOCAL_CACHE) to the substrate."""
    return Path(DEFAULT_CACHE)


def recipe_key(suite: str) -> str:
    """What decides the image content we ask for: suite, packages, build scripts."""
    doc = {
        "suite": suite,
        "node": sorted(node_packages(suite)),
        "builder": sorted(builder_packages(suite)),
        "scripts": [MPI_HELLO_C, builder_script(suite), node_customize(suite), NODE_PRESEED],
        "format": 1,
    }
    raw = json.dumps(doc, sort_keys=True).encode()
    return hashlib.sha256(raw).hexdigest()[:24]


def cached_image(suite: str, cache: Path | None = None) -> NodeImage | None:
    """The cached image for ``suite`` if complete (archive, unpacked rootfs, metadata), else None."""
    base = (cache or cache_root()) / "images" / f"{suite}-{recipe_key(suite)}"
    meta = base / "image.json"
    if not meta.is_file() or not (base / "rootfs" / ".slurmflox-complete").exists():
        return None
    info = json.loads(meta.read_text())
    return NodeImage(info["digest"], base / "image.tar", base / "rootfs", suite, info["slurm_version"])


def ensure_image(
    suite: str, mirror: str, progress: Progress, cache: Path | None = None, release: dict | None = None
) -> NodeImage:
    """The node image for ``suite``: reuse the cache or build it (several minutes, with progress). ``release``:
    the mirror's Release file as judged before the build (release.ReleaseCheck.record); with
    ``expired_accepted`` the sources carry ``[check-valid-until=no]``, and the image record keeps it."""
    if suite not in SUPPORTED_SUITES:
        raise SubstrateUnavailable(
            f"image: the local substrate has no node image recipe for suite {suite!r}; "
            f"it supports {', '.join(SUPPORTED_SUITES)}"
        )
    cache = cache or cache_root()
    base = cache / "images" / f"{suite}-{recipe_key(suite)}"
    base.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(base) + ".lock"):
        found = cached_image(suite, cache)
        if found is not None:
            return found
        progress(f"image: building the {suite} node image from {mirror} (first time only; takes minutes)")
        source = f"[check-valid-until=no] {mirror}" if (release or {}).get("expired_accepted") else mirror
        t0 = time.monotonic()
        if base.exists():
            _remove_tree(base)
        base.mkdir(parents=True)
        work = Path(tempfile.mkdtemp(prefix="build-", dir=base))
        try:
            artifacts = _build_artifacts(suite, source, work, progress)
            archive = base / "image.tar"
            _build_node_archive(suite, source, artifacts, archive, work, progress)
            meta = {"suite": suite, "mirror": mirror, "recipe": recipe_key(suite), "release": release}
            _unpack_and_record(base, archive, artifacts, meta, progress)
        finally:
            for log in work.glob("*.log"):  # keep the logs of the last attempt for diagnosis
                shutil.copy(log, base / log.name)
            _remove_tree(work)
        image = cached_image(suite, cache)
        assert image is not None
        progress(f"image: {image.ref} built in {time.monotonic() - t0:.0f}s")
        return image


def _unpack_and_record(base: Path, archive: Path, artifacts: Path, meta: dict, progress: Progress) -> None:
    """Hash the archive, unpack the read-only lower dir, write image.json (the image record)."""
    progress("image: hashing the archive")
    digest = sha256_file(archive)
    progress("image: unpacking the read-only lower dir")
    rootfs = base / "rootfs"
    rootfs.mkdir()
    subprocess.run(
        ["tar", "-xpf", str(archive), "-C", str(rootfs), "--numeric-owner", "--xattrs", "--xattrs-include=*"],
        check=True,
    )
    (rootfs / ".slurmflox-complete").write_text(digest + "\n")
    versions = {"slurm_version": (artifacts / "slurm-version").read_text().strip()}
    nss = artifacts / "nss-slurm-source"  # a builder that took libnss_slurm's source from another version says so
    if nss.is_file():
        versions["nss_slurm_source"] = nss.read_text().strip()
    record = {"digest": digest, **meta, **versions, "built": time.time()}
    (base / "image.json").write_text(json.dumps(record, indent=2) + "\n")


def _remove_tree(path: Path) -> None:
    if path.exists():
        shutil.rmtree(path, ignore_errors=True)
        if path.exists():  # read-only dirs left by a half-built chroot
            subprocess.run(["rm", "-rf", "--one-file-system", str(path)], check=False)


#: Seconds between two looks at a silent mmdebstrap (each may say the stage it is in).
STAGE_LOOK = 5.0


def _mmdebstrap(argv: list[str], log: Path, progress: Progress, label: str) -> None:
    """Run mmdebstrap, forwarding its ``I:`` lines as progress and keeping the full log. While it is silent (a stage
    that installs packages takes minutes), the wait says which stage it is in (waits.Status)."""
    status = Status(f"the node image's {label} stage (mmdebstrap)")
    stage = "starting"
    with log.open("w") as handle:
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        assert proc.stdout is not None
        for line in lines_or_silence(proc.stdout.fileno(), STAGE_LOOK):
            if line is None:
                status.tick(f"last said: {stage}")
                continue
            handle.write(line)
            stripped = line.strip()
            if stripped.startswith(("I:", "E:", "W:")):
                stage = stripped[:160]
                progress(f"image[{label}]: {stage}")
        rc = proc.wait()
    if rc != 0:
        tail = "".join(log.read_text().splitlines(keepends=True)[-30:])
        raise SubstrateUnavailable(
            f"image: mmdebstrap ({label}) failed with exit {rc}; log kept as {log.parent.parent / log.name}:\n{tail}"
        )


def _common_args(suite: str) -> list[str]:
    return [
        "mmdebstrap",
        "--mode=root",
        "--variant=minbase",
        '--aptopt=APT::Install-Recommends "false"',
        "--dpkgopt=path-exclude=/usr/share/man/*",
        "--dpkgopt=path-exclude=/usr/share/locale/*",
        "--dpkgopt=path-exclude=/usr/share/doc/*",
        "--dpkgopt=path-include=/usr/share/doc/*/copyright",
        "--keyring=/usr/share/keyrings/debian-archive-keyring.gpg",
    ]


def _build_artifacts(suite: str, source: str, work: Path, progress: Progress) -> Path:
    out = work / "artifacts"
    out.mkdir()
    (work / "builder.sh").write_text(builder_script(suite))
    (work / "mpi-hello.c").write_text(MPI_HELLO_C)
    chroot_dir = work / "builder-root"
    argv = [
        *_common_args(suite),
        "--include=" + ",".join(builder_packages(suite)),
        f'--customize-hook=mkdir -p "$1/build" && cp {work}/builder.sh {work}/mpi-hello.c "$1/build/"',
        '--customize-hook=chroot "$1" bash /build/builder.sh',
        f'--customize-hook=cp -a "$1/build/out/." {out}/',
        suite,
        str(chroot_dir),
        f"deb {source} {suite} main",
        f"deb-src {source} {suite} main",
        *(f"deb-src {source} {other} main" for other in SOURCE_FALLBACK_SUITES.get(suite, ())),
    ]
    progress("image: stage 1/2: builder chroot (libnss_slurm from Debian's slurm-wlm source, mpi-hello)")
    _mmdebstrap(argv, work / "builder.log", progress, "builder")
    _remove_tree(chroot_dir)
    for name in ("libnss_slurm.so.2", "mpi-hello", "slurm-version", "libslurm-package"):
        if not (out / name).is_file():
            raise SubstrateUnavailable(f"image: the builder produced no {name}; see {work}/builder.log")
    return out


def _build_node_archive(
    suite: str, source: str, artifacts: Path, archive: Path, work: Path, progress: Progress
) -> None:
    (work / "customize.sh").write_text(node_customize(suite))
    libslurm = (artifacts / "libslurm-package").read_text().strip()
    argv = [
        *_common_args(suite),
        "--include=" + ",".join((*node_packages(suite), libslurm)),
        quoted('--essential-hook=printf %s | chroot "$1" debconf-set-selections', NODE_PRESEED),
        f'--customize-hook=sh {work}/customize.sh "$1" {artifacts}',
        suite,
        str(archive),
        f"deb {source} {suite} main",
    ]
    daemons = "slurmctld, slurmd, sackd" if suite_auth(suite) == "slurm" else "slurmctld, slurmd"
    progress(f"image: stage 2/2: node rootfs ({daemons}, munge, {mpi_stack(suite).label}, sshd)")
    _mmdebstrap(argv, work / "node.log", progress, "node")
