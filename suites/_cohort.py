"""The worker cohort, and showing a per-worker property on every worker of it in one step.

Why one step: a property shown one job (or one SSH command) per worker costs a scheduler pass per worker, and the
run grows with the cohort. One
``srun -N<n> --ntasks-per-node=1 -w <every worker>`` step costs one allocation whatever the cohort; each task prints
its lines marked with the check's nonce and its node, the output is parsed once, and a worker whose line is missing
or wrong is named: every worker, every time.

Why the cohort pre-flight is strict: a worker whose slurmd stopped is ``idle*`` in ``sinfo`` until slurmctld marks
it down; counting it as serving let a run crawl for 15 minutes with every job waiting for it. Any of the flags
``*`` (not responding), ``~`` (powered off), ``#`` (powering up), ``%`` (powering down), ``$`` (maintenance
reservation), ``!`` (pending power down) means not serving (sinfo(1), NODE STATE CODES), and one short step on every
worker with a deadline shows each one answers.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from pytest_slurmflox.base.run import Result, quoted
from pytest_slurmflox.harness.sitehosts import parse_systems, system_probe
from pytest_slurmflox.model.busy import serving

from ._marks import Mark, Marked, on_each, per_node
from ._reservation import reservation
from ._shared import observe_once

#: The pre-flight step's deadline (seconds, whole): the allocation (``--immediate``) and the step together. A
#: stopped slurmd makes the step's launch fail or hang; either way the run ends within a minute naming the worker.
PREFLIGHT_DEADLINE = 20


def partition_nodes(target) -> tuple[dict[str, str], Result]:
    """Every node Slurm lists in the target's partition, with its state (whatever the state); the answer's lines
    carry each node's reason too (``%E``, last)."""
    res = target.login.run(quoted("sinfo -h -N -p %s -o '%%N|%%T|%%E'", target.spec.partition))
    return node_states(res.stdout), res


def node_states(text: str) -> dict[str, str]:
    """``sinfo -h -N -o '%N|%T'`` output (a reason column after it is ignored) as node -> state (lower case): one
    line per node, whatever order and however many (no host list to expand); a line without ``|`` (a site's banner)
    is not a node."""
    nodes: dict[str, str] = {}
    for line in text.splitlines():
        name, sep, state = line.strip().partition("|")
        if sep:
            nodes[name] = state.split("|", 1)[0].lower()
    return nodes


def cohort(target, held: dict[str, str] | None = None) -> tuple[list[str], list[str], list[Result | str]]:
    """The worker cohort: what Slurm lists in the partition, cross-checked with what the owner (NodeSet or local
    pool) lists. Returns (every node of either list, problems naming each node, evidence). A node in the
    partition the owner does not list, a listed worker Slurm does not have, or a worker that does not serve is a
    problem; none of them is dropped from the list, so per-worker checks still reach every node. A worker this tool
    quarantined (drained with a ``slurmflox <run id>: `` reason, model/quarantine.py) is left out of both lists and
    put in ``held`` (worker -> Slurm's reason): the run judges the others, and the verdict names it NOT RUN."""
    from pytest_slurmflox.model.quarantine import parse_nodes, quarantined

    nodes, res = partition_nodes(target)
    ours = quarantined(parse_nodes(res.stdout))
    evidence: list[Result | str] = [res]
    problems: list[str] = []
    # Throwaway workers a check starts on purpose (TF, possibly concurrently under xdist) are the owner's, listed
    # as such, and never part of the cohort.
    isolated = target.pool.isolated() if target.why_missing("isolated-worker") is None else set()
    if isolated:
        evidence.append("isolated (not cohort): " + ", ".join(sorted(isolated)))
        nodes = {n: s for n, s in nodes.items() if n not in isolated}
    within = reservation(target)  # slurm.reservation: the cohort is its nodes (_reservation.py)
    if within is not None:
        evidence += within.evidence
        problems += within.problems
        nodes = {n: within.state(s) for n, s in nodes.items() if n in within.nodes}
    ours = {n: why for n, why in ours.items() if n in nodes}
    if ours:
        evidence.append("quarantined (not cohort): " + "; ".join(f"{n} ({why})" for n, why in ours.items()))
        nodes = {n: s for n, s in nodes.items() if n not in ours}
        isolated = isolated | set(ours)
        if held is not None:
            held.update(ours)
    if not res.ok:
        return [], [f"sinfo failed on the login endpoint (exit {res.exit_status})"], evidence
    if not nodes:
        problems.append(f"Slurm lists no node in partition {target.spec.partition}")
    for name, state in sorted(nodes.items()):
        if not serving(state):
            problems.append(f"{name} is in partition {target.spec.partition} but not serving (state {state})")
    listed: dict[str, object] = {}
    if target.pool is not None:
        infos = target.pool.workers()
        evidence.append("owner lists: " + ", ".join(f"{w.name}(ready={w.ready})" for w in infos))
        listed = {w.name: w for w in infos if w.name not in isolated and (not within or w.name in within.nodes)}
        for name in sorted(set(nodes) - set(listed)):
            problems.append(f"{name} is in partition {target.spec.partition} but its owner does not list it (foreign)")
        for name, info in sorted(listed.items()):
            if name not in nodes:
                problems.append(f"{name} is listed by the owner but not registered in Slurm")
            elif not info.ready:
                problems.append(f"{name} is listed by the owner but not ready")
    return sorted(set(nodes) | set(listed)), problems, evidence


