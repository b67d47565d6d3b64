"""What Slurm guarantees about each name it sets in a task: over which tasks its value is one value.

A comparison across tasks is only as right as this table: treating a per-node value as step-wide is a false FAIL on
every healthy cluster where it differs (``SLURM_SRUN_COMM_PORT`` differs between the tasks of one step on more
than 48 nodes), treating a step-wide value as per-task a blind spot a TaskProlog can hide in. Each scope
below names where Slurm defines it (SchedMD/slurm, the file and function; checked against 22.05.8, 24.11.5 and the
development branch of August 2026):

- ``cluster``: what the cluster's configuration, the user and the request decide, the same in every job
  submitted alike (SLURM_CONF, the partition, the account, the submission directory, the task count asked for).
  Compared between the tasks of one step and between batch jobs submitted alike. The default for a name not
  in the table, so a name a TaskProlog invents is compared, never waved through.
- ``job``: the job's identity or allocation (env_array_for_job/env_array_for_batch_job in src/common/env.c, srun's
  srun_job.c for an allocation it made). One value within a step; between batch jobs (one per worker) it differs
  by design and is not compared.
- ``step``: the step's own description, set once by srun for every task (env_array_for_step in src/common/env.c:
  SLURM_STEP_ID, SLURM_STEP_NODELIST, SLURM_STEP_NUM_*, SLURM_STEP_LAUNCHER_PORT = srun's first response port,
  src/api/step_launch.c). One value within a step.
- ``port-group``: ``SLURM_SRUN_COMM_PORT``. srun opens one response port per 48 nodes of the step
  (``_create_listeners``: ``num_resp_port = _estimate_nports(num_nodes, 48)``, src/api/step_launch.c) and the
  node with step node id ``i`` is given port ``resp_port[i % num_resp_port]`` (src/slurmd/slurmstepd/
  slurmstepd_job.c). slurm.conf(5) SrunPortRange: "A single srun opens 4 listening ports plus 2 more for every 48
  hosts beyond the first 48" (Slurm's testsuite, test_116_48, counts ``4 + 2 * ((hosts - 1) // 48)``: these are
  the response ports plus as many I/O ports). Judged by :func:`port_problems` over the :class:`StepLayout`.
- ``node``: the node's own (its name, its place in the step, its CPUs, its PMIx server's variables, the address
  srun's launch reached it from: slurmd sets SLURM_SRUN_COMM_HOST from the connection that carried the launch,
  src/slurmd/slurmd/req.c, so a multi-homed submit host may show different ones). Not compared between nodes;
  judged by a rule where one exists (SLURM_NODEID: :func:`layout_problems`; the node's name: slurmenv.py).
- ``task``: the task's own (rank, local id, pid, CPU binding mask). Not compared.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass

from .hostlist import expand

CLUSTER, JOB, STEP, PORT_GROUP, NODE, TASK = "cluster", "job", "step", "port-group", "node", "task"

#: Nodes served by one srun response port (src/api/step_launch.c ``_estimate_nports(num_nodes, 48)``).
NODES_PER_PORT = 48

_JOB = (
    "SLURM_JOB_ID SLURM_JOBID SLURM_JOB_NAME SLURM_JOB_START_TIME SLURM_JOB_END_TIME SLURM_JOB_NODELIST "
    "SLURM_NODELIST SLURM_JOB_NUM_NODES SLURM_NNODES SLURM_NODE_ALIASES SLURM_JOB_CPUS_PER_NODE "
    "SLURM_TASKS_PER_NODE SLURM_PRIO_PROCESS"  # the submitting process's nice value (env.c set_prio_process_env)
    " SLURM_JOB_SLUID"  # the job's SLUID (26.05; measured on sid's 26.05.5: one per job, e.g. s4Y5M94X074600)
)
_STEP = (
    "SLURM_STEP_ID SLURM_STEPID SLURM_STEP_NODELIST SLURM_STEP_NUM_NODES SLURM_STEP_NUM_TASKS "
    "SLURM_STEP_TASKS_PER_NODE SLURM_STEP_LAUNCHER_PORT SLURM_STEP_LAUNCHER_IPADDR SLURM_STEP_RESV_PORTS"
)
_NODE = (
    "SLURMD_NODENAME SLURM_NODEID SLURM_TOPOLOGY_ADDR SLURM_CPUS_ON_NODE SLURM_GTIDS HOSTNAME PMIX_HOSTNAME "
    "SLURM_LAUNCH_NODE_IPADDR SLURM_SRUN_COMM_HOST"
)
_TASK = (
    "SLURM_PROCID SLURM_LOCALID SLURM_TASK_PID SLURM_CPU_BIND SLURM_CPU_BIND_LIST SLURM_CPU_BIND_TYPE PMIX_RANK "
    "PMI_RANK PMI_FD"  # mpi/pmi2 (src/plugins/mpi/pmi2/mpi_pmi2.c): the task's rank and its socket to slurmstepd
)

#: name -> scope, for every name whose scope is not ``cluster`` (see the module docstring for the sources).
SCOPES: Mapping[str, str] = {
    **dict.fromkeys(_JOB.split(), JOB),
    **dict.fromkeys(_STEP.split(), STEP),
    **dict.fromkeys(_NODE.split(), NODE),
    **dict.fromkeys(_TASK.split(), TASK),
    "SLURM_SRUN_COMM_PORT": PORT_GROUP,
}


def scope(name: str) -> str:
    """The scope of a Slurm-set ``name``. What the PMIx server exports is the node's: mpi/pmix runs one server in
    each node's slurmstepd and each task's variables come from that server (``PMIx_server_setup_fork`` through
    ``pmixp_lib_setup_fork``, src/plugins/mpi/pmix/mpi_pmix.c: its URI, directories, namespace). Any other name not
    in :data:`SCOPES` is ``cluster``-wide."""
    if name in SCOPES:
        return SCOPES[name]
    return NODE if name.startswith("PMIX_") else CLUSTER


def compared(name: str, *, one_step: bool) -> bool:
    """Whether one value is required of ``name`` across the compared tasks: the tasks of one step, or batch jobs
    (one per worker)."""
    where = scope(name)
    if one_step:
        return where in (CLUSTER, JOB, STEP)
    return where == CLUSTER


def response_ports(nodes: int) -> int:
    """How many response ports srun opens for a step on ``nodes`` nodes: one per 48 (rounded up)."""
    return max(1, -(-nodes // NODES_PER_PORT))


def majority(values: list[str]) -> str | None:
    """The value more than half of ``values`` have, or None."""
    if not values:
        return None
    value, times = Counter(values).most_common(1)[0]
    return value if times * 2 > len(values) else None


def _position(env: Mapping[str, str]) -> int | None:
    value = env.get("SLURM_NODEID", "")
    return int(value) if re.fullmatch(r"\d{1,6}", value) else None


@dataclass(frozen=True)
class StepLayout:
    """One step's node order, from the node list most of its tasks carry: node -> its step node id."""

    order: tuple[str, ...]
    source: str  #: how the evidence names where the order came from

    @classmethod
    def of(cls, tasks: Mapping[str, Mapping[str, str]]) -> StepLayout | None:
        """From ``SLURM_STEP_NODELIST`` (or, without it, ``SLURM_JOB_NODELIST``) as most tasks have it; None when
        no list is had by a majority or it does not parse."""
        for name in ("SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST"):
            text = majority([env[name] for env in tasks.values() if name in env])
            if text is None:
                continue
            try:
                return cls(tuple(expand(text)), name)
            except ValueError:
                return None
        return None

    def index(self) -> dict[str, int]:
        first: dict[str, int] = {}
        for i, node in enumerate(self.order):
            first.setdefault(node, i)
        return first


