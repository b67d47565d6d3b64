"""The worker's task profile (provision/README.md), read by a task on each worker.

Why a module of its own: T3, T11 and T2's store check read the same files from the same place; their names and
the reading script are spelled once, here.
"""

from __future__ import annotations

from collections.abc import Iterable

from pytest_slurmflox.run import Result

from ._marks import on_each, per_node

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


def read_profiles(jobs, nodes: Iterable[str]) -> tuple[dict[str, dict[str, list[str]]], Result]:
    """The task profile of every node, read by a task on that node: node -> file -> lines."""
    script = (
        # no profile directory at all: every file is missing (said as such, never a shell error taken for a file)
        f"cd {PROFILE_DIR} 2>/dev/null || {{ for f in {' '.join(PROFILE_FILES)}; do printf 'MISSING\\t%s\\n' \"$f\"; "
        "done; exit 0; }; "
        f"for f in {' '.join(PROFILE_FILES)}; do "
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
            if name not in PROFILE_FILES:  # a line of someone else's (a site's prolog, a shell's complaint)
                continue
            files.setdefault(name, [])
            if value:
                files[name].append(value)
        profiles[node] = files
    return profiles, res
