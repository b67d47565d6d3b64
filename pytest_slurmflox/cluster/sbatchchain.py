"""Several batch scripts submitted in one command on the login node, in order, a later one naming an earlier id.

Why: a run's early jobs (early.py: T7's time limit, array and afterok chain) were one ``sbatch`` round trip each,
twelve commands with the output directory, while every xdist process waited on the run's lock before its first
check. One command does it in one round trip. A login node's profile may print: only the lines this command
marked itself (a per-call mark) are read. sbatch's own behaviour is unchanged: each script goes on its stdin (a
quoted here-document), with the options given, ``--parsable``.

An option may name ``{prior:<i>}``: the id of entry ``i`` of the same chain (``--dependency=afterok:{prior:0}``).
An entry whose prior was refused is not sent (it would be refused for a reason that is not its own).
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Sequence
from dataclasses import dataclass

from ..base.run import quoted

__all__ = ["ChainEntry", "chain_command", "chain_ids"]

_PRIOR = re.compile(r"\{prior:(\d+)\}")


@dataclass(frozen=True)
class ChainEntry:
    """One batch script and its sbatch options (values, not shell text: each is quoted here)."""

    script: str
    options: tuple[str, ...] = ()

    def priors(self) -> list[int]:
        return sorted({int(n) for option in self.options for n in _PRIOR.findall(option)})


def _word(value: str) -> str:
    """``value`` as one shell word, each ``{prior:i}`` replaced by the shell's ``$j<i>``: a value holding one comes
    out of :func:`~pytest_slurmflox.base.run.quoted` single-quoted (``{`` is no safe shell character), so the
    replacement closes the quotes around ``"$j<i>"``."""
    return _PRIOR.sub(lambda m: f"'\"$j{int(m.group(1))}\"'", quoted("%s", value))


def chain_command(entries: Sequence[ChainEntry], mark: str | None = None) -> tuple[str, str]:
    """The one command (bash) and the mark its answer lines carry: ``<mark> <index> <job id or nothing>``."""
    mark = mark or f"sfx-chain-{secrets.token_hex(4)}"
    lines: list[str] = []
    for i, entry in enumerate(entries):
        priors = entry.priors()
        if any(p >= i for p in priors):
            raise ValueError(f"entry {i} names a prior that is not before it: {priors}")
        delimiter = f"SFX_EOF_{mark.replace('-', '_')}_{i}"
        if delimiter in entry.script:
            raise ValueError(f"entry {i}'s script holds its here-document delimiter")
        words = " ".join(_word(option) for option in entry.options)
        body = entry.script if entry.script.endswith("\n") else entry.script + "\n"
        submit = (
            f"j{i}=$(sbatch --parsable {words} <<'{delimiter}'\n{body}{delimiter}\n) && j{i}=${{j{i}%%;*}} || j{i}="
        )
        guard = " && ".join(f'[ -n "$j{p}" ]' for p in priors)
        lines.append(f"if {guard}; then {submit}; else j{i}=; fi" if guard else submit)
        lines.append(f'echo "{mark} {i} $j{i}"')
    return "\n".join(lines) + "\n", mark


def chain_ids(stdout: str, mark: str, count: int) -> list[str | None]:
    """Each entry's job id from the command's marked lines; None where sbatch refused, was not sent or the line is
    missing (a command cut short). Lines without the mark (a login profile's) are not read."""
    ids: list[str | None] = [None] * count
    for line in stdout.splitlines():
        words = line.split()
        if len(words) == 3 and words[0] == mark and words[1].isdigit() and int(words[1]) < count:
            ids[int(words[1])] = words[2] if words[2].isdigit() else None
    return ids
