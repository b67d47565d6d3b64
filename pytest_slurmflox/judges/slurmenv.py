"""The names Slurm itself sets in a task, judged instead of ignored ("names no check reads").

expectations.py lets every variable under Slurm's prefixes (``SLURM_``, ``PMIX_``, ``PMI_``, ``HYDRA_``,
``OMPI_MCA_plm_slurm``) and the names ``TMPDIR``, ``HOSTNAME``, ``PWD``, ``SHLVL`` through, because Slurm sets them
and their values change per job. A TaskProlog that exports such a name with a foreign value (``SLURM_CONF=/tmp/x``,
which redirects every Slurm command the task runs; ``TMPDIR=/foreign``) then passed. Two rules judge them, each
from something the worker does not control:

- **Redirections.** Where Slurm's own value is known from the cluster's configuration, read at the login endpoint
  (``scontrol show config``), the task must have exactly that: ``SLURM_CONF`` is the controller's configuration
  path, or slurmd's configless cache (``<SlurmdSpoolDir>/conf-cache/slurm.conf``, or ``/run/slurm/conf/slurm.conf``,
  slurm.conf(5) "configless"); ``TMPDIR`` is the submitted one when the export mode passes it, else ``TmpFS``
  (slurmstepd sets it when the task has none); ``SLURMD_NODENAME`` and ``SLURM_TOPOLOGY_ADDR`` name the task's own
  node; ``PWD`` and ``SLURM_SUBMIT_DIR`` are the submission directory.
- **One step, one story.** Slurm gives every task of a step the same job- and step-wide values; per-node and
  per-task ones differ, and the srun communication port is one of a bounded set (slurmscope.py says which name is
  which, and where Slurm defines it). So the set of Slurm-namespace names, and each value Slurm makes one value,
  must be the same on every worker; a task's ``SLURM_NODEID`` must be its node's place in the step's node list
  and its ``SLURM_SRUN_COMM_PORT`` its port group's: a worker whose TaskProlog adds, removes or changes one is
  named. (Batch jobs, one per worker, are compared on the names and on the cluster-wide values.)
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass

from .expectations import slurm_sets
from .slurmscope import StepLayout, compared, layout_problems, port_problems, scope


@dataclass(frozen=True)
class SlurmFacts:
    """The cluster's own configuration as the login endpoint's ``scontrol show config`` reports it."""

    slurm_conf: str
    tmpfs: str
    spool: str

    @classmethod
    def read(cls, login) -> SlurmFacts:
        """From the login endpoint (a :class:`pytest_slurmflox.base.run.Runner`): the controller's view, not a
        worker's."""
        return cls.parse(login.run("scontrol show config").check().stdout)

    @classmethod
    def parse(cls, text: str) -> SlurmFacts:
        found = dict(re.findall(r"^(\S+)\s*=\s*(.*?)\s*$", text, re.M))
        return cls(
            slurm_conf=found.get("SLURM_CONF", ""),
            tmpfs=found.get("TmpFS") or "/tmp",
            spool=found.get("SlurmdSpoolDir", ""),
        )

    def conf_paths(self) -> set[str]:
        """Where a task's SLURM_CONF may point: the controller's path or slurmd's configless cache."""
        paths = {"/run/slurm/conf/slurm.conf"}
        if self.slurm_conf:
            paths.add(self.slurm_conf)
        if self.spool:
            paths.add(f"{self.spool.rstrip('/')}/conf-cache/slurm.conf")
        return paths


def redirection_problems(
    task: Mapping[str, str], node: str, facts: SlurmFacts, *, submit_dir: str | None, tmpdir: str | None
) -> list[str]:
    """Slurm-set variables of one task whose value is not Slurm's own. ``submit_dir``: the submission directory
    (None: unknown, not judged); ``tmpdir``: the submitted TMPDIR when the export mode passes it, else None."""
    problems = []
    conf = task.get("SLURM_CONF")
    if conf is not None and conf not in facts.conf_paths():
        problems.append(f"SLURM_CONF={conf!r} redirects Slurm's configuration (Slurm's: {sorted(facts.conf_paths())})")
    want_tmp = tmpdir or facts.tmpfs
    if "TMPDIR" in task and task["TMPDIR"] != want_tmp:
        problems.append(f"TMPDIR={task['TMPDIR']!r}, Slurm gives {want_tmp!r}")
    if task.get("SLURMD_NODENAME", node) != node:
        problems.append(f"SLURMD_NODENAME={task['SLURMD_NODENAME']!r} on {node}")
    addr = task.get("SLURM_TOPOLOGY_ADDR")
    if addr is not None and addr.rsplit(".", 1)[-1] != node:
        problems.append(f"SLURM_TOPOLOGY_ADDR={addr!r} does not end in {node}")
    for name in ("PWD", "SLURM_SUBMIT_DIR"):
        if submit_dir and name in task and task[name] != submit_dir:
            problems.append(f"{name}={task[name]!r}, submitted from {submit_dir!r}")
    return problems


