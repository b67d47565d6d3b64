"""The worker's task profile (provision/README.md), read by a task on each worker.

Why a module of its own: T3, T11 and T2's store check read the same files from the same place; their names and
the reading script are spelled once, here. T3's checks and T11's revision check judge one reading per run
(:func:`profiles_once`, suites/_shared.py): the files are the same whichever requirement reads them.
"""

from __future__ import annotations

from collections.abc import Iterable

from pytest_slurmflox.base.run import Result, quoted

from ._marks import Marked, on_each, per_node
from ._shared import observe_once

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
#: Where the reference's profile initializer writes the current profile (provision/README.md).
PROFILE_DIR = "/run/flox-task-profile/current"


def profile_dir(target) -> str:
    """Where the workers' task profile is: the declared ``runtime.profile_dir``
    (pytest_slurmflox/model/declaredruntime.py)
    on a target that declares a runtime, else the reference's :data:`PROFILE_DIR`."""
    return target.spec.runtime.profile_dir if target.spec.runtime is not None else PROFILE_DIR


def read_profiles(target, jobs, nodes: Iterable[str]) -> tuple[dict[str, dict[str, list[str]]], Result]:
    """The task profile of every node, read by a task on that node: node -> file -> lines."""
    res = _read_step(jobs, nodes, profile_dir(target))
    return _parse(res), res


def profiles_once(request, target, jobs, nodes: Iterable[str]) -> tuple[dict[str, dict[str, list[str]]], Result]:
    """:func:`read_profiles`, read once in the run: the first check to ask reads, the others judge that reading."""
    res = observe_once(request, "task-profiles", lambda: {"step": _read_step(jobs, nodes, profile_dir(target))})
    return _parse(res["step"]), res["step"]


def _read_step(jobs, nodes: Iterable[str], directory: str) -> Marked:
    """One step on every node printing ``file<TAB>line`` for each profile file (``MISSING<TAB>file`` if absent)."""
    where = quoted("%s", directory)
    script = (
        # no profile directory at all: every file is missing (said as such, never a shell error taken for a file)
        f"cd {where} 2>/dev/null || {{ for f in {' '.join(PROFILE_FILES)}; do printf 'MISSING\\t%s\\n' \"$f\"; "
        "done; exit 0; }; "
        f"for f in {' '.join(PROFILE_FILES)}; do "
        'if [ -f "$f" ]; then while IFS= read -r l || [ -n "$l" ]; do printf \'%s\\t%s\\n\' "$f" "$l"; done < "$f";'
        " printf '%s\\t\\n' \"$f\"; else printf 'MISSING\\t%s\\n' \"$f\"; fi; done"
    )
    return on_each(jobs, nodes, script)


def _parse(res: Marked) -> dict[str, dict[str, list[str]]]:
    profiles: dict[str, dict[str, list[str]]] = {}
    for node, lines in per_node(res).items():
        files: dict[str, list[str]] = {}
        for line in lines:
            name, _, value = line.partition("\t")
            if name == "MISSING":
                files.setdefault("__missing__", []).append(value)
                continue
            if name not in PROFILE_FILES:  # a line of someone else's (a site's prolog, a shell's complaint)
                continue
            files.setdefault(name, [])
            if value:
                files[name].append(value)
        profiles[node] = files
    return profiles
