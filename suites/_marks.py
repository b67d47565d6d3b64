"""The per-check nonce mark, and one script run once on each worker with every line marked by node.

Why a module of its own: a site's TaskProlog, a login banner or a shell profile writes to the same stdout as our
command; every suite that reads a command's output reads only the lines that carry its own nonce, so the
marking and the reading are spelled once, here.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Iterable
from dataclasses import dataclass, fields

from pytest_slurmflox.base.run import Result, quoted
from pytest_slurmflox.harness.busywait import waiting_for_held


@dataclass(frozen=True)
class Mark:
    """A per-check nonce that prefixes every line a check's own command prints.

    A site's TaskProlog (``print ...``), a login banner, the MOTD or a shell profile that echoes write to the same
    stdout as our command; reading only the lines that carry this check's nonce means such lines never change a
    verdict, whatever they say."""

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
        """The marked lines of ``text``, the mark removed (and srun's ``--label`` rank before it, ``N: ``); every
        other line is the site's, not ours."""
        own = re.compile(rf"(?: *\d+: )?{re.escape(self.nonce)}\|")
        return [line[m.end() :] for line in text.splitlines() if (m := own.match(line))]

    def text(self, text: str) -> str:
        return "\n".join(self.lines(text))


@dataclass(frozen=True)
class Marked(Result):
    """A :class:`Result` whose own lines carry ``nonce`` (see :class:`Mark`); the raw stdout stays the evidence."""

    nonce: str = ""

    @property
    def own(self) -> list[str]:
        return Mark(self.nonce).lines(self.stdout)


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
    ``<nonce>|<node>|text`` (read them with :func:`per_node` or ``.own``). A node other jobs hold is waited for
    within ``jobs.busy_timeout`` (harness/busywait.py: NOT RUN past it, naming the node and its jobs)."""
    mark = Mark.new()
    body = (
        f"set -o pipefail; {{ {script}\n}} 2>&1 | "
        'while IFS= read -r l || [ -n "$l" ]; do '
        f'printf \'%s|%s|%s\\n\' {mark.nonce} "$SLURMD_NODENAME" "$l"; done'
    )
    return every_worker_step(jobs, nodes, args, "bash -c " + quoted("%s", body), mark, timeout=timeout)


def every_worker_step(
    jobs, nodes: Iterable[str], args: str, command: str, mark: Mark, *, timeout: float = 180.0
) -> Marked:
    """``command`` (shell text whose own lines carry ``mark``) as one step with one task on each node (``-N<n>
    --ntasks-per-node=1 -w <every node>`` and ``args``). A node other jobs hold is waited for within
    ``jobs.busy_timeout`` (harness/busywait.py: NOT RUN past it, naming the node and its jobs); a step that got its
    nodes is returned as it ran, for its check to judge."""
    names = sorted(nodes)

    def attempt(options: str, limit: float) -> Marked:
        line = f"-N{len(names)} -n{len(names)} --ntasks-per-node=1 -w {','.join(names)} {options}"
        return marked(jobs.srun(line, command, timeout=limit), mark)

    return waiting_for_held(jobs, names, attempt, args, timeout)


def slurm_version_tuple(version: str) -> tuple[int, ...]:
    """``24.11.5`` -> (24, 11, 5): Slurm's version compared as numbers (a suffix such as ``-rc1`` is dropped)."""
    parts = []
    for piece in version.split(".")[:3]:
        digits = "".join(c for c in piece if c.isdigit())
        parts.append(int(digits or 0))
    return tuple(parts)
