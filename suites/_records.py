"""What the runtime provider recorded a worker was given, and the task environments that show it.

Why apart from the checks: T2, T3, TP, TR and T10 judge a worker against the provider's own record of what it
realized (never against the worker's task profile, which is what is being checked), and read a task's environment
block the same way; the record lookup (local pool, or the Flox shim's slurmd on Kubernetes) and the environment
probes are spelled once, here.
"""

from __future__ import annotations

import base64
from collections.abc import Iterable

import pytest

from pytest_slurmflox.base.run import quoted

from ._capability import requirement


def worker_runtime(target, name: str, mode: str):
    """The runtime provider's record of what worker ``name`` was given, resolved where the worker sees it
    (:class:`pytest_slurmflox.judges.expectations.Runtime`), or a string saying why there is none."""
    from pytest_slurmflox.judges.expectations import Runtime

    why = target.why_missing("runtime-record")
    if why is not None:
        return why
    got = target.records.realization(name)  # the local pool's record, or the target file's declared runtime
    if not got:
        return f"the owner has no realization of {name}"
    if not got.get("record"):
        return f"the runtime provider has no record of {got.get('realized_path')} ({name})"
    return Runtime.from_record(got["record"], str(got["realized_path"]), mode)


def runtimes(target, nodes: Iterable[str], mode: str, jobs=None) -> dict:
    """The realized runtime of each node, from the runtime provider, never from the worker's task profile:

    - local substrate: the local runtime provider's record (through the pool);
    - a declared runtime (the target file's ``runtime`` section, pytest_slurmflox/model/declaredruntime.py): the
    customer's
      record of the pinned generation, the same for every worker;
    - Kubernetes: what the Flox shim gave slurmd's own process (its FLOX_ENV, the PATH entries rooted there, the
      executables in them, its environment), read by pod exec into the slurmd container, which the profile
      initializer does not write; no content digest (T2 says so).

    SKIP when the target has neither; FAIL naming a node whose record is missing. With ``jobs``, a target that
    declares an environment whose tasks show no Flox runtime at all FAILs first (:func:`require_flox_runtime`)."""
    nodes = list(nodes)
    if target.why_missing("runtime-record") is not None:
        if target.why_missing("kubernetes") is None:
            return {node: _shim_runtime(target, node, mode) for node in nodes}
        if jobs is not None:
            require_flox_runtime(target, jobs, nodes)
        pytest.skip(
            "missing capability runtime-record: neither a runtime-provider record (local substrate), a declared "
            "runtime (the target file's runtime section) nor a Flox shim (Kubernetes) shows what the workers realized"
        )
    out = {}
    for node in nodes:
        rt = worker_runtime(target, node, mode)
        requirement(not isinstance(rt, str), f"{node}: the runtime provider recorded what it realized", str(rt))
        out[node] = rt
    return out


def require_flox_runtime(target, jobs, nodes: Iterable[str]) -> None:
    """FAIL "declared environment not realized", naming each worker, when the target declares a Flox environment
    (``expect.settings.WORKER_FLOX_ENV``) and a task there shows no Flox runtime at all (a FAIL, never a SKIP
    for the missing record). One step on every
    worker; ``--export=NONE``: only what the worker side gives the task counts, never the login's variables."""
    from pytest_slurmflox.judges.expectations import unrealized_environment
    from pytest_slurmflox.model.declared import ENV, missing

    if missing(target.spec.declared, ENV[:1]):
        return  # no environment declared: nothing to be realized
    names = sorted(nodes)
    res = jobs.srun(
        f"-N{len(names)} -n{len(names)} --ntasks-per-node=1 -w {','.join(names)} --export=NONE",
        "/bin/bash -c " + quoted("%s", ENVIRON_PROBE),
    )
    found = environs(res.stdout)
    problems = [f"{node}: no task environment came back" for node in names if node not in found]
    problems += [f"{node}: {why}" for node in names if node in found and (why := unrealized_environment(found[node]))]
    requirement(
        not problems,
        f"declared environment {target.expect.environment} realized on every worker: " + "; ".join(problems),
        res,
    )


_SHIM_PROBE = (
    'for p in /proc/[0-9]*; do if [ "$(cat $p/comm 2>/dev/null)" = slurmd ]; then '
    "base64 -w0 < $p/environ; echo; exit 0; fi; done; exit 1"
)


