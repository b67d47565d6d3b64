"""What several suites share: capability requirements, reading the task profile on workers, requirement asserts.

Everything here goes through the ``target`` (its login endpoint, Slurm, optional Kubernetes and pool) so the suites
run unchanged against any cluster.
"""

from __future__ import annotations

import base64
import secrets
from collections.abc import Iterable
from dataclasses import dataclass, fields

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


#: Capabilities the target file declares by naming them; declared but not answering is a FAIL, not a SKIP.
_DECLARED_BY = {
    "kubernetes": lambda spec: spec.kubernetes is not None,
    "flox-shim": lambda spec: spec.kubernetes is not None,
    "admin": lambda spec: spec.admin is not None,
    "slurm": lambda spec: True,  # every target names a login endpoint with Slurm behind it
    "directory": lambda spec: spec.directory is not None,
    "accounting": lambda spec: spec.accounting is not None,
    "rest": lambda spec: spec.rest is not None,
}


def require(target, capability: str) -> None:
    """SKIP, naming the missing capability, when the target does not have it at all; FAIL, with the error, when
    the target file declares it (a kubeconfig, an admin login, a login endpoint) but it does not answer."""
    why = target.why_missing(capability)
    if not why:
        return
    declared = _DECLARED_BY.get(capability)
    if declared is not None and declared(target.spec):
        pytest.fail(
            f"requirement not met: declared capability {capability} answers\n"
            f"target {target.spec.name!r} declares {capability}, but: {why}",
            pytrace=False,
        )
    pytest.skip(f"missing capability {capability}: {why}")


def declared_nodeset(target) -> dict:
    """The NodeSet the target file names; FAIL (not SKIP) when it is declared but the API does not have it."""
    require(target, "kubernetes")
    name = target.spec.kubernetes.nodeset
    nodeset = target.kube.nodeset(name)
    requirement(
        nodeset is not None,
        f"declared NodeSet {name} exists in namespace {target.spec.kubernetes.namespace}",
        f"the Kubernetes API has no NodeSet {name}",
    )
    return nodeset


def worker_runtime(target, name: str, mode: str):
    """The runtime provider's record of what worker ``name`` was given, resolved where the worker sees it
    (:class:`pytest_slurmflox.expectations.Runtime`), or a string saying why there is none."""
    from pytest_slurmflox.expectations import Runtime

    why = target.why_missing("runtime-record")
    if why is not None:
        return why
    got = target.pool.realization(name)
    if not got:
        return f"the owner has no realization of {name}"
    if not got.get("record"):
        return f"the runtime provider has no record of {got.get('realized_path')} ({name})"
    return Runtime.from_record(got["record"], str(got["realized_path"]), mode)


