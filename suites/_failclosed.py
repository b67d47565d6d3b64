"""Fail-closed, shown on a worker: the TaskProlog in force there refuses profiles that must be refused.

Contract of the slurmflox TaskProlog (provision/task-prolog.sh): its first argument, when given, is the profile
directory (Slurm passes none, so only a caller that runs it by hand can point it elsewhere; no environment
variable can, so a job cannot redirect it). On a missing, incomplete or malformed profile it exits non-zero,
prints ``print slurmflox: task profile invalid: <why>`` and no ``export``/``unset`` directive.

The probe is read-only: the bad profiles are written into a private ``mktemp -d`` of the task (removed on exit),
the TaskProlog is run as the task's user with that directory as its argument, and nothing of the worker is changed.
"""

from __future__ import annotations

from pytest_slurmflox.base.run import quoted
from pytest_slurmflox.judges.taskprolog import IN_FORCE_SH, resolved_sh
from pytest_slurmflox.model.settings import TASK_PROFILE_SCHEMA

#: The profiles that must be refused: case -> what it is (shown in a failure).
CASES: dict[str, str] = {
    "missing": "a missing profile directory",
    "norev": "a profile without its revision marker",
    "multi": "a profile with a multi-line value",
}
REFUSAL = "print slurmflox: task profile invalid: "
#: The capability a worker without any TaskProlog lacks (reporting/profiles.py: absent only on profile existing).
CAPABILITY = "task-prolog"
#: Lines a TaskProlog prints that change a task's environment (Slurm's TaskProlog directives).
DIRECTIVES = ("export ", "unset ")


def probe_script(task_prolog: str = "") -> str:
    """Shell text for one worker: names the TaskProlog its own slurm.conf has in force (``conf=``,
    ``taskprolog=`` as written), then runs ``task_prolog`` (or, when empty, that one), resolved as slurmd resolves
    it (judges/taskprolog.py: a relative name beside slurm.conf, Slurm 25.11+), against each of :data:`CASES` and
    prints ``case=<c> rc=<exit>`` and each stdout line as ``out=<c> <line>``."""
    schema = quoted("%s", TASK_PROFILE_SCHEMA)
    return f"""{IN_FORCE_SH}
echo "conf=$conf"
echo "taskprolog=$named"
run="{resolved_sh(task_prolog)}"
[ -n "$run" ] || exit 0
t=$(mktemp -d) || exit 1
trap 'rm -rf "$t"' EXIT
mkdir -p "$t/norev/current" "$t/multi/current"
printf '%s\\n' {schema} > "$t/norev/current/schema"
printf 'env\\n' > "$t/norev/current/environment"
printf 'sha256:%064d\\n' 0 > "$t/multi/current/revision"
printf '%s\\n' {schema} > "$t/multi/current/schema"
printf 'line one\\nline two\\n' > "$t/multi/current/environment"
for c in {" ".join(CASES)}; do
  out=$(cd "$t" && "$run" "$t/$c" 2>/dev/null); rc=$?
  echo "case=$c rc=$rc"
  printf '%s\\n' "$out" | while IFS= read -r l; do [ -z "$l" ] || printf 'out=%s %s\\n' "$c" "$l"; done
done"""


def named(lines: list[str]) -> str:
    """The TaskProlog a worker's probe lines say its slurm.conf names ('' for none)."""
    return next((line.split("=", 1)[1] for line in lines if line.startswith("taskprolog=")), "")


def judge(lines: list[str], task_prolog: str = "") -> str | None:
    """One worker's probe lines (:func:`probe_script`): the problems (None when every case was refused: non-zero
    exit, the refusal line, no directive). ``task_prolog`` is the declared one the worker's slurm.conf must name."""
    fields = dict(line.split("=", 1) for line in lines if line.startswith(("conf=", "taskprolog=")))
    named = fields.get("taskprolog", "")
    if not named and not task_prolog:
        return f"its slurm.conf ({fields.get('conf', '?')}) names no TaskProlog: {lines[-3:]!r}"
    if task_prolog and named != task_prolog:
        return f"its slurm.conf ({fields.get('conf', '?')}) names TaskProlog {named!r}, not the declared {task_prolog}"
    problems = [p for case in CASES if (p := _refused(case, lines))]
    return f"TaskProlog {task_prolog or named}: " + "; ".join(problems) if problems else None


def _refused(case: str, lines: list[str]) -> str | None:
    what = CASES[case]
    codes = [line.split("rc=", 1)[1] for line in lines if line.startswith(f"case={case} rc=")]
    out = [line[len(f"out={case} ") :] for line in lines if line.startswith(f"out={case} ")]
    if len(codes) != 1:
        return f"{what}: it was not run ({lines[-3:]!r})"
    if codes[0] == "0":
        return f"{what}: exit 0 (a task would start without a valid profile)"
    if not any(line.startswith(REFUSAL) for line in out):
        return f"{what}: exit {codes[0]} but no '{REFUSAL}...' line (printed {out!r})"
    exported = [line for line in out if line.startswith(DIRECTIVES)]
    if exported:
        return f"{what}: it exported {exported!r}"
    return None