def _shim_runtime(target, node: str, mode: str):
    """What the Flox shim prepared for slurmd in ``node``'s pod (Kubernetes)."""
    from pytest_slurmflox.judges.expectations import Runtime, parse_environ

    pods = [p for p in target.kube.pods() if any(c.get("name") == "slurmd" for c in p["spec"]["containers"])]
    pod = next((p for p in pods if node in (p["spec"].get("hostname"), p["metadata"]["name"])), None)
    requirement(pod is not None, f"{node}: a slurmd pod runs it", ", ".join(p["metadata"]["name"] for p in pods))
    name = pod["metadata"]["name"]
    res = target.kube.exec(name, "slurmd", _SHIM_PROBE)
    env = parse_environ(base64.b64decode(res.stdout.strip() or b"")) if res.ok else {}
    root = env.get("FLOX_ENV", "").rstrip("/")
    requirement(bool(root), f"{node}: slurmd in {name} runs with a Flox-activated environment (FLOX_ENV)", res)
    entries = []
    for entry in env.get("PATH", "").split(":"):
        if (entry == root or entry.startswith(root + "/")) and entry not in entries:
            entries.append(entry)
    listing = target.kube.exec(
        name,
        "slurmd",
        "for d in " + " ".join(quoted("%s", e) for e in entries) + '; do for f in "$d"/*; do '
        '[ -f "$f" ] && [ -x "$f" ] && printf \'%s|%s\\n\' "$d" "${f##*/}"; done; done; true',
    )
    bins: dict[str, list[str]] = {}
    for line in listing.stdout.splitlines():
        entry, _, exe = line.partition("|")
        bins.setdefault(entry, []).append(exe)
    annotations = pod["metadata"].get("annotations") or {}
    return Runtime(
        ref=str(annotations.get("flox.dev/environment", "")),
        realized_path=root,
        content_digest="",
        path=tuple(entries),
        bin_entries={k: tuple(sorted(v)) for k, v in bins.items()},
        exports={k: v for k, v in env.items() if k != "PATH"},
        activation="ok",
    )


#: Prints the task's own environment block (exactly what slurmd gave it, before any shell adds to it) as
#: ``<node>|<n>|<base64 chunk>`` lines and a final ``<node>|END|``. Short lines, each one printf, so the output of
#: several tasks of one step cannot interleave inside a line (srun flushes long lines in pieces). Builtins and
#: absolute paths only: under --export=NONE the task has no PATH.
ENVIRON_PROBE = (
    "/usr/bin/base64 -w 600 /proc/$$/environ | { n=0; while IFS= read -r l; do "
    'printf "%s|%s|%s\\n" "$SLURMD_NODENAME" "$n" "$l"; n=$((n+1)); done; }; printf "%s|END|\\n" "$SLURMD_NODENAME"'
)
#: The same for the submitting shell on the login endpoint (its exported variables), labelled ``SUBMIT``.
SUBMIT_PROBE = (
    "/usr/bin/env -0 | /usr/bin/base64 -w 600 | { n=0; while IFS= read -r l; do "
    "printf 'SUBMIT|%s|%s\\n' \"$n\" \"$l\"; n=$((n+1)); done; }; printf 'SUBMIT|END|\\n'; "
)


def environs(text: str) -> dict[str, dict[str, str]]:
    """Parse :data:`ENVIRON_PROBE` / :data:`SUBMIT_PROBE` output into node -> environment; a node whose END marker
    is missing (its output was cut) is left out, so the check names it as not having answered."""
    from pytest_slurmflox.judges.expectations import parse_environ

    chunks: dict[str, dict[int, str]] = {}
    complete: set[str] = set()
    for line in text.splitlines():
        parts = line.split("|")
        if len(parts) != 3:
            continue
        node, seq, chunk = parts
        if seq == "END":
            complete.add(node)
        elif seq.isdigit():
            chunks.setdefault(node, {})[int(seq)] = chunk
    out: dict[str, dict[str, str]] = {}
    for node in complete:
        got = chunks.get(node, {})
        if sorted(got) != list(range(len(got))):
            continue
        try:
            out[node] = parse_environ(base64.b64decode("".join(got[i] for i in range(len(got)))))
        except ValueError:
            continue
    return out
