"""The names Slurm itself sets in a task, judged instead of ignored (issue 26, "names no check reads").

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
- **One step, one story.** In one step every task gets the same job- and step-wide variables from Slurm; only the
  per-task and per-node ones (:data:`PER_TASK`) differ. So the set of Slurm-namespace names, and each job-wide
  value, must be the same on every worker: a worker whose TaskProlog adds, removes or changes one is named. (Batch
  jobs, one per worker, are compared on the names and on the values no job identity enters.)
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass

from .expectations import slurm_sets

#: Slurm-set variables whose value differs from task to task or node to node within one step (srun(1) and
#: sbatch(1), OUTPUT ENVIRONMENT VARIABLES; slurmstepd's additions).
PER_TASK = frozenset(
    {
        "SLURMD_NODENAME",
        "SLURM_NODEID",
        "SLURM_PROCID",
        "SLURM_LOCALID",
        "SLURM_GTIDS",
        "SLURM_TASK_PID",
        "SLURM_TOPOLOGY_ADDR",
        "SLURM_CPU_BIND",
        "SLURM_CPU_BIND_LIST",
        "SLURM_CPU_BIND_TYPE",
        "SLURM_CPUS_ON_NODE",
        "SLURM_JOB_CPUS_PER_NODE",
        "HOSTNAME",
        "PMIX_RANK",
        "PMI_RANK",
        "PMIX_HOSTNAME",
        "SLURM_PRIO_PROCESS",
        "SLURM_LAUNCH_NODE_IPADDR",
        "SLURM_SRUN_COMM_HOST",
    }
)
#: Values a job's identity enters: different in every batch job (one per worker), the same within one step.
PER_JOB = re.compile(
    r"SLURM_(JOB_?ID|JOB_NAME|JOB_START_TIME|JOB_END_TIME|(JOB_|STEP_)?NODELIST|STEP_?ID|SRUN_COMM_PORT|"
    r"STEP_LAUNCHER_PORT|TASK_PID|JOB_NUM_NODES|NNODES|STEP_NUM_NODES|TASKS_PER_NODE|STEP_TASKS_PER_NODE|"
    r"NODE_ALIASES)\Z"  # 22.05 names the job's nodes and addresses in SLURM_NODE_ALIASES: per job, like its nodelist
    r"|PMIX_\w*"  # the PMIx server's namespace, URIs and temporary directories are the job's
)


@dataclass(frozen=True)
class SlurmFacts:
    """The cluster's own configuration as the login endpoint's ``scontrol show config`` reports it."""

    slurm_conf: str
    tmpfs: str
    spool: str

    @classmethod
    def read(cls, login) -> SlurmFacts:
        """From the login endpoint (a :class:`pytest_slurmflox.run.Runner`): the controller's view, not a worker's."""
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


def _slurm_names(env: Mapping[str, str]) -> set[str]:
    return {name for name in env if slurm_sets(name) and name not in SHELL_BOOKKEEPING}


def consistency_problems(tasks: Mapping[str, Mapping[str, str]], *, one_step: bool) -> dict[str, list[str]]:
    """Per node, the Slurm-set names and job-wide values in which its task differs from the other tasks (the value
    most tasks have; with two tasks that disagree both are named). ``one_step``: the tasks are one step's (else one
    batch job per node: values a job's identity enters are not compared)."""
    out: dict[str, list[str]] = {}
    if len(tasks) < 2:
        return out
    names = Counter(name for env in tasks.values() for name in _slurm_names(env))
    for name, count in sorted(names.items()):
        if count == len(tasks):
            continue
        has = count * 2 > len(tasks)
        for node, env in tasks.items():
            if (name in env) != has or count * 2 == len(tasks):
                what = "sets" if name in env else "lacks"
                out.setdefault(node, []).append(f"{what} {name}, unlike the other workers' tasks of the step")
    for name in sorted(n for n, c in names.items() if c == len(tasks) and n not in PER_TASK):
        if not one_step and PER_JOB.match(name):
            continue
        values = Counter(env[name] for env in tasks.values())
        if len(values) == 1:
            continue
        common, times = values.most_common(1)[0]
        tie = times * 2 <= len(tasks)
        for node, env in tasks.items():
            if tie or env[name] != common:
                out.setdefault(node, []).append(f"{name}={env[name]!r}, the other workers' tasks have {common!r}")
    return out
