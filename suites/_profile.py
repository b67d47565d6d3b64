"""The worker's task profile (provision/README.md), read by a task on each worker.

Why a module of its own: T3, T11 and T2's store check read the same files from the same place; their names and
the reading are spelled once, here. T3's checks and T11's revision check judge one reading per run
(:func:`profiles_once`, suites/_shared.py): the files are the same whichever requirement reads them.

The reading is written in a site check's words (docs/site-checks.md): each file is testinfra's
``file(path).content_string`` on the cohort's worker Hosts, asked of every worker in one step
(harness/sitehosts.py ``gather``).
"""

from __future__ import annotations

from functools import partial
from typing import Any

from testinfra.host import Host

from pytest_slurmflox.base.run import Result
from pytest_slurmflox.harness.sitehosts import Workers

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


def read_profiles(target, hosts: Workers) -> tuple[dict[str, dict[str, list[str]]], Result]:
    """The task profile of every worker, read by a task on that worker: node -> file -> its non-empty lines (a
    file the task cannot read is listed under ``__missing__``), and the step that read them (one step, the
    cohort's systems known from the pre-flight)."""
    return _profiles(_read(hosts, profile_dir(target)))


def profiles_once(request, target, hosts: Workers) -> tuple[dict[str, dict[str, list[str]]], Result]:
    """:func:`read_profiles`, read once in the run: the first check to ask reads, the others judge that reading."""
    return _profiles(observe_once(request, "task-profiles", lambda: _read(hosts, profile_dir(target))))


def _read(hosts: Workers, directory: str) -> dict[str, Any]:
    """Each profile file, in testinfra's words: ``file(...).content_string`` on every worker, one gathering."""
    facts = {name: partial(_content, f"{directory.rstrip('/')}/{name}") for name in PROFILE_FILES}
    return {"files": hosts.gather(facts), "step": hosts.results[-1]}


def _content(path: str, host: Host) -> str | None:
    """``path``'s content as the task reads it; None when the task cannot (testinfra raises RuntimeError when
    ``cat`` fails: no such file or directory, or one closed to the task)."""
    try:
        return host.file(path).content_string
    except RuntimeError:
        return None


def _profiles(read: dict[str, Any]) -> tuple[dict[str, dict[str, list[str]]], Result]:
    profiles: dict[str, dict[str, list[str]]] = {}
    for name in PROFILE_FILES:
        for node, text in read["files"][name].items():
            files = profiles.setdefault(node, {})
            if text is None:
                files.setdefault("__missing__", []).append(name)
            else:
                files[name] = [line for line in text.splitlines() if line]
    return profiles, read["step"]
