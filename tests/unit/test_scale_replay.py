"""A site's size without a big machine (issue 44): one srun step over 64, 512 and 4096 nodes, built from Slurm's own
rules, replayed through the parsers and judges a run uses on every worker's output.

The synthetic step follows what Slurm does (pytest_slurmflox/judges/slurmscope.py names the sources) and what a
64-worker
step on the local substrate showed (Slurm 24.11): the allocation's node order is not the names' order
(``worker[3,2,1,5,11,9-10,...]``), a task's ``SLURM_NODEID`` is its node's place in that list, srun opens one
response port per 48 nodes and node id ``i`` gets port ``i % ports``, ``SLURM_STEP_LAUNCHER_PORT`` is the first of
them, and every task prints its environment as TP's probe does (base64 chunks, interleaved between nodes in any
order). The 4096-node replays must stay under 10 s each.
"""

from __future__ import annotations

import base64
import random
import re
import time

import pytest
from pytest_slurmflox.suites._cohort import Across, node_states
from pytest_slurmflox.suites._marks import Mark, marked, per_node
from pytest_slurmflox.suites._records import environs

from pytest_slurmflox.base.run import Result
from pytest_slurmflox.judges.hostlist import expand
from pytest_slurmflox.judges.slurmenv import consistency_problems
from pytest_slurmflox.judges.slurmscope import StepLayout, response_ports

SIZES = (64, 512, 4096)
REPLAY_SECONDS = 10.0


def slurm_hostlist(names: list[str]) -> str:
    """``names`` (``worker<N>``) as Slurm writes a list in a given order: runs of consecutive numbers become
    ``lo-hi`` ranges, nothing is sorted (hostlist_ranged_string over an unsorted hostlist, src/common/hostlist.c)."""
    numbers = [int(name.removeprefix("worker")) for name in names]
    parts: list[str] = []
    start = prev = numbers[0]
    for n in [*numbers[1:], None]:
        if n is not None and n == prev + 1:
            prev = n
            continue
        parts.append(str(start) if start == prev else f"{start}-{prev}")
        if n is not None:
            start = prev = n
    return f"worker[{','.join(parts)}]"


