"""``<workdir>/site-example.yaml``: the local cluster described as a customer describes theirs.

Why: a customer's target file (``substrate: existing``) is the third use of the project, and the one the local
substrate could not show: nothing of ours realized a customer's workers, so the target file declares what they
must realize (its ``runtime`` section, pytest_slurmflox/model/declaredruntime.py). This module writes that file for the
local cluster, through target.py's one serializer, so the same suites can sign the local cluster off the way they
sign off a customer's and a user has a complete example to start from.

Where each part comes from (never from the substrate's private records: its state, node annotations or the
provider's ``.records``):

- login, admin, identity, slurm, directory, accounting, rest, limitations and ``expect``: the target spec the
  substrate describes itself with (:meth:`LocalSubstrate.target_spec`), as a customer declares their endpoints
  and deployed settings;
- ``runtime``: computed from the pinned environment's definition the way a customer exports a generation off the
  cluster: its store path by Nix's evaluation of our derivation (``nix-instantiate``, nothing built), its NAR hash
  and content digest from the definition staged as the derivation lays it out, and PATH entries, executables and
  the allow-listed exports by activating that staged copy with the nodes' own activation program;
- ``runtime.task_prolog``: the TaskProlog this cluster's slurm.conf names; ``runtime.profile_dir``: where the
  worker's initializer writes its profile (scripts.py ``SLURMFLOX_PROFILE_DIR`` and its ``current`` link).
"""

from __future__ import annotations

import dataclasses
import shutil
import tempfile
from pathlib import Path

from ...model.declaredruntime import DeclaredRuntime
from ...model.settings import Settings
from ...model.target import TargetSpec, write_target
from . import runtime
from .nix import NixStore
from .runtime import REALIZED_MARKER, EnvRef, check_manifest, definition_dir

#: The file ``up`` writes next to target.yaml.
SITE_EXAMPLE = "site-example.yaml"
#: Where the worker's task-profile initializer writes the profile a task reads (scripts.py, provision/README.md).
PROFILE_DIR = "/run/flox-task-profile/current"


def declared_runtime(settings: Settings, nix: NixStore, task_prolog: str) -> DeclaredRuntime:
    """The ``runtime`` section for ``settings``' pinned environment, computed from its definition."""
    ref = EnvRef.parse(settings.worker_flox_ref)
    src = definition_dir(ref)
    check_manifest(ref, src)
    realized = nix.expected_path(str(ref))  # evaluation of our derivation: the path it builds to
    with tempfile.TemporaryDirectory(prefix="slurmflox-site-") as tmp:
        staged = Path(tmp) / f"{ref.name}-{ref.generation}"
        shutil.copytree(src, staged, symlinks=True)
        # the derivation's $out: the definition copied, plus the marker naming it (nix.DERIVATION_NIX)
        (staged / REALIZED_MARKER).write_text(f"{ref.name}-{ref.generation}\n")
        record = runtime.make_record(ref, staged)
        nar = nix.run("nix-hash", "--type", "sha256", "--base32", str(staged)).stdout.strip()
    activation = record.activations[settings.worker_flox_activate_mode]
    if not activation.ok:
        raise runtime.RealizationError(f"{ref}: activation {activation.status}")

    def at(rel: str) -> str:
        return realized if rel in (".", "") else f"{realized}/{rel}"

    exports = {k: v.replace(runtime.FLOX_ENV_TOKEN, realized) for k, v in activation.exports.items()}
    return DeclaredRuntime(
        realized_path=realized,
        path=tuple(at(rel) for rel in activation.path),
        exports={name: exports[name] for name in settings.worker_env_exports if name in exports},
        profile_dir=PROFILE_DIR,
        task_prolog=task_prolog,
        executables={at(rel): names for rel, names in activation.bin_entries.items() if names},
        content_digest=record.content_digest,
        nar_hash=f"sha256:{nar}",
    )


def site_example(spec: TargetSpec, declared: DeclaredRuntime) -> TargetSpec:
    """``spec`` (the substrate's own description) as a customer's target: substrate existing, no work dir and no
    deployment record, the declared runtime."""
    return dataclasses.replace(
        spec,
        path=None,
        name=f"{spec.name}-as-a-site",
        substrate="existing",
        workdir=None,
        deployed=None,
        runtime=declared,
    )


def write_site_example(spec: TargetSpec, nix: NixStore, task_prolog: str, workdir: Path) -> Path:
    """Write ``<workdir>/site-example.yaml`` through target.py's serializer; its path."""
    settings = spec.expect.settings
    path = workdir / SITE_EXAMPLE
    write_target(site_example(spec, declared_runtime(settings, nix, task_prolog)), path)
    return path