@dataclass(frozen=True)
class Across:
    """One step's answer from every worker: node -> its marked lines, parsed once from ``result``."""

    result: Marked
    nodes: tuple[str, ...]
    lines: dict[str, list[str]]

    @property
    def missing(self) -> list[str]:
        """Workers of the cohort that printed no line of ours (the step did not reach them, or their task died)."""
        return [node for node in self.nodes if not self.lines.get(node)]

    @property
    def launch_failed(self) -> dict[str, str]:
        """Workers where srun says the step could not launch (``Task launch for StepId=... failed on node X: why``):
        srun then aborts the whole step, so no worker prints a line, and this names the one that broke it."""
        text = self.result.stdout + self.result.stderr
        return dict(re.findall(r"Task launch for \S+ failed on node ([^:\s]+): ([^\n]*)", text))

    @property
    def task_ends(self) -> dict[str, str]:
        """What srun says of a worker's task that ended badly (``srun: error: worker2: task 1: Segmentation
        fault``): the why of a worker that printed nothing, Slurm's words and not the task's."""
        text = self.result.stdout + self.result.stderr
        return {
            node: f"task {task}: {why}"
            for node, task, why in re.findall(r"srun: error: ([^:\s]+): task (\d+): ([^\n]*)", text)
        }

    def wrong(self, judge: Callable[[str, list[str]], str | None]) -> Problems:
        """``judge(node, lines)`` for every worker, in cohort order: the problems (each naming its worker), a
        missing worker included with srun's word on its task (and, when the step did not launch, the worker that
        stopped it first); :attr:`Problems.workers` holds the same by worker, as data."""
        failed = self.launch_failed
        problems = Problems()
        for node, why in failed.items():
            problems.name(node, f"{node}: the step could not launch there ({why})")
        aborted = f" (the step was aborted: it could not launch on {', '.join(failed)})" if failed else ""
        ends = {} if failed else self.task_ends
        for node in self.missing:
            if node not in failed:
                said = f" (srun: {ends[node]})" if node in ends else ""
                problem = f"{node}: no line of ours from a task there{aborted}{said}"
                if failed:  # a step aborted by another worker's launch failure names that worker, not this one
                    problems.append(problem)
                else:
                    problems.name(node, problem)
        for node in self.nodes:
            if self.lines.get(node):
                problem = judge(node, self.lines[node])
                if problem:
                    problems.name(node, f"{node}: {problem}")
        return problems


class Problems(list[str]):
    """A step's problems, each naming its worker, and :attr:`workers`: worker -> its first problem (what a FAIL
    carries as data: suites/_capability.py ``requirement(..., workers=...)``)."""

    def __init__(self) -> None:
        super().__init__()
        self.workers: dict[str, str] = {}

    def name(self, worker: str, problem: str) -> None:
        self.append(problem)
        self.workers.setdefault(worker, problem)


def across(jobs, nodes: Iterable[str], script: str, *, args: str = "", timeout: float = 180.0) -> Across:
    """``script`` once on every node in ONE step (``-N<n> --ntasks-per-node=1 -w <every node>``); its lines come
    back per node (:class:`Across`). ``script`` runs in bash with ``$SLURMD_NODENAME`` and ``$SLURM_PROCID`` set."""
    names = tuple(sorted(nodes))
    res = on_each(jobs, names, script, args=args, timeout=timeout)
    return Across(res, names, per_node(res))