def allocation_order(nodes: int, seed: int) -> list[str]:
    """Dynamic nodes in the order they registered: at 64 every worker anywhere (as measured), larger cohorts in
    registration waves of 64 whose order is shuffled, plus a straggler out of place per 256 nodes."""
    rng = random.Random(seed)
    names = [f"worker{i}" for i in range(1, nodes + 1)]
    if nodes <= 64:
        rng.shuffle(names)
        return names
    waves = [names[i : i + 64] for i in range(0, nodes, 64)]
    rng.shuffle(waves)
    order = [name for wave in waves for name in wave]
    for _ in range(nodes // 256):
        i, j = rng.randrange(nodes), rng.randrange(nodes)
        order[i], order[j] = order[j], order[i]
    return order


def step_environs(order: list[str], *, ports: list[int] | None = None) -> dict[str, dict[str, str]]:
    """The Slurm-set environment of each task of one step, one task per node, by Slurm's rules."""
    nodes = len(order)
    ports = ports or [41425 + 3217 * g for g in range(response_ports(nodes))]
    nodelist = slurm_hostlist(order)
    step = {
        "SLURM_CLUSTER_NAME": "site",
        "SLURM_CONF": "/etc/slurm/slurm.conf",
        "SLURM_JOB_ID": "2",
        "SLURM_JOBID": "2",
        "SLURM_JOB_NAME": "bash",
        "SLURM_JOB_NODELIST": nodelist,
        "SLURM_NODELIST": nodelist,
        "SLURM_STEP_NODELIST": nodelist,
        "SLURM_JOB_NUM_NODES": str(nodes),
        "SLURM_NNODES": str(nodes),
        "SLURM_STEP_NUM_NODES": str(nodes),
        "SLURM_NTASKS": str(nodes),
        "SLURM_STEP_NUM_TASKS": str(nodes),
        "SLURM_JOB_CPUS_PER_NODE": f"1(x{nodes})",
        "SLURM_TASKS_PER_NODE": f"1(x{nodes})",
        "SLURM_STEP_TASKS_PER_NODE": f"1(x{nodes})",
        "SLURM_STEP_ID": "0",
        "SLURM_STEPID": "0",
        "SLURM_STEP_LAUNCHER_PORT": str(ports[0]),
        "SLURM_SUBMIT_DIR": "/home/slurmtest",
        "SLURM_CPUS_ON_NODE": "1",
        "SLURM_LOCALID": "0",
        "SLURM_LAUNCH_NODE_IPADDR": "10.77.0.3",
        "SLURM_SRUN_COMM_HOST": "10.77.0.3",
        "TMPDIR": "/tmp",
        "PWD": "/home/slurmtest",
    }
    return {
        node: {
            **step,
            "SLURMD_NODENAME": node,
            "SLURM_TOPOLOGY_ADDR": node,
            "SLURM_NODEID": str(i),
            "SLURM_PROCID": str(i),
            "SLURM_GTIDS": str(i),
            "SLURM_TASK_PID": str(100 + i % 7),
            "SLURM_SRUN_COMM_PORT": str(ports[i % len(ports)]),
        }
        for i, node in enumerate(order)
    }


def probe_output(envs: dict[str, dict[str, str]], seed: int) -> str:
    """What ``ENVIRON_PROBE`` prints on every node (``node|seq|base64 chunk`` and ``node|END|``), the lines of all
    nodes interleaved in any order, as srun merges them."""
    lines: list[str] = []
    for node, env in envs.items():
        blob = base64.b64encode(b"\0".join(f"{k}={v}".encode() for k, v in env.items()) + b"\0").decode()
        chunks = [blob[i : i + 600] for i in range(0, len(blob), 600)]
        lines += [f"{node}|{seq}|{chunk}" for seq, chunk in enumerate(chunks)] + [f"{node}|END|"]
    random.Random(seed).shuffle(lines)
    return "\n".join(lines) + "\n"


def never_self_contradicting(problems: dict[str, list[str]]) -> None:
    """No message names a value as differing from an expected value equal to it (issue 44's ``'35589', the
    other workers' tasks have '35589'``)."""
    for node, messages in problems.items():
        for message in messages:
            said = re.match(r"\w+='([^']*)'.*? have '([^']*)'", message)
            assert not said or said.group(1) != said.group(2), (node, message)


@pytest.mark.parametrize("nodes", SIZES)
def test_a_healthy_step_at_a_sites_size_replays_clean(nodes):
    order = allocation_order(nodes, seed=nodes)
    text = probe_output(step_environs(order), seed=nodes)
    t0 = time.perf_counter()
    found = environs(text)
    layout = StepLayout.of(found)
    problems = consistency_problems(found, one_step=True, step_nodes=nodes)
    seconds = time.perf_counter() - t0
    assert sorted(found) == sorted(order)
    assert layout is not None and list(layout.order) == order  # Slurm's order, not the names'
    assert problems == {}, dict(list(problems.items())[:3])
    assert seconds < REPLAY_SECONDS, f"{nodes} nodes replayed in {seconds:.1f}s"
    ports = {env["SLURM_SRUN_COMM_PORT"] for env in found.values()}
    assert len(ports) == response_ports(nodes) == -(-nodes // 48)


@pytest.mark.parametrize(("nodes", "listening"), [(1, 4), (48, 4), (50, 6), (200, 12)])
def test_srun_listens_on_what_slurm_documents(nodes, listening):
    """slurm.conf(5) SrunPortRange: "A single srun opens 4 listening ports plus 2 more for every 48 hosts beyond the
    first 48" with its examples (srun -N 1, -N 48: 4; -N 50: 6; -N 200: 12): a response port and an I/O port per
    48 nodes, plus two."""
    assert 2 * response_ports(nodes) + 2 == listening


@pytest.mark.parametrize("nodes", range(1, 5000, 7))
def test_the_response_ports_follow_slurms_testsuite(nodes):
    """test_116_48 (SchedMD/slurm testsuite/python/tests) counts 4 + 2 * ((hosts - 1) // 48) ports per srun."""
    assert 2 * response_ports(nodes) + 2 == 4 + 2 * ((nodes - 1) // 48)


@pytest.mark.parametrize("nodes", SIZES)
def test_a_worker_whose_task_sees_a_foreign_port_is_named_alone(nodes):
    order = allocation_order(nodes, seed=nodes + 1)
    envs = step_environs(order)
    odd = order[nodes // 3]
    envs[odd]["SLURM_SRUN_COMM_PORT"] = "6818"  # no port of this step
    t0 = time.perf_counter()
    problems = consistency_problems(environs(probe_output(envs, seed=1)), one_step=True, step_nodes=nodes)
    assert time.perf_counter() - t0 < REPLAY_SECONDS
    assert list(problems) == [odd], dict(list(problems.items())[:3])
    assert problems[odd][0].startswith("SLURM_SRUN_COMM_PORT='6818', port group "), problems[odd]
    never_self_contradicting(problems)


@pytest.mark.parametrize("nodes", SIZES)
def test_the_three_worker_mutations_still_name_their_worker_alone(nodes):
    """tests/integration/test_cohort_mutations_local.py's TaskProlog on one worker (``SLURM_CONF=/tmp/x`` and a name
    Slurm never sets), replayed at a site's size: named alone, as at 3 workers."""
    order = allocation_order(nodes, seed=19)
    envs = step_environs(order)
    odd = order[-1]
    envs[odd].update(SLURM_CONF="/tmp/x", SLURM_SFX_SITE="1")
    problems = consistency_problems(environs(probe_output(envs, seed=2)), one_step=True, step_nodes=nodes)
    assert list(problems) == [odd], dict(list(problems.items())[:3])
    # SLURM_CONF is judged against Slurm's own paths (redirection_problems, TP and T10 call both), never by a vote
    assert problems[odd] == ["sets SLURM_SFX_SITE, unlike the other workers' tasks of the step"]


@pytest.mark.parametrize("nodes", SIZES)
def test_another_groups_port_is_not_this_nodes(nodes):
    """A port of the step, but not the one srun gave this node's group: named (from 49 nodes there are two)."""
    order = allocation_order(nodes, seed=7)
    envs = step_environs(order)
    odd = order[1]  # node id 1: group 1 of response_ports(nodes)
    envs[odd]["SLURM_SRUN_COMM_PORT"] = envs[order[0]]["SLURM_SRUN_COMM_PORT"]
    problems = consistency_problems(envs, one_step=True, step_nodes=nodes)
    assert list(problems) == [odd], problems
    never_self_contradicting(problems)


@pytest.mark.parametrize("nodes", [64, 4096])
def test_one_port_exported_on_every_node_is_named_on_every_node(nodes):
    """A TaskProlog exporting one port everywhere: srun never gives two port groups one port."""
    envs = step_environs(allocation_order(nodes, seed=3))
    for env in envs.values():
        env["SLURM_SRUN_COMM_PORT"] = "41425"
    problems = consistency_problems(envs, one_step=True, step_nodes=nodes)
    assert len(problems) == nodes
    assert all("is shared by" in p[0] for p in problems.values()), next(iter(problems.values()))


def test_more_ports_than_the_step_has_are_named_even_without_node_ids():
    """Without a node list or node ids to place a task, its port must still be one of the step's few."""
    envs = step_environs(allocation_order(64, seed=5))
    for env in envs.values():
        for name in ("SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST", "SLURM_NODEID"):
            del env[name]
    odd = sorted(envs)[5]
    envs[odd]["SLURM_SRUN_COMM_PORT"] = "1"
    problems = consistency_problems(envs, one_step=True, step_nodes=64)
    assert list(problems) == [odd] and "is none of the step's ports" in problems[odd][0], problems


@pytest.mark.parametrize("nodes", [64, 4096])
def test_a_node_id_that_is_not_the_nodes_place_in_the_step_is_named(nodes):
    order = allocation_order(nodes, seed=11)
    envs = step_environs(order)
    a, b = order[2], order[4]  # same port group: only the node ids are wrong
    envs[a]["SLURM_NODEID"], envs[b]["SLURM_NODEID"] = "4", "2"
    problems = consistency_problems(envs, one_step=True, step_nodes=nodes)
    assert sorted(problems) == sorted([a, b]), problems
    assert problems[a] == [f"SLURM_NODEID='4', but SLURM_STEP_NODELIST puts {a} at 2"]


def test_a_step_wide_value_two_workers_disagree_on_names_both_and_expects_neither():
    envs = step_environs(["worker2", "worker1"])
    envs["worker1"]["SLURM_JOB_ID"] = "999"
    problems = consistency_problems(envs, one_step=True)
    assert sorted(problems) == ["worker1", "worker2"]
    assert all("disagree and no value is most tasks'" in p[0] for p in problems.values()), problems
    never_self_contradicting(problems)


@pytest.mark.parametrize("nodes", SIZES)
def test_batch_jobs_one_per_worker_differ_in_identity_only(nodes):
    """One batch job per worker (TR's REST jobs, TP's sbatch): job, step and port values are each job's own."""
    envs = {}
    for i, node in enumerate(allocation_order(nodes, seed=2)):
        (env,) = step_environs([node], ports=[30000 + i]).values()
        envs[node] = {**env, "SLURM_JOB_ID": str(100 + i), "SLURM_JOBID": str(100 + i)}
    assert consistency_problems(envs, one_step=False) == {}


@pytest.mark.parametrize("nodes", SIZES)
def test_every_worker_answers_once_parsed_and_the_silent_one_is_named(nodes):
    order = allocation_order(nodes, seed=13)
    mark = Mark.new()
    silent = order[-1]
    lines = [f"{mark.nonce}|{node}|ok {i}" for i, node in enumerate(order) if node != silent]
    lines += ["site banner: welcome", f"{mark.nonce}|{order[0]}|second line"]
    random.Random(1).shuffle(lines)
    result = marked(Result("srun", "login", "slurmtest", 0, "\n".join(lines), "", 1.0), mark)
    t0 = time.perf_counter()
    answer = Across(result, tuple(sorted(order)), per_node(result))
    problems = answer.wrong(lambda node, got: None if any(g.startswith("ok ") for g in got) else f"said {got!r}")
    assert time.perf_counter() - t0 < REPLAY_SECONDS
    assert problems == [f"{silent}: no line of ours from a task there"]
    assert len(answer.lines[order[0]]) == 2


@pytest.mark.parametrize("nodes", SIZES)
def test_sinfo_lists_every_node_of_a_sites_partition(nodes):
    order = allocation_order(nodes, seed=17)
    text = "motd: maintenance on friday\n" + "".join(
        f"{n}|{'idle' if i % 9 else 'mixed'}\n" for i, n in enumerate(order)
    )
    states = node_states(text)
    assert sorted(states) == sorted(order) and states[order[9]] == "mixed" and states[order[1]] == "idle"


@pytest.mark.parametrize(
    ("text", "hosts"),
    [
        ("worker[2,1,9,3,11,6]", ["worker2", "worker1", "worker9", "worker3", "worker11", "worker6"]),
        ("worker[3,2,1,5,11,9-10,13]", ["worker3", "worker2", "worker1", "worker5", "worker11", "worker9", "worker10",
                                         "worker13"]),
        ("login,worker[7-8] gpu[08-10]", ["login", "worker7", "worker8", "gpu08", "gpu09", "gpu10"]),
        ("n[001-002]-ib", ["n001-ib", "n002-ib"]),
        ("rack[1-2]n[2,1]", ["rack1n2", "rack1n1", "rack2n2", "rack2n1"]),
        ("w[5,5]", ["w5", "w5"]),
        ("", []),
    ],
)  # fmt: skip
def test_host_lists_expand_in_slurms_order(text, hosts):
    assert expand(text) == hosts


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("w[1-3", "leaves a bracket open"),
        ("w1-3]", "closes a bracket it never opened"),
        ("w[[1]]", "nests a bracket"),
        ("w[3-1]", "runs backwards"),
        ("w[a]", "is not a number"),
        ("w[0-999999999]", "longer than Slurm's limit"),
        ("a[0-40000],b[0-40000]", "more than 65536 hosts"),
    ],
)
def test_a_malformed_or_hostile_host_list_is_refused_in_one_line(text, why):
    with pytest.raises(ValueError, match=re.escape(why)) as err:
        expand(text)
    assert "\n" not in str(err.value)


def test_a_fully_shuffled_4096_node_list_expands_back_in_order():
    order = allocation_order(64, seed=0) + [f"worker{i}" for i in random.Random(4).sample(range(65, 4097), 4032)]
    text = slurm_hostlist(order)
    t0 = time.perf_counter()
    assert expand(text) == order
    assert time.perf_counter() - t0 < 1.0
