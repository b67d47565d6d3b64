"""testinfra Hosts for a site's own checks: the login endpoint, and every worker through Slurm.

Contract.

- :class:`LoginBackend` runs a testinfra command on the login endpoint through the run's own runner (the same
  connection, ssh settings, bastion and agent the suites use); nothing opens a connection of its own.
- :class:`WorkerBackend` runs a command on one worker as a Slurm step (``srun -w <worker>``) submitted from the login
  endpoint with the run's site access (account, QOS, reservation: the ``submit`` helper's placement) and the run's
  job name, so no SSH to a worker is needed and nothing is left in the queue (the helper cleans up).
- :meth:`Workers.gather` asks many facts of every worker in a few multi-node steps: each fact function runs against
  every worker's Host; a command not yet answered is collected instead of run, then every collected command of every
  worker runs in ONE step (one task per worker), and the facts are asked again with those answers, until every fact
  is answered. A fact that needs k commands in sequence (testinfra asks the system type before a package) costs k
  steps, whatever the cohort's size. Outside :meth:`gather` a worker Host runs each command as a step of its own.
- A command's lines are read only from lines this run marked itself (a nonce): a site's TaskProlog or profile that
  prints changes no answer. Output travels escaped (backslash, newline, ``|``), so it comes back as it was.

Quoting goes through :func:`~pytest_slurmflox.base.run.quoted`, testinfra's own model (``host.run("ls %s", path)``).
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from testinfra.backend.base import BaseBackend, CommandResult
from testinfra.host import Host

from ..base.run import command_line, quoted

#: Seconds one gathering step (or one worker's own step) may take, the allocation included.
STEP_SECONDS = 300.0


class _Pending(Exception):
    """A command :meth:`Workers.gather` has not answered yet (collected, run with the others in the next step)."""


def _through_run_quoted(command: str, *args: str) -> str:
    """testinfra's ``host.run("ls %s", path)`` through the project's one quoting helper (same model)."""
    return quoted(command, *args) if args else command


class _QuotedBackend(BaseBackend):
    """The project's one quoting helper in testinfra's place; text is UTF-8 (our runners decode it so)."""

    quote = staticmethod(_through_run_quoted)

    def get_encoding(self) -> str:
        return "utf-8"


class LoginBackend(_QuotedBackend):
    NAME = "slurmflox-login"

    def __init__(self, runner: Any, name: str):
        super().__init__(name)
        self.runner = runner

    def run(self, command: str, *args: str, **kwargs: Any) -> CommandResult:
        line = self.get_command(command, *args)
        res = self.runner.run(line)
        return self.result(res.exit_status, self.encode(line), res.stdout, res.stderr)


class WorkerBackend(_QuotedBackend):
    NAME = "slurmflox-worker"

    def __init__(self, node: str, workers: Workers):
        super().__init__(node)
        self.workers = workers

    def run(self, command: str, *args: str, **kwargs: Any) -> CommandResult:
        line = self.get_command(command, *args)
        rc, out, err = self.workers.answer(self.hostname, line)
        return self.result(rc, self.encode(line), out, err)


@dataclass
class Workers(Mapping[str, Host]):
    """One testinfra :class:`Host` per worker (``workers["worker3"]``), whose commands run there through Slurm."""

    submit: Any  #: the run's job helper (cluster/submit.py ``Jobs``): srun with the site's access, cleaned up
    nodes: tuple[str, ...]
    steps: int = 0  #: Slurm steps run so far (what :meth:`gather` keeps flat in the cohort)
    _answers: dict[tuple[str, str], tuple[int, str, str]] = field(default_factory=dict)
    _wanted: dict[str, list[str]] = field(default_factory=dict)
    _gathering: bool = False
    _hosts: dict[str, Host] = field(default_factory=dict)

    def __getitem__(self, node: str) -> Host:
        if node not in self.nodes:
            raise KeyError(f"{node} is not a worker of the cohort ({', '.join(self.nodes)})")
        if node not in self._hosts:
            backend = WorkerBackend(node, self)
            self._hosts[node] = host = Host(backend)
            backend.set_host(host)
        return self._hosts[node]

    def __repr__(self) -> str:  # what a failing check's traceback shows of the fixture: its workers, not the runner
        return f"Workers({', '.join(self.nodes)}; {self.steps} steps)"

    def __iter__(self) -> Iterator[str]:
        return iter(self.nodes)

    def __len__(self) -> int:
        return len(self.nodes)

    def answer(self, node: str, line: str) -> tuple[int, str, str]:
        """``line``'s exit status, stdout and stderr on ``node``: known, collected (gathering), or run now."""
        if (node, line) not in self._answers:
            self._wanted.setdefault(node, [])
            if line not in self._wanted[node]:
                self._wanted[node].append(line)
            if self._gathering:
                raise _Pending(line)
            self._run_wanted()
        return self._answers[(node, line)]

    def gather(self, facts: Mapping[str, Callable[[Host], Any]]) -> dict[str, dict[str, Any]]:
        """fact name -> worker -> ``facts[name](host)`` for every worker, in as few steps as the facts' own
        command chains need (see the module docstring). An exception a fact raises is raised, naming the worker."""
        values: dict[str, dict[str, Any]] = {name: {} for name in facts}
        while True:
            self._gathering = True
            try:
                for name, fact in facts.items():
                    for node in self.nodes:
                        if node not in values[name]:
                            values[name][node] = self._ask(fact, node)
            finally:
                self._gathering = False
            open_ = {(name, node) for name in facts for node in self.nodes if values[name][node] is _PENDING}
            for name, node in open_:
                del values[name][node]
            if not open_:
                return values
            self._run_wanted()

    def _ask(self, fact: Callable[[Host], Any], node: str) -> Any:
        try:
            return fact(self[node])
        except _Pending:
            return _PENDING
        except Exception as exc:
            raise RuntimeError(f"{node}: {type(exc).__name__}: {exc}") from exc

    def _run_wanted(self) -> None:
        """Every collected command of every worker in one step (one task per worker that has any)."""
        wanted, self._wanted = {n: c for n, c in self._wanted.items() if c}, {}
        if not wanted:
            return
        nonce = "sfx" + secrets.token_hex(6)
        script = step_script(nonce, wanted)
        names = sorted(wanted)
        args = f"-N{len(names)} -n{len(names)} --ntasks-per-node=1 -w {','.join(names)}"
        res = self.submit.srun(args, command_line("bash -c", [script]), timeout=STEP_SECONDS)
        self.steps += 1
        got = parse_answers(nonce, res.stdout, wanted)
        missing = [f"{node}: {line}" for node, lines in wanted.items() for line in lines if (node, line) not in got]
        if missing:
            raise RuntimeError(
                f"the step did not answer on every worker ({'; '.join(missing[:5])}): exit {res.exit_status}, "
                f"{(res.stderr or res.stdout).strip()[-400:]}"
            )
        self._answers.update(got)