def layout_problems(tasks: Mapping[str, Mapping[str, str]], layout: StepLayout | None) -> dict[str, list[str]]:
    """Per node, how its task's ``SLURM_NODEID`` contradicts the step's node order (Slurm gives a task its node's
    position in the step's node list); a node the list does not name is named too."""
    out: dict[str, list[str]] = {}
    if layout is None:
        return out
    index = layout.index()
    for node, env in tasks.items():
        if node not in index:
            out.setdefault(node, []).append(f"{layout.source} does not name {node}, where a task of the step ran")
        elif "SLURM_NODEID" in env and env["SLURM_NODEID"] != str(index[node]):
            out.setdefault(node, []).append(
                f"SLURM_NODEID={env['SLURM_NODEID']!r}, but {layout.source} puts {node} at {index[node]}"
            )
    return out


def port_problems(
    tasks: Mapping[str, Mapping[str, str]], layout: StepLayout | None, step_nodes: int
) -> dict[str, list[str]]:
    """Per node, how its task's ``SLURM_SRUN_COMM_PORT`` breaks srun's rule for one step on ``step_nodes`` nodes:
    ``response_ports(step_nodes)`` ports, the node with step node id ``i`` on port ``i % ports``; each port is
    one listening socket of srun, so two groups never share one. A task with no place in the layout is judged
    against the ports its step's groups have."""
    ports = response_ports(step_nodes)
    index = layout.index() if layout else {}
    group_of: dict[str, int | None] = {}
    for node, env in tasks.items():
        place = index.get(node, _position(env))
        group_of[node] = None if place is None else place % ports
    have = {node: env["SLURM_SRUN_COMM_PORT"] for node, env in tasks.items() if "SLURM_SRUN_COMM_PORT" in env}
    members: dict[int, list[str]] = {}
    for node in have:
        if group_of[node] is not None:
            members.setdefault(group_of[node], []).append(node)  # type: ignore[arg-type]
    owner = {g: majority([have[n] for n in nodes]) for g, nodes in members.items()}
    shared = Counter(port for port in owner.values() if port is not None)
    # a task with no place in the step is judged against the groups' ports (without any, the most common ones)
    known = set(shared) or {port for port, _ in Counter(have.values()).most_common(ports)}
    out: dict[str, list[str]] = {}
    rule = f"srun opens {ports} response port(s) for {step_nodes} nodes, node id i on port i % {ports}"
    for node, port in have.items():
        group = group_of[node]
        problem = None
        if group is None:
            if port not in known:
                problem = f"SLURM_SRUN_COMM_PORT={port!r} is none of the step's ports {sorted(known)} ({rule})"
        elif owner[group] is None:
            values = sorted(set(have[n] for n in members[group]))
            problem = f"SLURM_SRUN_COMM_PORT={port!r}: the tasks of port group {group} disagree ({values}; {rule})"
        elif port != owner[group]:
            problem = f"SLURM_SRUN_COMM_PORT={port!r}, port group {group}'s other tasks have {owner[group]!r} ({rule})"
        elif shared[port] > 1:
            problem = f"SLURM_SRUN_COMM_PORT={port!r} is shared by {shared[port]} port groups ({rule})"
        if problem:
            out.setdefault(node, []).append(problem)
    return out