def ring(nodes: Sequence[str]) -> list[tuple[str, str]]:
    """(writer, reader) pairs over the whole cohort: worker i writes, worker i+1 reads, the last is read by the
    first; every worker writes once and reads once."""
    names = list(nodes)
    return [(names[i], names[(i + 1) % len(names)]) for i in range(len(names))] if len(names) > 1 else []


def ring_case(pairs: list[tuple[str, str]], body: Callable[[str, str], str]) -> str:
    """A ``case "$SLURMD_NODENAME"`` that runs ``body(self, other)`` on each node of ``pairs``: with
    ``pairs=ring(nodes)`` the writer side (self=writer, other=reader); with the pairs reversed, the reader side."""
    arms = " ".join(f"{quoted('%s', me)}) {body(me, other)};;" for me, other in pairs)
    return f'case "$SLURMD_NODENAME" in {arms} *) echo "not in the cohort: $SLURMD_NODENAME";; esac'


@dataclass(frozen=True)
class Preflight:
    """The pre-flight step: who did not answer, the step, and each worker's system as testinfra asks it
    (``systems``: the run's worker Hosts start from it, harness/sitehosts.py)."""

    silent: list[str]
    step: Across
    systems: dict[str, dict[str, list]]


def preflight_step(jobs, nodes: Sequence[str], deadline: int = PREFLIGHT_DEADLINE) -> Preflight:
    """One short step on every worker, bounded by ``deadline`` seconds: the problems name each worker that did not
    answer (its slurmd stopped or hung, though Slurm has not marked it yet). The same step answers testinfra's
    system commands on each worker (lines under a nonce of their own, which the answer judged here never reads)."""
    nonce = Mark.new().nonce
    probe = f"echo answered; ( {system_probe(nonce, sorted(nodes))}\n) 2>/dev/null || true"  # never the answer's
    step = across(jobs, nodes, probe, args=f"--immediate={deadline // 2}", timeout=deadline)
    if step.result.exit_status in (126, 127) and not step.lines:
        # srun itself could not run at the login endpoint: nothing here says anything about the workers, and the
        # submit path is T9's to judge (every check that submits fails on its own)
        return Preflight([], step, {})
    reached = reached_workers(step.result.stdout + step.result.stderr)

    def judge(node: str, lines: list[str]) -> str | None:
        own = [line for line in lines if not line.startswith(nonce + "|")]
        return None if own == ["answered"] else f"answered {own!r}"

    problems = [p for p in step.wrong(judge) if not (p.split(":", 1)[0] in reached and "no line of ours" in p)]
    systems = parse_systems(nonce, "\n".join(line for lines in step.lines.values() for line in lines), list(nodes))
    silent = [f"worker {p} (one short step on every worker, {deadline} s deadline)" for p in problems]
    return Preflight(silent, step, systems)


def reached_workers(text: str) -> set[str]:
    """Workers whose slurmstepd ran the step although the task printed nothing: the task failed there
    (``slurmstepd-worker2: error: TaskProlog failed``, ``srun: error: worker2: task 1: Exited``). Such a worker
    answers; what its tasks see (a task profile that fails closed) is for the groups to judge (T3, TP)."""
    return set(re.findall(r"slurmstepd-([^:\s]+): ", text)) | set(re.findall(r"srun: error: ([^:\s]+): task \d+", text))


def local_accounts(jobs, nodes: Sequence[str], queries: list[tuple[str, str]]) -> tuple[list[str], list[str], Across]:
    """Ask every worker's resolver ``queries`` (``getent -s <source>`` per nsswitch source, one step across the
    cohort; pytest_slurmflox/judges/nsslocal.py): the problems (a local source answered, naming worker and source), the
    non-local answers (``node: source``, evidence that the identity came from elsewhere) and the step."""
    from pytest_slurmflox.judges.nsslocal import account_problems, probe_script

    step = across(jobs, nodes, probe_script(queries))
    answered: list[str] = []

    def judge(node: str, lines: list[str]) -> str | None:
        problems, who = account_problems(lines, queries)
        answered.extend(f"{node}: {w}" for w in who)
        return "; ".join(problems) or None

    return step.wrong(judge), answered, step


def task_identities(request, jobs, nodes: Sequence[str]) -> Marked:
    """``id`` in a task on every worker, one step read once in the run (suites/_shared.py): T10 judges the uid a
    task runs as, TI the whole identity (numbers and names), each against its own expectation."""
    return observe_once(request, "task-identities", lambda: {"step": on_each(jobs, nodes, "id")})["step"]
