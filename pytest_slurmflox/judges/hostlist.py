"""Slurm's host list expressions (``worker[3,2,1,5,9-10],login``), expanded in the order Slurm wrote them.

Slurm keeps a job's or step's node list in the allocation's order, which is the order nodes have in the
controller's node table, not the order of their names: a 64-worker step on dynamic nodes showed
``SLURM_STEP_NODELIST=worker[3,2,1,5,11,9-10,13,4,...]``. A task's ``SLURM_NODEID`` is its node's position in that
list (``nodelist_find`` over the step layout's node list: src/common/slurm_protocol_api.c,
src/slurmd/slurmstepd/slurmstepd_job.c), so nothing here sorts, merges or removes duplicates.

The grammar is Slurm's (hostlist(3) in src/common/hostlist.c): names separated by commas or blanks outside
brackets; a bracket holds comma-separated numbers and ``lo-hi`` ranges; a range keeps the width of its lower bound
when that has leading zeros (``n[001-003]``); text may follow a bracket (``n[1-2]-ib``) and several brackets in
one name multiply out in order. A list never expands to more than Slurm's limit, ``MAX_SLURM_NODES`` (65536,
slurm/slurm.h): a hostile ``w[0-999999999]`` is refused, not expanded.
"""

from __future__ import annotations

import re

#: Slurm's bound on the nodes of a cluster (slurm/slurm.h ``MAX_SLURM_NODES``, 64 * 1024 hosts).
MAX_SLURM_NODES = 65536

_RANGE = re.compile(r"(\d+)(?:-(\d+))?\Z")


def expand(text: str) -> list[str]:
    """Every host name of the Slurm host list ``text``, in Slurm's order; raises ValueError naming what is
    malformed (an unbalanced bracket, a range that runs backwards, a list longer than ``MAX_SLURM_NODES``)."""
    hosts: list[str] = []
    for item in _split(text):
        for name in _names(item):
            hosts.append(name)
            if len(hosts) > MAX_SLURM_NODES:
                raise ValueError(f"host list {_short(text)} names more than {MAX_SLURM_NODES} hosts (Slurm's limit)")
    return hosts


def _split(text: str) -> list[str]:
    """The top-level items of a host list: commas and blanks inside brackets do not separate."""
    items: list[str] = []
    depth, start = 0, 0
    for i, char in enumerate(text):
        if char == "[":
            depth += 1
            if depth > 1:
                raise ValueError(f"host list {_short(text)} nests a bracket at {i}")
        elif char == "]":
            depth -= 1
            if depth < 0:
                raise ValueError(f"host list {_short(text)} closes a bracket it never opened at {i}")
        elif depth == 0 and char in ", \t\n":
            items.append(text[start:i])
            start = i + 1
    if depth:
        raise ValueError(f"host list {_short(text)} leaves a bracket open")
    items.append(text[start:])
    return [item for item in items if item]


def _names(item: str) -> list[str]:
    """One item (``pre[ranges]post[ranges]...``) multiplied out, leftmost bracket outermost."""
    open_at = item.find("[")
    if open_at < 0:
        return [item]
    close_at = item.index("]", open_at)
    prefix, body, rest = item[:open_at], item[open_at + 1 : close_at], item[close_at + 1 :]
    tails = _names(rest)
    return [f"{prefix}{number}{tail}" for number in _numbers(body, item) for tail in tails]


def _numbers(body: str, item: str) -> list[str]:
    numbers: list[str] = []
    for part in body.split(","):
        found = _RANGE.match(part.strip())
        if not found:
            raise ValueError(f"host list item {_short(item)}: {part!r} is not a number or a lo-hi range")
        lo_text, hi_text = found.group(1), found.group(2) or found.group(1)
        lo, hi = int(lo_text), int(hi_text)
        if hi < lo:
            raise ValueError(f"host list item {_short(item)}: range {part!r} runs backwards")
        if hi - lo >= MAX_SLURM_NODES:
            raise ValueError(f"host list item {_short(item)}: range {part!r} is longer than Slurm's limit")
        width = len(lo_text) if lo_text.startswith("0") else 0
        numbers.extend(str(n).zfill(width) for n in range(lo, hi + 1))
    return numbers


def _short(text: str) -> str:
    return repr(text if len(text) <= 80 else text[:77] + "...")