#: A fact not answered yet in this round of :meth:`Workers.gather`.
_PENDING = object()


def step_script(nonce: str, wanted: Mapping[str, list[str]]) -> str:
    """Bash for one step: on each worker, each of its commands evaluated in a subshell with stdin closed, then one
    marked line ``<nonce>|<worker>|<index>|<rc>|<stdout>|<stderr>`` with ``\\``, newline and ``|`` escaped as
    ``\\\\``, ``\\n`` and ``\\p``. Everything but the command itself is a bash builtin (no process per answer: on a
    host whose workers share cores, the processes per fact are what a gathering step costs)."""
    ask = (
        "e=$(mktemp) || exit 70\n"
        "esc() { local s=${1//\\\\/\\\\\\\\}; s=${s//$'\\n'/\\\\n}; s=${s//|/\\\\p}; printf -v \"$2\" '%s' \"$s\"; }\n"
        'ask() { local out err rc; out=$( ( eval "$2" ) 2>"$e" </dev/null; rc=$?; printf x; exit $rc ); rc=$?; '
        'out=${out%x}; IFS= read -r -d \'\' err <"$e"; esc "$out" out; esc "$err" err; '
        f'printf \'%s|%s|%s|%s|%s|%s\\n\' {nonce} "$SLURMD_NODENAME" "$1" "$rc" "$out" "$err"; }}'
    )
    arms = " ".join(
        quoted("%s) ", node) + "; ".join(quoted("ask %s %s", i, line) for i, line in enumerate(lines)) + " ;;"
        for node, lines in sorted(wanted.items())
    )
    return f'{ask}\ncase "$SLURMD_NODENAME" in {arms} esac; rm -f "$e"'


def _unescape(text: str) -> str:
    """The inverse of the step's ``esc``: ``\\\\`` -> ``\\``, ``\\n`` -> newline, ``\\p`` -> ``|``."""
    return re.sub(r"\\(.)", lambda m: {"n": "\n", "p": "|"}.get(m.group(1), m.group(1)), text)


def parse_answers(
    nonce: str, stdout: str, wanted: Mapping[str, list[str]]
) -> dict[tuple[str, str], tuple[int, str, str]]:
    """The marked answer lines of :func:`step_script` as (worker, command) -> (rc, stdout, stderr)."""
    got: dict[tuple[str, str], tuple[int, str, str]] = {}
    for line in stdout.splitlines():
        parts = line.split("|")
        if len(parts) != 6 or parts[0] != nonce or parts[1] not in wanted:
            continue
        _, node, index, rc, out, err = parts
        try:
            command = wanted[node][int(index)]
            got[(node, command)] = (int(rc), _unescape(out), _unescape(err))
        except (ValueError, IndexError):
            continue
    return got
