"""Expected values the suites compare a cluster with, computed by our own code, never read from the cluster.

An acceptance check that compares a worker with a file the worker wrote compares the cluster with itself: a broken
initializer, a replaced environment or a tampered TaskProlog then still passes. So every expectation here comes
from one of three places only:

- the target file's declared settings (``expect.settings``: export allow-list, PATH precedence, activation mode,
  pinned environment) and image;
- our own code applied to them (:func:`expected_revision` runs :mod:`pytest_slurmflox.model.revision`);
- the runtime provider's own record of the realized generation (:class:`Runtime`, built from the record the local
  runtime provider writes when it realizes ``local/<name>:<gen>``: content digest, PATH entries, the executables
  in them and the variables activation exports), obtained from the worker's owner on the host, not through a
  worker.

The profile files a worker's initializer writes (``environment``, ``revision``, ``path``, ``exports``,
``realized-path``) are the thing under test; nothing here reads them.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..model.revision import runtime_revision

#: Variables Slurm itself puts into a task's environment (measured on Slurm 24.11/25.05 with srun and sbatch in
#: every export mode; docs/evidence-table.md lists them). Any other added or changed variable is a finding.
SLURM_SET_PREFIXES: tuple[str, ...] = (
    "SLURM_",  # job/step/task description
    "SLURMD_",  # SLURMD_NODENAME, SLURMD_DEBUG
    "PMI_",  # MPI plugins (pmi2)
    "PMIX_",  # MPI plugins (pmix)
    "OMPI_MCA_plm_slurm",  # srun/sbatch tell Open MPI, PRRTE, MPICH/Hydra and Intel MPI to launch through Slurm
    "PRTE_MCA_plm_slurm",
    "HYDRA_",
    "I_MPI_HYDRA_",
)
SLURM_SET_NAMES: frozenset[str] = frozenset(
    {
        "TMPDIR",  # slurmd sets TMPDIR when the task has none (TmpFS)
        "SRUN_DEBUG",  # srun's verbosity for the step
        "ENVIRONMENT",  # sbatch: ENVIRONMENT=BATCH
        "HOSTNAME",  # sbatch: the batch host
        "SHLVL",  # sbatch resets the shell level of the batch script
        "OLDPWD",  # shell bookkeeping of the submitting shell
        "PWD",  # the submission directory (srun and sbatch chdir there)
        "_",  # the last command of the submitting shell
    }
)


def slurm_sets(name: str) -> bool:
    """True for a variable Slurm itself sets in a task (the documented list above)."""
    return name in SLURM_SET_NAMES or name.startswith(SLURM_SET_PREFIXES)


def passes_through(mode: str, name: str, varlist: tuple[str, ...] = ()) -> bool:
    """Does the submit-side variable ``name`` reach the task under ``mode`` (default, ALL, NONE, NIL, VARLIST) by
    Slurm's semantics? ``--export=<NAME>`` alone exports exactly NAME plus Slurm's own variables (Slurm 20.11 and
    later)."""
    if mode in ("default", "ALL"):
        return True
    if mode == "VARLIST":
        return name in varlist
    return False  # NONE, NIL


@dataclass(frozen=True)
class Runtime:
    """The provider's record of one realized generation, resolved at the path the worker sees it."""

    ref: str
    realized_path: str
    content_digest: str
    path: tuple[str, ...]  #: absolute PATH entries activation puts first, in order
    bin_entries: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  #: entry -> executables in it
    exports: Mapping[str, str] = field(default_factory=dict)  #: every variable activation exports
    activation: str = "ok"

    @classmethod
    def from_record(cls, record: Mapping[str, Any], realized_path: str, mode: str) -> Runtime:
        """``record`` is the local runtime provider's record (RealizationRecord.as_dict(): entries relative to the
        realized path) or a declared runtime's (declaredruntime.DeclaredRecord: absolute entries, kept as given)."""
        act = (record.get("activations") or {}).get(mode) or {}
        root = realized_path.rstrip("/")

        def at(rel: str) -> str:
            if rel.startswith("/"):
                return rel
            return root if rel in (".", "") else f"{root}/{rel}"

        return cls(
            ref=str(record["ref"]),
            realized_path=root,
            content_digest=str(record["content_digest"]),
            path=tuple(at(rel) for rel in act.get("path", [])),
            bin_entries={at(rel): tuple(names) for rel, names in (act.get("bin_entries") or {}).items()},
            exports={k: str(v).replace("${FLOX_ENV}", root) for k, v in (act.get("exports") or {}).items()},
            activation=str(act.get("status", "missing: no record of this activation mode")),
        )


def expected_revision(settings: Any, image: str) -> str:
    """The runtime revision the declared settings deploy, by our own revision code."""
    return runtime_revision(settings, image=image)


def expected_exports(allow_list: tuple[str, ...], runtime: Runtime) -> dict[str, str]:
    """Exactly the allow-listed variables the environment's activation defines, with its values."""
    return {name: runtime.exports[name] for name in allow_list if name in runtime.exports}


