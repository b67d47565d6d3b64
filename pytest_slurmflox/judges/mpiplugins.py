"""The MPI plugins ``srun --mpi=list`` says a cluster offers.

Slurm prints a header, one ``\\t<name>`` line per plugin file ``mpi_<name>.so``, and the versioned PMIx plugins
(``mpi_pmix_v5.so``) on one line of their own (src/common/plugrack.c ``plugrack_print_mpi_plugins``, 22.05 on:
``MPI plugin types are...``, ``\\tpmi2``, ``\\tpmix``, ``specific pmix plugin versions available: pmix_v4,pmix_v5``).
Up to 21.08 the same function logged through ``info()`` to stderr: ``srun: MPI types are...``, then ``srun: <name>``
for every plugin file, the versioned ones included. Only those shapes are read: a site's wrapper or profile printing
around them adds no plugin.
"""

from __future__ import annotations

import re

_HEADER = re.compile(r"(?:srun: )?MPI (?:plugin )?types are\.\.\.")
_NAME = re.compile(r"(?:[ \t]+|srun: )([a-z][a-z0-9_]*)[ \t]*")
_VERSIONS = re.compile(r"[ \t]*specific pmix plugin versions available:[ \t]*([a-z0-9_,]+)[ \t]*")


def offered_plugins(text: str) -> list[str]:
    """The plugin names in ``srun --mpi=list``'s output: the indented name lines right after the header and the
    versioned PMIx line right after them; nothing before the header or after the list counts."""
    lines = text.splitlines()
    starts = [i for i, line in enumerate(lines) if _HEADER.fullmatch(line.strip())]
    if not starts:
        return []
    names: list[str] = []
    for line in lines[starts[0] + 1 :]:
        name, versions = _NAME.fullmatch(line), _VERSIONS.fullmatch(line)
        if name:
            names.append(name.group(1))
        elif versions:
            names += [v for v in versions.group(1).split(",") if v]
            break
        else:
            break
    return list(dict.fromkeys(names))