#: Shell bookkeeping among the names Slurm may set: no redirection, and not stable between batch jobs (measured:
#: SHLVL 0 in one of three identical batch jobs, 1 in the others, Slurm 24.11).
SHELL_BOOKKEEPING = frozenset({"SHLVL", "OLDPWD", "_"})


#: Names whose value Slurm's own configuration decides, so :func:`redirection_problems` judges each task's value
#: against it: a majority vote among the tasks would name a healthy worker wherever the workers split evenly
#: (measured on sid, two workers, worker2's TaskProlog exporting SLURM_CONF=/tmp/x: worker1 was named too).
JUDGED_BY_FACTS = frozenset({"SLURM_CONF"})


def _slurm_names(tasks: Mapping[str, Mapping[str, str]]) -> Counter[str]:
    """How many of the tasks have each Slurm-set name (each distinct name classified once: 4096 tasks stay cheap)."""
    every = set().union(*(env.keys() for env in tasks.values()))
    known = frozenset(name for name in every if slurm_sets(name) and name not in SHELL_BOOKKEEPING)
    names: Counter[str] = Counter()
    for env in tasks.values():
        names.update(env.keys() & known)
    return names


def consistency_problems(
    tasks: Mapping[str, Mapping[str, str]], *, one_step: bool, step_nodes: int | None = None
) -> dict[str, list[str]]:
    """Per node, where its task breaks what Slurm guarantees across the compared tasks (slurmscope.py): a
    Slurm-set name the others' tasks lack or have, a value one value is required of that differs from most tasks'
    (with no majority, every task is named and no value is called the expected one), and in one step (``one_step``;
    else one batch job per node) the step's layout: ``SLURM_NODEID`` is the node's place in the step's node list,
    ``SLURM_SRUN_COMM_PORT`` its port group's. ``step_nodes``: the nodes the step was asked for (default: as many
    as its node list names, else the compared tasks)."""
    out: dict[str, list[str]] = {}
    names = _slurm_names(tasks)
    if len(tasks) > 1:
        _name_problems(tasks, names, out)
        same = (n for n, c in names.items() if c == len(tasks) and compared(n, one_step=one_step))
        for name in sorted(n for n in same if n not in JUDGED_BY_FACTS):
            _value_problems(tasks, name, out)
    if one_step:
        layout = StepLayout.of(tasks)
        nodes = step_nodes or (len(layout.order) if layout else len(tasks))
        for found in (layout_problems(tasks, layout), port_problems(tasks, layout, nodes)):
            for node, problems in found.items():
                out.setdefault(node, []).extend(problems)
    return out


def _name_problems(tasks: Mapping[str, Mapping[str, str]], names: Counter[str], out: dict[str, list[str]]) -> None:
    for name, count in sorted(names.items()):
        if count == len(tasks):
            continue
        tie = count * 2 == len(tasks)
        has = count * 2 > len(tasks)
        for node, env in tasks.items():
            if (name in env) != has or tie:
                what = "sets" if name in env else "lacks"
                whose = "half the workers' tasks set it" if tie else "unlike the other workers' tasks of the step"
                out.setdefault(node, []).append(f"{what} {name}, {whose}")


def _value_problems(tasks: Mapping[str, Mapping[str, str]], name: str, out: dict[str, list[str]]) -> None:
    values = Counter(env[name] for env in tasks.values())
    if len(values) == 1:
        return
    common, times = values.most_common(1)[0]
    if times * 2 > len(tasks):
        for node, env in tasks.items():
            if env[name] != common:
                out.setdefault(node, []).append(f"{name}={env[name]!r}, the other workers' tasks have {common!r}")
        return
    shown = ", ".join(repr(v) for v, _ in values.most_common(4)) + (", ..." if len(values) > 4 else "")
    for node, env in tasks.items():
        out.setdefault(node, []).append(
            f"{name}={env[name]!r}: the workers' tasks disagree and no value is most tasks' "
            f"({len(values)} values: {shown}); Slurm gives them one ({scope(name)}-wide)"
        )
