"""What Slurm still says of a job slurmctld has forgotten: its accounting record.

Why: slurmctld keeps a finished job only ``MinJobAge`` seconds (slurm.conf(5): default 300; a site may set 30), then
purges it (``src/slurmctld/job_mgr.c`` ``purge_old_job``): ``squeue`` and ``scontrol show job`` no longer know it.
A check that looks after that (an early job collected by a check ordered last, a job whose check waited on
another) must not read "unknown" as "not done": it asks accounting, which keeps the record (``sacct``, one call for
all the jobs, allocations only). Where accounting does not answer (``accounting_storage/none``: sacct refuses) the
answer is empty and the job is unknown; a check then watches a job of its own from submission instead
(harness/early.py ``claim``). Slurm's one-line forms only: ``sacct -n -X -P`` with ``|`` between fields; a state
with a detail (``CANCELLED by 1000``) is its first word, as squeue prints it.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ..base.run import Runner

#: sacct's fields for a job's state, as squeue's JOB_FORMAT gives them (id, state, reason, nodes).
STATE_FIELDS = "JobID,State,Reason,NodeList"


def accounted(user: Runner, job_ids: Iterable[str]) -> dict[str, tuple[str, str, str, str]]:
    """job id -> (id, state, reason, nodes) for each given job accounting knows (array tasks by their own id,
    ``248_0``); empty where accounting does not answer."""
    ids = sorted(set(job_ids))
    if not ids:
        return {}
    res = user.run("sacct -n -X -P -o", STATE_FIELDS, "-j", ",".join(ids), timeout=30)
    return parse_accounted(res.stdout) if res.ok else {}


def parse_accounted(text: str) -> dict[str, tuple[str, str, str, str]]:
    """``sacct -n -X -P -o JobID,State,Reason,NodeList`` lines -> job id -> (id, state, reason, nodes)."""
    found: dict[str, tuple[str, str, str, str]] = {}
    for line in text.splitlines():
        parts = line.split("|")
        if len(parts) == 4 and parts[1].strip():
            found[parts[0]] = (parts[0], parts[1].split()[0], parts[2], parts[3])
    return found


def span(user: Runner, job_id: str) -> tuple[float, float] | None:
    """(start, end) of a job, epoch seconds as slurmctld recorded them: ``scontrol show job`` while the controller
    knows the job, else its accounting record; None when neither has both times (not ended, or not known)."""
    env = {"SLURM_TIME_FORMAT": "%s"}
    res = user.run("scontrol -o show job", job_id, env=env)
    fields: dict[str, Any] = {}
    if res.ok:
        for word in res.stdout.split():
            key, _, value = word.partition("=")
            fields.setdefault(key, value)
    if not (str(fields.get("StartTime", "")).isdigit() and str(fields.get("EndTime", "")).isdigit()):
        res = user.run("sacct -n -X -P -o Start,End -j", job_id, env=env, timeout=30)
        first = res.stdout.splitlines()[0].split("|") if res.ok and res.stdout.strip() else []
        fields = dict(zip(("StartTime", "EndTime"), first, strict=False))
    start, end = str(fields.get("StartTime", "")), str(fields.get("EndTime", ""))
    return (float(start), float(end)) if start.isdigit() and end.isdigit() else None
