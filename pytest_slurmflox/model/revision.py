"""The canonical runtime revision of a worker cohort.

Two workers are compatible exactly when everything that can change what a Slurm task sees, or what capacity a
worker advertises, is equal. The revision is ``sha256:`` over a canonical JSON document of exactly those
settings (reference: "Whole-cohort runtime revisions"). COMPUTE_REPLICAS is deliberately absent: it sizes the
cohort, it does not change it.

Canonical means: fixed key names, sorted keys, no whitespace, ASCII only, set-like lists sorted. JSON of
strings and integers is byte-identical across processes and Python versions, so the hash is too.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass

from .settings import TASK_PROFILE_SCHEMA, Settings

#: Bump only if the serialization itself changes; part of the hashed document.
REVISION_FORMAT = 1


@dataclass(frozen=True)
class RuntimeSpec:
    """The eleven runtime-relevant settings of a worker cohort."""

    image: str
    flox_env: str
    flox_generation: int
    activate_mode: str
    skip_containers: tuple[str, ...]
    task_profile_schema: str
    env_exports: tuple[str, ...]
    path_precedence: str
    cpus: int
    mem_mb: int
    home_path: str

    @classmethod
    def from_settings(cls, settings: Settings, *, image: str | None = None) -> RuntimeSpec:
        """``image`` lets a substrate substitute the image it really runs (the local node image digest)."""
        return cls(
            image=image or settings.worker_image,
            flox_env=settings.worker_flox_env,
            flox_generation=settings.worker_flox_generation,
            activate_mode=settings.worker_flox_activate_mode,
            skip_containers=settings.worker_flox_skip_containers,
            task_profile_schema=TASK_PROFILE_SCHEMA,
            env_exports=settings.worker_env_exports,
            path_precedence=settings.worker_path_precedence,
            cpus=settings.worker_cpus,
            mem_mb=settings.worker_mem_mb,
            home_path=settings.worker_home_path,
        )

    def canonical(self) -> bytes:
        doc = asdict(self)
        doc["skip_containers"] = sorted(set(self.skip_containers))
        doc["env_exports"] = sorted(set(self.env_exports))
        doc["format"] = REVISION_FORMAT
        return json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode("ascii")

    @property
    def revision(self) -> str:
        return "sha256:" + hashlib.sha256(self.canonical()).hexdigest()


def runtime_revision(settings: Settings, *, image: str | None = None) -> str:
    """The runtime revision the given settings deploy."""
    return RuntimeSpec.from_settings(settings, image=image).revision


def short_revision(revision: str) -> str:
    """A Kubernetes-label-safe form (no ':' and at most 63 characters): ``sha256-<first 32 hex>``."""
    algo, _, digest = revision.partition(":")
    return f"{algo}-{digest[:32]}"
