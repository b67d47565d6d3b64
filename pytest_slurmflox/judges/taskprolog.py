"""Which TaskProlog a worker runs: the name its slurm.conf gives, resolved the way slurmd resolves it.

From Slurm 25.11 the TaskProlog need not be an absolute path: slurmd unfurls a relative one into the directory of
the slurm.conf it read (src/slurmd/slurmd/slurmd.c ``_read_config`` -> ``get_extra_conf_path``, upstream eec8aee671
"Unfurl taskpro/epilog paths into conf-cache paths"), and a configless slurmctld ships that file into slurmd's
conf-cache beside slurm.conf (fc77dbcb1f "Ship taskpro/epilog if configless + relative paths"). A task's
``SLURM_CONF`` names the slurm.conf its slurmd read (the conf-cache copy when configless), so a probe run in a task
resolves the very path slurmd runs. The name as written is kept too: a declared ``runtime.task_prolog`` is compared
with what the configuration says, the resolved path is what gets run and inspected (T3's fail-closed check, T10's
trusted paths).
"""

from __future__ import annotations

from ..base.run import quoted

#: Shell text: ``conf`` (the task's slurm.conf), ``named`` (its last TaskProlog line's value, as written) and
#: ``in_conf_dir NAME`` (NAME itself when empty or absolute, else beside ``$conf``: slurmd's own resolution).
IN_FORCE_SH = r"""conf=${SLURM_CONF:-/etc/slurm/slurm.conf}
named=$(grep -i '^[[:space:]]*taskprolog[[:space:]]*=' "$conf" 2>/dev/null | tail -n1 |
  sed 's/^[^=]*=[[:space:]]*//; s/[[:space:]#].*//')
in_conf_dir() { case $1 in ''|/*) printf '%s' "$1";; *) printf '%s/%s' "${conf%/*}" "$1";; esac; }"""


def resolved_sh(declared: str = "") -> str:
    """Shell text for the TaskProlog path a probe runs: ``declared`` resolved as slurmd would, else the named one."""
    return f"$(in_conf_dir {quoted('%s', declared)})" if declared else '$(in_conf_dir "$named")'
