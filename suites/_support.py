"""What several suites share: capability requirements, reading the task profile on workers, requirement asserts.

Everything here goes through the ``target`` (its login endpoint, Slurm, optional Kubernetes and pool) so the suites
run unchanged against any cluster.
"""

from __future__ import annotations

from collections.abc import Iterable

import pytest

from pytest_slurmflox.run import Result

#: Files of the task profile (provision/README.md); ``revision`` is the completion marker.
PROFILE_FILES = (
    "schema",
    "environment",
    "activate-mode",
    "image",
    "realized-path",
    "path-precedence",
    "path",
    "exports",
    "revision",
)
PROFILE_DIR = "/run/flox-task-profile/current"


def require(target, capability: str) -> None:
    """SKIP, naming the missing capability, unless the target has it."""
    why = target.why_missing(capability)
    if why:
        pytest.skip(f"missing capability {capability}: {why}")


def require_enforced(target, limit: str) -> None:
    """SKIP, naming the limitation, if the target file declares that it cannot enforce ``limit``.

    A target file may carry ``limitations: {<limit>: <why>}`` (the local substrate writes one for each cgroup
    controller this host does not let it use): the check then reports that limitation instead of passing.
    """
    declared = (target.spec.raw.get("limitations") or {}).get(limit)
    if declared:
        pytest.skip(f"missing capability {limit}: {declared}")


def requirement(ok: bool, requirement: str, *evidence: Result | str) -> None:
    """Assert a requirement; the failure names it and shows the evidence that decided it."""
    if ok:
        return
    shown = "\n".join(e.describe() if isinstance(e, Result) else str(e) for e in evidence)
    pytest.fail(f"requirement not met: {requirement}\n{shown}", pytrace=False)


def per_node(result: Result) -> dict[str, list[str]]:
    """Split the output of a command that printed ``NODE|text`` lines into node -> lines."""
    out: dict[str, list[str]] = {}
    for line in result.stdout.splitlines():
        node, sep, text = line.partition("|")
        if sep:
            out.setdefault(node, []).append(text)
    return out


def on_each(jobs, nodes: Iterable[str], script: str, *, args: str = "", timeout: float = 180.0) -> Result:
    """Run ``script`` once on each node in one step; every output line is prefixed with ``<node>|``."""
    names = sorted(nodes)
    body = (
        f"set -o pipefail; {{ {script}; }} 2>&1 | "
        'while IFS= read -r l; do printf \'%s|%s\\n\' "$SLURMD_NODENAME" "$l"; done'
    )
    return jobs.srun(
        f"-N{len(names)} -n{len(names)} --ntasks-per-node=1 -w {','.join(names)} {args}",
        "bash -c " + _q(body),
        timeout=timeout,
    )


def read_profiles(jobs, nodes: Iterable[str]) -> tuple[dict[str, dict[str, list[str]]], Result]:
    """The task profile of every node, read by a task on that node: node -> file -> lines."""
    script = (
        f"cd {PROFILE_DIR} || exit 1; for f in {' '.join(PROFILE_FILES)}; do "
        'if [ -f "$f" ]; then while IFS= read -r l || [ -n "$l" ]; do printf \'%s\\t%s\\n\' "$f" "$l"; done < "$f";'
        " printf '%s\\t\\n' \"$f\"; else printf 'MISSING\\t%s\\n' \"$f\"; fi; done"
    )
    res = on_each(jobs, nodes, script)
    profiles: dict[str, dict[str, list[str]]] = {}
    for node, lines in per_node(res).items():
        files: dict[str, list[str]] = {}
        for line in lines:
            name, _, value = line.partition("\t")
            if name == "MISSING":
                files.setdefault("__missing__", []).append(value)
                continue
            files.setdefault(name, [])
            if value:
                files[name].append(value)
        profiles[node] = files
    return profiles, res


def _q(text: str) -> str:
    import shlex

    return shlex.quote(text)


def slurm_version_tuple(version: str) -> tuple[int, ...]:
    parts = []
    for piece in version.split(".")[:3]:
        digits = "".join(c for c in piece if c.isdigit())
        parts.append(int(digits or 0))
    return tuple(parts)