#: The PATH a task that received none gets after the environment's entries, in both precedence modes: the OCI
#: runtime default a container image's processes get when the image sets none (containerd's oci.DefaultPathEnv,
#: runc's), written into provision/task-prolog.sh (``_sfp_system_path``). Without it a task under ``--export=NONE``
#: or ``--export=VAR`` finds only the environment's commands (Slurm's own testsuite: ``srun --export=VAR=1 env``
#: failed with "env: command not found").
SYSTEM_DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def expected_task_path(precedence: str, flox_path: tuple[str, ...], task_path: str | None) -> str:
    """The task's PATH: the environment's entries placed per WORKER_PATH_PRECEDENCE around the PATH the task
    received from Slurm; when the mode passed none (None or empty), the environment's entries then
    :data:`SYSTEM_DEFAULT_PATH`, whatever the precedence."""
    flox = ":".join(flox_path)
    if not task_path:
        return f"{flox}:{SYSTEM_DEFAULT_PATH}"
    return f"{flox}:{task_path}" if precedence == "prepend" else f"{task_path}:{flox}"


def task_env_problems(
    task: Mapping[str, str],
    submit: Mapping[str, str],
    *,
    mode: str,
    precedence: str,
    allow_list: tuple[str, ...],
    runtime: Runtime,
    varlist: tuple[str, ...] = (),
    login: Mapping[str, str] | None = None,
) -> list[str]:
    """Every way a task environment differs from the one computed for ``mode``; empty when it is exactly right.

    Expected: the submit-side variables the mode passes (same values), PATH per :func:`expected_task_path`,
    exactly the allow-listed activation variables with the environment's values, plus Slurm's own variables
    (:func:`slurm_sets`). Anything else added or changed is named. ``login``: the user's login environment on the
    worker when the submission implies ``--get-user-env`` (loginenv.py): its variables may be there with its values,
    and PATH may be the login PATH around the environment's entries (or, when slurmd could not load it, none).
    """
    problems: list[str] = []
    exports = expected_exports(allow_list, runtime)
    passed_path = submit.get("PATH") if passes_through(mode, "PATH", varlist) else None
    want_path = expected_task_path(precedence, runtime.path, passed_path)
    got_path = task.get("PATH")
    login_path = (login or {}).get("PATH") if passed_path is None else None
    if login_path and got_path == expected_task_path(precedence, runtime.path, login_path):
        want_path = got_path  # the user's login PATH, which --get-user-env loaded
    if got_path != want_path:
        problems.append(f"PATH is {got_path!r}, expected {want_path!r} ({precedence} of {list(runtime.path)})")
    for name, value in exports.items():
        if task.get(name) != value:
            problems.append(f"allow-listed {name} is {task.get(name)!r}, expected {value!r}")
    for name, value in sorted(task.items()):
        if name == "PATH" or name in exports:
            continue
        if passes_through(mode, name, varlist) and name in submit:
            if value != submit[name] and not slurm_sets(name):
                problems.append(f"{name} changed: {value!r}, submitted {submit[name]!r}")
            continue
        if slurm_sets(name):
            continue
        if login is not None and name in login:
            if value != login[name]:
                problems.append(f"{name}={value!r}, the user's login environment on the worker has {login[name]!r}")
            continue  # the user's login environment (--get-user-env, loginenv.py)
        origin = " (activation state not on the allow-list)" if name in runtime.exports else ""
        problems.append(f"unexpected variable {name}={value!r}{origin}")
    for name, value in sorted(submit.items()):
        if name == "PATH" or name in exports or slurm_sets(name):
            continue
        if passes_through(mode, name, varlist) and name not in task:
            problems.append(f"{name} was submitted ({value!r}) but did not reach the task")
    return problems


def unrealized_environment(env: Mapping[str, str]) -> str | None:
    """Why a task's environment shows no Flox runtime at all, or None when it shows one (a declared
    environment that is not realized is a FAIL, not a SKIP for a missing record). Any Flox activation sets FLOX_ENV;
    without it, a PATH entry in a Nix store or a Flox environment (``/nix/store/...``, ``.../.flox/...``,
    ``.../flox/...``) still counts as a runtime (half an activation is for the content checks to judge)."""
    if env.get("FLOX_ENV"):
        return None
    path = env.get("PATH")
    entries = [e for e in (path or "").split(":") if e]
    if any(e.startswith("/nix/store/") or "/.flox/" in e or "/flox/" in e or e.endswith("/flox") for e in entries):
        return None
    shown = "unset" if path is None else repr(path)
    return f"no FLOX_ENV and no PATH entry of a Flox environment (PATH {shown}: the system's)"


def parse_environ(blob: bytes) -> dict[str, str]:
    """A NUL-separated environment block (``/proc/<pid>/environ``) as a mapping."""
    out: dict[str, str] = {}
    for item in blob.split(b"\0"):
        if b"=" in item:
            name, _, value = item.partition(b"=")
            out[name.decode(errors="replace")] = value.decode(errors="replace")
    return out


_REF = re.compile(r"[^/\s]+/[^:\s]+:[1-9][0-9]*\Z")


def is_pinned_reference(ref: str) -> bool:
    """owner/name:generation with a positive generation."""
    return _REF.match(ref) is not None
