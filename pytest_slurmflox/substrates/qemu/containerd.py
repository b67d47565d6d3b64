"""Is the Flox runtime registered in containerd's *effective* configuration? Parsed TOML, never grep.

The worker node's ``flox-runtime.sh`` leaves registering the runtime to Flox's own shim installer; what this module
checks is the result, read from ``containerd config dump`` (the configuration containerd really runs with, imports
merged). A grep over that dump misses a correct configuration, because containerd prints every key of a runtime
table in alphabetical order (``runtime_path`` comes nine lines after the table header in 1.7) and quote style and
table paths differ between config versions 2 and 3; parsing the TOML has neither problem.

What a working registration is (each point names its upstream source):

- the table ``plugins."io.containerd.grpc.v1.cri".containerd.runtimes.<handler>`` (config version 2, containerd
  1.7) or ``plugins."io.containerd.cri.v1.runtime".containerd.runtimes.<handler>`` (version 3, containerd 2.x):
  floxdocs ``docs/k8s/install/self-managed.md`` "Manual installation" step 3, containerd ``docs/cri/config.md``;
- ``runtime_type = "io.containerd.runc.v2"`` with ``runtime_path`` the shim: the shim is a wrapped build of
  ``containerd-shim-runc-v2`` (floxdocs ``docs/k8s/tech.md`` "containerd-shim"; ``docs/k8s/install/eks.md``: "Our shim
  is a build of the runc shim with hooks, so override runtime_path"; containerd ``docs/cri/config.md``:
  ``runtime_path`` overrides the binary resolved from ``runtime_type``);
- ``pod_annotations`` and ``container_annotations`` passing ``flox.dev/*`` through, or the shim never sees
  ``flox.dev/environment`` (floxdocs ``docs/k8s/install/troubleshooting.md`` "Configuration conflicts"; patterns
  are Go ``path.Match`` patterns per containerd ``docs/cri/config.md``);
- ``options.SystemdCgroup = true`` (same floxdocs sections; kubelet runs with the systemd cgroup driver here).
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from typing import Any

from ...base.run import Result
from ...model.labels import ANNOTATION_ENVIRONMENT

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

RUNC_V2 = "io.containerd.runc.v2"
#: The containerd runtime (CRI handler) the shim is registered as: the reference design ("registers the shim as the
#: containerd runtime named flox") and the RuntimeClass ``flox``'s ``handler``.
FLOX_RUNTIME_HANDLER = "flox"
#: Where Flox's shim installer puts the shim (floxdocs docs/k8s/install/self-managed.md, "Manual installation").
FLOX_SHIM_PATH = "/usr/local/bin/containerd-shim-flox-v2"
#: The runtimes table per config version (containerd docs/cri/config.md; version 3 is containerd 2.x).
RUNTIMES_TABLE = {
    2: ("plugins", "io.containerd.grpc.v1.cri", "containerd", "runtimes"),
    3: ("plugins", "io.containerd.cri.v1.runtime", "containerd", "runtimes"),
}


def go_path_match(pattern: str, name: str) -> bool:
    """Go's ``path.Match`` for the forms annotation patterns use (``*``, ``?``, literal text, ``[...]``):
    ``*`` never crosses a ``/``, unlike Python's fnmatch."""
    regex = ""
    i = 0
    while i < len(pattern):
        c = pattern[i]
        if c == "*":
            regex += "[^/]*"
        elif c == "?":
            regex += "[^/]"
        elif c == "[":
            end = pattern.find("]", i + 1)
            if end < 0:
                return False  # Go: ErrBadPattern, which containerd treats as no match
            body = pattern[i + 1 : end]
            regex += "[" + ("^" + body[1:] if body.startswith("^") else body) + "]"
            i = end
        elif c == "\\" and i + 1 < len(pattern):
            i += 1
            regex += re.escape(pattern[i])
        else:
            regex += re.escape(c)
        i += 1
    return re.fullmatch(regex, name) is not None


@dataclass(frozen=True)
class RuntimeCheck:
    """The verdict on one effective configuration: ``problems`` empty means the runtime is registered."""

    handler: str
    version: int | None
    runtime: dict[str, Any] | None
    problems: tuple[str, ...]

    @property
    def ok(self) -> bool:
        return not self.problems


