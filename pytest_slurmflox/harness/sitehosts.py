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
  is answered. A fact that needs k commands in sequence costs k steps, whatever the cohort's size. Outside
  :meth:`gather` a worker Host runs each command as a step of its own.
- testinfra's modules (file, package, service...) first ask the system type, a chain of three commands, and
  ``host.exists`` whether ``command -v`` works (:data:`SYSTEM_COMMANDS`). A worker's system is asked once per run:
  seeded from the cohort pre-flight step when the suites ran it (``systems``, shared through the session), else
  asked with the first step a worker runs. So a module fact costs one step, not four.
- A command's lines are read only from lines this run marked itself (a nonce): a site's TaskProlog or profile that
  prints changes no answer. Output travels escaped (backslash, newline, ``|``), so it comes back as it was.

Quoting goes through :func:`~pytest_slurmflox.base.run.quoted`, testinfra's own model (``host.run("ls %s", path)``).
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from testinfra.backend.base import BaseBackend, CommandResult
from testinfra.host import Host

from ..base.run import command_line, quoted

#: Seconds one gathering step (or one worker's own step) may take, the allocation included.
STEP_SECONDS = 300.0

#: What testinfra asks of a host before a module's own command: its system type, a chain on a Linux host with
#: os-release (testinfra/modules/systeminfo.py ``sysinfo``: ``uname -s``, then ``/etc/os-release``, then ``uname
#: -m``), and whether ``command -v`` works (testinfra/host.py ``has_command_v``, before ``host.exists``).
SYSTEM_COMMANDS = ("uname -s", "cat /etc/os-release", "uname -m", "command -v command")

#: A command's exit status, stdout and stderr.
Answer = tuple[int, str, str]


class _Pending(BaseException):
    """A command :meth:`Workers.gather` has not answered yet (collected, run with the others in the next step).
    A BaseException, so a site's fact that catches ``Exception`` (a file that may be missing) never swallows it; one
    that catches everything (a bare ``except:``) and answers anyway is asked again once its commands ran
    (:meth:`Workers._ask` counts the pending answers a fact met), so no fact is answered without running."""


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
    #: each worker's answers to :data:`SYSTEM_COMMANDS` (node -> command -> [rc, stdout, stderr]), the run's: read
    #: before the first step, filled by it (the session's store, so a later check asks none of them again)
    systems: dict[str, dict[str, list]] = field(default_factory=dict)
    #: how one step over some workers runs, ``launch(nodes, command) -> Result`` (default: ``submit.srun`` with one
    #: task on each node; the suites pass theirs, which waits for a worker other jobs hold)
    launch: Callable[[Sequence[str], str], Any] | None = None
    steps: int = 0  #: Slurm steps run so far (what :meth:`gather` keeps flat in the cohort)
    results: list[Any] = field(default_factory=list)  #: each step's result, in order (a check's evidence)
    _answers: dict[tuple[str, str], Answer] = field(default_factory=dict)
    _wanted: dict[str, list[str]] = field(default_factory=dict)
    _gathering: bool = False
    _pending_raised: int = 0  #: pending answers raised so far (a fact that met one has no answer yet)
    _hosts: dict[str, Host] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for node in self.nodes:
            for line, (rc, out, err) in self.systems.get(node, {}).items():
                self._answers[(node, line)] = (int(rc), out, err)

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

    def answer(self, node: str, line: str) -> Answer:
        """``line``'s exit status, stdout and stderr on ``node``: known, collected (gathering), or run now."""
        if (node, line) not in self._answers:
            self._wanted.setdefault(node, [])
            if line not in self._wanted[node]:
                self._wanted[node].append(line)
            if self._gathering:
                self._pending_raised += 1
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
        """The fact's answer on ``node``, or :data:`_PENDING` when it met a command not answered yet, even one whose
        pending signal it swallowed (its answer then rests on nothing that ran: asked again after the step)."""
        before = self._pending_raised
        try:
            value = fact(self[node])
        except _Pending:
            return _PENDING
        except Exception as exc:
            raise RuntimeError(f"{node}: {type(exc).__name__}: {exc}") from exc
        return _PENDING if self._pending_raised != before else value

    def _run_wanted(self) -> None:
        """Every collected command of every worker in one step (one task per worker that has any), each worker's
        system asked with it when the run does not know it yet."""
        wanted, self._wanted = {n: c for n, c in self._wanted.items() if c}, {}
        if not wanted:
            return
        for node, lines in wanted.items():
            lines += [c for c in SYSTEM_COMMANDS if (node, c) not in self._answers and c not in lines]
        nonce = "sfx" + secrets.token_hex(6)
        res = self._launch(sorted(wanted), command_line("bash -c", [step_script(nonce, wanted)]))
        self.steps += 1
        self.results.append(res)
        got = parse_answers(nonce, res.stdout, wanted)
        silent = [node for node in self.nodes if any((node, line) not in got for line in wanted.get(node, ()))]
        if silent:  # every worker that did not answer is named, and what srun said of the step
            raise RuntimeError(
                f"the step did not answer on every worker: not on {', '.join(silent)} (for example "
                f"{silent[0]}: {next(line for line in wanted[silent[0]] if (silent[0], line) not in got)}): "
                f"exit {res.exit_status}, {(res.stderr or res.stdout).strip()[-400:]}"
            )
        self._answers.update(got)
        for node in wanted:
            if all((node, c) in self._answers for c in SYSTEM_COMMANDS):
                self.systems[node] = {c: list(self._answers[(node, c)]) for c in SYSTEM_COMMANDS}

    def _launch(self, names: Sequence[str], command: str) -> Any:
        if self.launch is not None:
            return self.launch(names, command)
        args = f"-N{len(names)} -n{len(names)} --ntasks-per-node=1 -w {','.join(names)}"
        return self.submit.srun(args, command, timeout=STEP_SECONDS)


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


def parse_answers(nonce: str, stdout: str, wanted: Mapping[str, list[str]]) -> dict[tuple[str, str], Answer]:
    """The marked answer lines of :func:`step_script` as (worker, command) -> (rc, stdout, stderr)."""
    got: dict[tuple[str, str], Answer] = {}
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


def system_probe(nonce: str, nodes: Sequence[str]) -> str:
    """Bash answering :data:`SYSTEM_COMMANDS` on each of ``nodes`` (lines of :func:`step_script`): for a step that
    runs anyway (the cohort pre-flight) to seed :attr:`Workers.systems`."""
    return step_script(nonce, {node: list(SYSTEM_COMMANDS) for node in nodes})


def parse_systems(nonce: str, stdout: str, nodes: Sequence[str]) -> dict[str, dict[str, list]]:
    """:func:`system_probe`'s answers as :attr:`Workers.systems` (a worker that did not answer all of them is left
    out: its Host asks them itself)."""
    got = parse_answers(nonce, stdout, {node: list(SYSTEM_COMMANDS) for node in nodes})
    return {
        node: {c: list(got[(node, c)]) for c in SYSTEM_COMMANDS}
        for node in nodes
        if all((node, c) in got for c in SYSTEM_COMMANDS)
    }
