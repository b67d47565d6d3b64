"""A Nix store owned by the local substrate: environment generations as Nix derivations.

Why: a Flox generation is a Nix closure, and a worker pinned to ``owner/name:N`` is right only if it runs from
exactly the store paths that generation names, unmodified. Debian's nix-bin works offline: every command here runs
in a private mount namespace where the substrate's store directory (``<root>/nix``) is bind-mounted on ``/nix``,
with ``sandbox = false``, no build users and no substituters (measured: a chroot store ``--store local?root=``
cannot build with builder ``/bin/sh``, it is not inside the chroot; the bind mount can). The expected output path
comes from :meth:`NixStore.expected_path` (``nix-instantiate`` over our own derivation, ``nix-store -q --outputs``),
never from a worker; ``nix-store --verify-path`` is Nix's own content check.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from filelock import FileLock

from ...base.run import command_line, quoted
from ...model.workdir import atomic_write
from . import runtime
from .runtime import ENVS_ROOT, EnvRef, RealizationError, definition_dir

#: Settings for every Nix command: offline, no sandbox, no build users (root builds), nothing substituted.
NIX_CONFIG = "sandbox = false\nbuild-users-group =\nsubstituters =\nrequire-sigs = false\n"

#: The derivation of one environment generation, built from local files only: the definition directory is added
#: to the store under a name that does not depend on where the package is installed, and copied to ``$out``.
DERIVATION_NIX = r"""{ src, name }:
builtins.derivation {
  inherit name;
  system = builtins.currentSystem;
  builder = "/bin/sh";
  PATH = "/usr/bin:/bin";
  src = builtins.path { path = src; name = name + "-definition"; };
  args = [ "-c" ("cp -R \"$src\" \"$out\" && chmod -R u+w \"$out\" && "
    + "printf '%s\\n' \"$name\" > \"$out/.slurmflox-realized\"") ];
}
"""


#: (store root, reference, definition digest) -> store path realized by this process (see NixStore.realize).
_REALIZED: dict[tuple[str, str, str], str] = {}


class NixError(RuntimeError):
    """A Nix command failed; the message carries its stderr."""


@dataclass(frozen=True)
class Verification:
    path: str
    ok: bool
    detail: str  #: Nix's own words when the check fails


@dataclass(frozen=True)
class NixStore:
    """A store rooted at ``root`` (``root/nix/store``, ``root/nix/var``), kept with the image cache."""

    root: Path
    envs_root: Path = ENVS_ROOT
    #: The deployment whose profiles this handle writes (the local cluster prefix): two clusters on one machine
    #: share the store but never a profile.
    deployment: str = "default"

    @property
    def nix_dir(self) -> Path:
        return self.root / "nix"

    @property
    def profiles_dir(self) -> Path:
        """Host path of this deployment's profiles (``/nix/var/nix/profiles/workers/<deployment>`` in a node)."""
        return self.nix_dir / "var/nix/profiles/workers" / self.deployment

    def profile(self, worker: str) -> str:
        """The profile (as seen under /nix) that pins ``worker``'s generation."""
        return f"/nix/var/nix/profiles/workers/{self.deployment}/{worker}"

    def remove_profiles(self) -> None:
        """Forget this deployment's profiles (destroy): the store paths they held become garbage for
        ``nix-store --gc``; the store itself stays, like the image cache."""
        shutil.rmtree(self.profiles_dir, ignore_errors=True)

    def remove_profile(self, worker: str) -> None:
        """Forget one worker's profile and its generation links (a worker removed from the cohort)."""
        for link in (self.profiles_dir / worker, *self.profiles_dir.glob(f"{worker}-*-link")):
            link.unlink(missing_ok=True)

    def profile_links(self, worker: str) -> list[Path]:
        """What of ``worker``'s profile exists on the host (the profile and its generation links)."""
        named = [self.profiles_dir / worker] if (self.profiles_dir / worker).is_symlink() else []
        return named + sorted(self.profiles_dir.glob(f"{worker}-*-link"))

    def run(self, *argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        """Run one Nix command with the store mounted on /nix in a private mount namespace, one at a time.

        Nix runs here without a daemon, on one SQLite database shared by every cluster of the machine: concurrent
        commands (workers converging at once, two clusters coming up) made a fresh store's first
        ``nix-instantiate`` fail with "SQLite database ... is busy" (seen on a pristine host). A file lock beside
        the store serializes them across threads and processes (a lock per thread's own descriptor)."""
        self.root.mkdir(parents=True, exist_ok=True)
        with FileLock(str(self.root / ".nix.lock")):
            return self._run(*argv, check=check)

    def _run(self, *argv: str, check: bool) -> subprocess.CompletedProcess[str]:
        self.nix_dir.mkdir(parents=True, exist_ok=True)
        (self.nix_dir / "var/nix/profiles/workers").mkdir(parents=True, exist_ok=True)
        Path("/nix").mkdir(exist_ok=True)
        inner = command_line(quoted("mount --make-rprivate / && mount --bind %s /nix && exec", self.nix_dir), argv)
        env = {"PATH": "/usr/bin:/bin:/usr/sbin:/sbin", "NIX_CONFIG": NIX_CONFIG, "HOME": "/nonexistent"}
        proc = subprocess.run(
            ["unshare", "-m", "/bin/sh", "-c", inner], capture_output=True, text=True, env=env, timeout=300
        )
        if check and proc.returncode != 0:
            raise NixError(f"{argv[0]} failed (exit {proc.returncode}): {proc.stderr.strip()}")
        return proc

    def _expression(self) -> Path:
        path = self.root / "slurmflox-env.nix"
        if not path.is_file() or path.read_text() != DERIVATION_NIX:
            atomic_write(path, DERIVATION_NIX)  # workers converge at once: never one shared temp file
        return path

    def instantiate(self, ref: str) -> str:
        """The .drv path of ``ref``'s derivation (evaluation only: nothing is built)."""
        env_ref = EnvRef.parse(ref)
        src = definition_dir(env_ref, self.envs_root)
        name = f"{env_ref.name}-{env_ref.generation}"
        args = ("--argstr", "name", name, "--arg", "src", str(src.resolve()))
        proc = self.run("nix-instantiate", str(self._expression()), *args)
        return proc.stdout.strip().splitlines()[-1]

    def expected_path(self, ref: str) -> str:
        """The store path ``ref`` realizes to, computed from our derivation, never read from a worker."""
        drv = self.instantiate(ref)
        return self.run("nix-store", "-q", "--outputs", drv).stdout.strip().splitlines()[-1]

    def realize(self, ref: str) -> str:
        """Build ``ref`` (idempotent: Nix reuses a valid path) and keep it from the garbage collector.

        A converge realizes the same generation for every worker: within one process, a generation already realized
        from the same definition content whose path is still in the store is not asked of Nix again (a no-change
        ``up`` must stay well under 2 s on a busy host)."""
        src = definition_dir(EnvRef.parse(ref), self.envs_root)
        key = (str(self.root), ref, runtime.content_digest(src))
        known = _REALIZED.get(key)
        if known is not None and (self.root / known.lstrip("/")).is_dir():
            return known
        drv = self.instantiate(ref)
        root = f"/nix/var/nix/gcroots/slurmflox/{Path(drv).name.removesuffix('.drv')}"
        (self.nix_dir / "var/nix/gcroots/slurmflox").mkdir(parents=True, exist_ok=True)
        try:
            self.run("nix-store", "-r", drv, "--add-root", root, "--indirect")
        except NixError as exc:
            raise RealizationError(f"{ref}: nix could not realize {drv}: {exc}") from None
        try:  # the root Nix just wrote points at the output (one output: out)
            path = os.readlink(self.root / root.lstrip("/"))
        except OSError:
            path = self.run("nix-store", "-q", "--outputs", drv).stdout.strip().splitlines()[-1]
        _REALIZED[key] = path
        return path

    def add_path(self, src: Path) -> str:
        """Add a host directory to the store as is (used to stage a path that is no generation of ours)."""
        return self.run("nix-store", "--add", str(src.resolve())).stdout.strip().splitlines()[-1]

    def set_profile(self, worker: str, path: str) -> None:
        """Record ``path`` as a new generation of ``worker``'s profile (no-op if it is already current)."""
        if self.profile_target(worker) != path:
            self.profiles_dir.mkdir(parents=True, exist_ok=True)
            self.run("nix-env", "-p", self.profile(worker), "--set", path)

    def switch_generation(self, worker: str, generation: int) -> None:
        self.run("nix-env", "-p", self.profile(worker), "--switch-generation", str(generation))

    def profile_target(self, worker: str) -> str | None:
        """The store path ``worker``'s profile points at now, read on the host (the link is ours, not the
        worker's); None when the worker has no profile."""
        link = self.profiles_dir / worker
        try:
            target = os.readlink(link)
            gen = target if target.startswith("/") else str(link.parent / target)
            return os.readlink(self.nix_dir / Path(gen).relative_to("/nix") if gen.startswith("/nix") else gen)
        except (OSError, ValueError):
            return None

    def registered_hash(self, path: str) -> str:
        """The NAR hash the store registered for ``path`` when it was built (``sha256:<base32>``)."""
        return self.run("nix-store", "-q", "--hash", path).stdout.strip()

    def verify(self, path: str) -> Verification:
        """Nix's own content check of ``path`` (the hash recorded at registration against the bytes now)."""
        proc = self.run("nix-store", "--verify-path", path, check=False)
        detail = proc.stderr.strip() or f"exit {proc.returncode}"
        return Verification(path, proc.returncode == 0, "" if proc.returncode == 0 else detail)


def realize_worker(ref: str, store_root: Path, records: Path, worker: str, deployment: str) -> runtime.Realized:
    """Realize ``ref`` for ``worker`` of ``deployment``: check the definition, build its derivation, make it the
    current generation of the worker's profile, and keep the provider's record (PATH entries, exports) under
    ``records`` by store name."""
    env_ref = EnvRef.parse(ref)
    runtime.check_manifest(env_ref, definition_dir(env_ref, ENVS_ROOT))
    nix = NixStore(store_root, deployment=deployment)
    path = nix.realize(ref)
    nix.set_profile(worker, path)
    host = nix.root / path.lstrip("/")
    record = runtime.ensure_record(env_ref, records, host)
    return runtime.Realized(str(env_ref), host, record.content_digest, record)


#: The NAR hash of what a worker really has at ``$1``, computed on the worker without touching the store database
#: (``nix-store --dump`` serializes a path; ``nix-hash`` converts), in the store's ``sha256:<base32>`` form.
WORKER_NAR_HASH_SH = (
    'h=$(/usr/bin/nix-store --dump "$1" | /usr/bin/sha256sum) && h=${h%% *} && '
    'echo "sha256:$(/usr/bin/nix-hash --type sha256 --to-base32 "$h")"'
)
