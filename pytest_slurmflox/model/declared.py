"""Declared expectations only: which target-file keys each group needs, and which a target declares.

The reference's defaults (settings.py) describe clusters this project provisions. A customer's target file
(``substrate: existing``) is the only source of what its cluster is expected to be: a check that needs an
expectation the file does not declare is NOT RUN naming the key, never compared with a default and never PASS
(suites/_capability.py ``declared``). A target a substrate wrote declares everything (it wrote every setting).

Keys are the target file's own paths (``expect.settings.WORKER_CPUS``, ``slurm.partition``, ``identity.uid``).
:data:`GROUP_KEYS` is the one table: the start-of-run message lists what a target leaves out per group from it,
docs/customer.md "What each group needs" is checked against it (tests/unit/test_declared.py), and the same test proves
that the ``declared(...)`` calls in suites/ ask for exactly these keys, group by group.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from .groups import CAPABILITY_GROUPS, GROUPS, NAMED_ONLY_GROUPS
from .settings import WORKER_KEYS


def setting(key: str) -> str:
    return f"expect.settings.{key}"


ENV = (setting("WORKER_FLOX_ENV"), setting("WORKER_FLOX_GENERATION"))
MODE = setting("WORKER_FLOX_ACTIVATE_MODE")
EXPORTS = setting("WORKER_ENV_EXPORTS")
PRECEDENCE = setting("WORKER_PATH_PRECEDENCE")
HOME = setting("WORKER_HOME_PATH")
CPUS, MEM = setting("WORKER_CPUS"), setting("WORKER_MEM_MB")
IMAGE = "expect.image"  #: declared by ``expect.image`` or ``expect.settings.WORKER_IMAGE``
REPLICAS = "expect.replicas"  #: declared by ``expect.replicas`` or ``expect.settings.COMPUTE_REPLICAS``
REVISION = "expect.revision"  #: only as written: a revision computed from the settings cannot disagree with them
#: What the runtime revision is computed from (revision.RuntimeSpec): every worker runtime setting and the image.
REVISION_INPUTS = (*(setting(k) for k in WORKER_KEYS if k != "WORKER_IMAGE"), IMAGE)
IDENTITY = ("identity.user", "identity.uid", "identity.gid", "identity.supp_group", "identity.supp_gid")
PARTITION = "slurm.partition"
KUBERNETES = ("kubernetes.namespace", "kubernetes.nodeset")
#: The worker pool's node label and taint (T10's placement; only on a target with a ``kubernetes`` section).
PLACEMENT = ("kubernetes.worker_label", "kubernetes.worker_taint")
#: The image of the node debug pod T1 reads a customer node's containerd configuration through (nodedebug.py).
NODE_DEBUG = "kubernetes.node_debug_image"

#: Keys every group needs: the cohort pre-flight before each check reads the partition's nodes
#: (suites/conftest.py ``workers``), and on a target with a ``kubernetes`` section the NodeSet that owns them.
COMMON_KEYS: tuple[str, ...] = (PARTITION,)
KUBERNETES_KEYS: tuple[str, ...] = KUBERNETES


def _unique(*keys: str) -> tuple[str, ...]:
    return tuple(dict.fromkeys(keys))


#: Group -> the keys its checks compare with, beyond :data:`COMMON_KEYS` (a group not listed needs none).
GROUP_KEYS: Mapping[str, tuple[str, ...]] = {
    "T1": _unique(*REVISION_INPUTS),
    "T2": ENV,
    "T3": _unique(*REVISION_INPUTS),
    "T8": (CPUS, MEM),
    "T9": (HOME,),
    "T11": _unique(*REVISION_INPUTS, REVISION, REPLICAS),
    "TP": (MODE, PRECEDENCE, EXPORTS),
    "TI": (*IDENTITY, HOME),
    "TB": (HOME,),
}


#: Group -> keys it needs only on a target with a ``kubernetes`` section (its Kubernetes-side checks).
KUBERNETES_GROUP_KEYS: Mapping[str, tuple[str, ...]] = {"T1": (NODE_DEBUG,), "T10": PLACEMENT}


def declared_keys(doc: Mapping[str, Any]) -> frozenset[str]:
    """The keys a target document declares, as target-file paths (:data:`GROUP_KEYS` spells them so)."""
    keys: set[str] = set()
    expect = doc.get("expect") or {}
    settings = expect.get("settings") or {}
    keys.update(setting(str(k)) for k in settings)
    if expect.get("image") or "WORKER_IMAGE" in settings:
        keys.add(IMAGE)
    if expect.get("replicas") is not None or "COMPUTE_REPLICAS" in settings:
        keys.add(REPLICAS)
    if expect.get("revision"):
        keys.add(REVISION)
    for section in ("slurm", "identity", "kubernetes"):
        value = doc.get(section) or {}
        if isinstance(value, Mapping):
            keys.update(f"{section}.{k}" for k, v in value.items() if v not in (None, ""))
    return frozenset(keys)


def required(group: str, *, kubernetes: bool) -> tuple[str, ...]:
    """Every key ``group`` needs on a target (with or without a ``kubernetes`` section)."""
    kube = (*KUBERNETES_KEYS, *KUBERNETES_GROUP_KEYS.get(group, ())) if kubernetes else ()
    return _unique(*COMMON_KEYS, *kube, *GROUP_KEYS.get(group, ()))


def missing(have: frozenset[str] | None, keys: Iterable[str]) -> list[str]:
    """The ``keys`` a target does not declare (none for a substrate's target: ``have`` is None)."""
    return [] if have is None else [key for key in keys if key not in have]


def undeclared(spec: Any) -> dict[str, list[str]]:
    """Group -> the keys a customer target does not declare (empty for a substrate's target)."""
    kube = spec.kubernetes is not None
    out = {group: missing(spec.declared, required(group, kubernetes=kube)) for group in GROUPS}
    return {group: keys for group, keys in out.items() if keys}


def undeclared_message(spec: Any) -> str:
    """One message listing, per group, the keys the target file does not declare ('' when nothing is missing)."""
    found = undeclared(spec)
    if not found:
        return ""
    groups = "; ".join(f"{group}: {', '.join(keys)}" for group, keys in found.items())
    return (
        f"target {spec.name!r} does not declare what these groups compare with; their checks that need it are "
        f"NOT RUN ({groups})"
    )


#: Groups that check a service the target declares in its own section: undeclared, they SKIP naming it.
SERVICE_SECTIONS: Mapping[str, str] = {**CAPABILITY_GROUPS, "TDC": "directory", "TAR": "accounting"}


def readme_table() -> str:
    """The table of what a customer target file must declare per group (docs/customer.md; tests keep it equal)."""
    rows = [
        "| Group | The target file must declare |",
        "|---|---|",
        f"| every group | {_cell(COMMON_KEYS)} (the cohort pre-flight reads the partition's nodes) |",
        f"| every group, with a `kubernetes` section | {_cell(KUBERNETES_KEYS)} (the NodeSet that owns the workers) |",
    ]
    for group in GROUPS:
        keys = GROUP_KEYS.get(group, ())
        if kube_keys := KUBERNETES_GROUP_KEYS.get(group):
            first = f"{_cell(keys)}; " if keys else ""
            rows.append(f"| {group} | {first}with a `kubernetes` section: {_cell(kube_keys)} |")
        elif key := NAMED_ONLY_GROUPS.get(group):
            first = _cell(keys) if keys else "nothing more"
            rows.append(f"| {group} | {first}; runs only when named, and `{key}` makes it required |")
        elif section := SERVICE_SECTIONS.get(group):
            rows.append(
                f"| {group} | the `{section}` section (service groups, below){', ' + _cell(keys) if keys else ''} |"
            )
        else:
            rows.append(f"| {group} | {_cell(keys) if keys else 'nothing more'} |")
    return "\n".join(rows)


def _cell(keys: Iterable[str]) -> str:
    return ", ".join(f"`{key}`" for key in keys)