def check_flox_runtime(dump: str, handler: str, shim: str) -> RuntimeCheck:
    """Judge ``containerd config dump`` output: does runtime ``handler`` resolve to ``shim`` as Flox needs?"""
    try:
        doc = tomllib.loads(dump)
    except tomllib.TOMLDecodeError as exc:
        return RuntimeCheck(handler, None, None, (f"containerd config dump is not TOML: {exc}",))
    version = doc.get("version", 1)
    if version not in RUNTIMES_TABLE:
        return RuntimeCheck(handler, version, None, (f"config version {version!r} predates containerd 1.7",))
    table: Any = doc
    for key in RUNTIMES_TABLE[version]:
        table = table.get(key, {}) if isinstance(table, dict) else {}
    runtime = table.get(handler) if isinstance(table, dict) else None
    path = ".".join(f'"{k}"' if "." in k else k for k in (*RUNTIMES_TABLE[version], handler))
    if not isinstance(runtime, dict):
        imports = doc.get("imports") or []
        hint = f" (imports: {imports})" if imports else " (no imports are configured)"
        return RuntimeCheck(handler, version, None, (f"no runtime table {path} in the effective config{hint}",))
    problems = []
    if runtime.get("runtime_type") != RUNC_V2:
        problems.append(f"{path}.runtime_type is {runtime.get('runtime_type')!r}, not {RUNC_V2!r}")
    if runtime.get("runtime_path") != shim:
        problems.append(f"{path}.runtime_path is {runtime.get('runtime_path')!r}, not {shim!r}")
    for field in ("pod_annotations", "container_annotations"):
        patterns = runtime.get(field) or []
        if not any(isinstance(p, str) and go_path_match(p, ANNOTATION_ENVIRONMENT) for p in patterns):
            problems.append(f"{path}.{field} {patterns!r} does not pass {ANNOTATION_ENVIRONMENT} through")
    options = runtime.get("options") or {}
    if options.get("SystemdCgroup") is not True:
        problems.append(f"{path}.options.SystemdCgroup is {options.get('SystemdCgroup')!r}, not true")
    return RuntimeCheck(handler, version, runtime, tuple(problems))


#: The oldest containerd this stack accepts: containerd RELEASES.md "Kubernetes Support" recommends 2.2.0+ (or
#: 2.3.0+) for Kubernetes 1.36, and 1.7/2.0/2.1 are not listed for it.
CONTAINERD_FLOOR = (2, 2)
_VERSION = re.compile(r"\bv?(\d+)\.(\d+)\.(\d+)")


def containerd_version(text: str) -> tuple[int, int, int] | None:
    """The version in ``containerd --version`` output (``containerd containerd.io 2.2.1 <commit>``, Debian's
    ``containerd github.com/containerd/containerd/v2 2.1.9+unknown``): the first x.y.z after the first word."""
    match = _VERSION.search(text.partition(" ")[2])
    return (int(match[1]), int(match[2]), int(match[3])) if match else None


def runc_problems(dump: str) -> list[str]:
    """Is runc (every pod's runtime except Flox's) on the systemd cgroup driver kubelet uses, in the effective
    configuration? kubernetes.io "Container Runtimes", containerd, "Configuring the systemd cgroup driver":
    ``options.SystemdCgroup = true`` on the runc runtime (version 2 and 3 tables as :data:`RUNTIMES_TABLE`)."""
    try:
        doc = tomllib.loads(dump)
    except tomllib.TOMLDecodeError as exc:
        return [f"containerd config dump is not TOML: {exc}"]
    version = doc.get("version", 1)
    if version not in RUNTIMES_TABLE:
        return [f"config version {version!r} predates containerd 1.7"]
    table: Any = doc
    for key in (*RUNTIMES_TABLE[version], "runc", "options"):
        table = table.get(key, {}) if isinstance(table, dict) else {}
    got = table.get("SystemdCgroup") if isinstance(table, dict) else None
    if got is not True:
        path = ".".join(f'"{k}"' if "." in k else k for k in (*RUNTIMES_TABLE[version], "runc", "options"))
        return [f"{path}.SystemdCgroup is {got!r}, not true: runc would use cgroupfs while kubelet uses systemd"]
    return []


def containerd_problems(version_text: str, dump: str) -> list[str]:
    """What keeps this node's containerd from serving Kubernetes here: too old, or runc not on systemd cgroups."""
    version = containerd_version(version_text)
    floor = ".".join(map(str, CONTAINERD_FLOOR))
    if version is None:
        return [f"cannot read a version in {version_text.strip()!r}"]
    if version[:2] < CONTAINERD_FLOOR:
        return [f"containerd {'.'.join(map(str, version))} is older than {floor} (containerd RELEASES.md)"]
    return runc_problems(dump)


def node_problems(host: str, dump: Result) -> list[str]:
    """What is wrong with node ``host``'s ``containerd config dump`` (empty: runtime ``flox`` is the shim), each
    line naming the node; T1 runs this on every node a worker pod is scheduled on."""
    if not dump.ok:
        return [f"{host}: containerd config dump failed", dump.describe()]
    verdict = check_flox_runtime(dump.stdout, FLOX_RUNTIME_HANDLER, FLOX_SHIM_PATH)
    return [f"{host}: {problem}" for problem in verdict.problems]