def runtimes(target, nodes: Iterable[str], mode: str, jobs=None) -> dict:
    """The realized runtime of each node, from the runtime provider, never from the worker's task profile:

    - local substrate: the local runtime provider's record (through the pool);
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
            "missing capability runtime-record: neither a runtime-provider record (local substrate) nor a Flox shim "
            "(Kubernetes) shows what the workers realized"
        )
    out = {}
    for node in nodes:
        rt = worker_runtime(target, node, mode)
        requirement(not isinstance(rt, str), f"{node}: the runtime provider recorded what it realized", str(rt))
        out[node] = rt
    return out


def require_flox_runtime(target, jobs, nodes: Iterable[str]) -> None:
    """FAIL "declared environment not realized", naming each worker, when the target declares a Flox environment
    (``expect.settings.WORKER_FLOX_ENV``) and a task there shows no Flox runtime at all (issue 26: seen on an
    independent Slurm 22.05 cluster, where T2 and TP used to SKIP for the missing record). One step on every
    worker; ``--export=NONE``: only what the worker side gives the task counts, never the login's variables."""
    from pytest_slurmflox.declared import ENV, missing
    from pytest_slurmflox.expectations import unrealized_environment

    if missing(target.spec.declared, ENV[:1]):
        return  # no environment declared: nothing to be realized
    names = sorted(nodes)
    res = jobs.srun(
        f"-N{len(names)} -n{len(names)} --ntasks-per-node=1 -w {','.join(names)} --export=NONE",
        "/bin/bash -c " + _q(ENVIRON_PROBE),
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
    from pytest_slurmflox.expectations import Runtime, parse_environ

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
        "for d in " + " ".join(_q(e) for e in entries) + '; do for f in "$d"/*; do '
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


def require_enforced(target, limit: str) -> None:
    """SKIP, naming the limitation, if the target file declares that it cannot enforce ``limit``.

    A target file may carry ``limitations: {<limit>: <why>}`` (the local substrate writes one for each cgroup
    controller this host does not let it use): the check then reports that limitation instead of passing.
    """
    declared = target.spec.limitations.get(limit)
    if declared:
        pytest.skip(f"missing capability {limit}: {declared}")


def declared(target, *keys: str) -> None:
    """NOT RUN, naming the keys, when a customer target (substrate existing) does not declare an expectation the
    check needs: the reference's defaults describe clusters we provision, never a customer's (issue 17). ``keys``
    are target-file paths of pytest_slurmflox.declared (``expect.settings.WORKER_CPUS``, ``identity.uid``); the
    group's row of ``declared.GROUP_KEYS`` lists them (tests/unit/test_declared.py keeps the two equal)."""
    from pytest_slurmflox.declared import missing
    from pytest_slurmflox.signoff import NOT_RUN_PREFIX

    absent = missing(target.spec.declared, keys)
    if absent:
        pytest.skip(
            f"{NOT_RUN_PREFIX}the target file does not declare {', '.join(absent)} (target {target.spec.name!r})"
        )


def requirement(ok: bool, requirement: str, *evidence: Result | str) -> None:
    """Assert a requirement; the failure names it and shows the evidence that decided it."""
    if ok:
        return
    shown = "\n".join(e.describe() if isinstance(e, Result) else str(e) for e in evidence)
    pytest.fail(f"requirement not met: {requirement}\n{shown}", pytrace=False)


@dataclass(frozen=True)
class Mark:
    """A per-check nonce that prefixes every line a check's own command prints.

    A site's TaskProlog (``print ...``), a login banner, the MOTD or a shell profile that echoes write to the same
    stdout as our command; reading only the lines that carry this check's nonce means such lines never change a
    verdict, whatever they say (issue 17)."""

    nonce: str

    @classmethod
    def new(cls) -> Mark:
        return cls("sfx" + secrets.token_hex(6))

    def wrap(self, command: str) -> str:
        """Shell text running ``command`` (stdout and stderr) with each of its lines prefixed ``<nonce>|``; the
        exit status is the command's (pipefail)."""
        return (
            # a newline, not ';', before the closing brace: ``command`` may be a multi-line script
            f"set -o pipefail; {{ {command}\n}} 2>&1 | "
            f'while IFS= read -r l || [ -n "$l" ]; do printf \'%s|%s\\n\' {self.nonce} "$l"; done'
        )

    def echo(self, text: str) -> str:
        """Shell text printing ``text`` (shell-expanded, inside double quotes) as one marked line."""
        return f"printf '%s|%s\\n' {self.nonce} \"{text}\""

    def lines(self, text: str) -> list[str]:
        """The marked lines of ``text``, the mark removed; every other line is the site's, not ours."""
        prefix = self.nonce + "|"
        return [line[len(prefix) :] for line in text.splitlines() if line.startswith(prefix)]

    def text(self, text: str) -> str:
        return "\n".join(self.lines(text))


@dataclass(frozen=True)
class Marked(Result):
    """A :class:`Result` whose own lines carry ``nonce`` (see :class:`Mark`); the raw stdout stays the evidence."""

    nonce: str = ""

    @property
    def own(self) -> list[str]:
        return Mark(self.nonce).lines(self.stdout)

    @property
    def own_text(self) -> str:
        return "\n".join(self.own)


def marked(result: Result, mark: Mark) -> Marked:
    return Marked(**{f.name: getattr(result, f.name) for f in fields(Result)}, nonce=mark.nonce)


def per_node(result: Marked) -> dict[str, list[str]]:
    """Split the marked ``NODE|text`` lines of :func:`on_each`'s output into node -> lines (unmarked lines, a
    site's noise, are ignored)."""
    out: dict[str, list[str]] = {}
    for line in result.own:
        node, sep, text = line.partition("|")
        if sep:
            out.setdefault(node, []).append(text)
    return out


def on_each(jobs, nodes: Iterable[str], script: str, *, args: str = "", timeout: float = 180.0) -> Marked:
    """Run ``script`` once on each node in one step; each of its output lines is printed as
    ``<nonce>|<node>|text`` (read them with :func:`per_node` or ``.own``)."""
    names = sorted(nodes)
    mark = Mark.new()
    body = (
        f"set -o pipefail; {{ {script}\n}} 2>&1 | "
        'while IFS= read -r l || [ -n "$l" ]; do '
        f'printf \'%s|%s|%s\\n\' {mark.nonce} "$SLURMD_NODENAME" "$l"; done'
    )
    res = jobs.srun(
        f"-N{len(names)} -n{len(names)} --ntasks-per-node=1 -w {','.join(names)} {args}",
        "bash -c " + _q(body),
        timeout=timeout,
    )
    return marked(res, mark)


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
    from pytest_slurmflox.expectations import parse_environ

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
