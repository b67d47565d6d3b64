"""The names Slurm sets in a task, judged (pytest_slurmflox/judges/slurmenv.py): pure code, environments as Slurm 24.11
gave them on the local substrate (one srun step over three workers)."""

from __future__ import annotations

from pytest_slurmflox.judges.slurmenv import SlurmFacts, consistency_problems, redirection_problems

CONFIG = "SLURM_CONF              = /etc/slurm/slurm.conf\nSlurmdSpoolDir          = /var/lib/slurm/slurmd\n"
FACTS = SlurmFacts.parse(CONFIG)


def task(node: str, rank: int, **extra: str) -> dict[str, str]:
    return {
        "SLURMD_NODENAME": node,
        "SLURM_PROCID": str(rank),
        "SLURM_NODEID": str(rank),
        "SLURM_TOPOLOGY_ADDR": node,
        "SLURM_JOB_ID": "113",
        "SLURM_CONF": "/etc/slurm/slurm.conf",
        "SLURM_SUBMIT_DIR": "/tmp",
        "PWD": "/tmp",
        "TMPDIR": "/tmp",
        "SHLVL": "1",
        **extra,
    }


def test_config_facts_and_where_slurm_conf_may_point():
    assert FACTS.tmpfs == "/tmp"  # TmpFS not reported: Slurm's default
    assert FACTS.conf_paths() == {
        "/etc/slurm/slurm.conf",
        "/var/lib/slurm/slurmd/conf-cache/slurm.conf",
        "/run/slurm/conf/slurm.conf",
    }


def test_a_healthy_task_has_no_redirection():
    assert redirection_problems(task("w2", 1), "w2", FACTS, submit_dir="/tmp", tmpdir=None) == []


def test_redirections_are_named():
    bad = task("w2", 1, SLURM_CONF="/tmp/x", TMPDIR="/foreign", PWD="/elsewhere", SLURM_TOPOLOGY_ADDR="w9")
    problems = redirection_problems(bad, "w2", FACTS, submit_dir="/tmp", tmpdir=None)
    assert len(problems) == 4 and problems[0].startswith("SLURM_CONF='/tmp/x' redirects"), problems
    assert "TMPDIR='/foreign', Slurm gives '/tmp'" in problems
    # a TMPDIR the export mode passes from the submit side is Slurm's value then
    assert redirection_problems(task("w2", 1, TMPDIR="/scratch"), "w2", FACTS, submit_dir=None, tmpdir="/scratch") == []


def test_one_step_tells_one_story_and_the_odd_worker_is_named():
    healthy = {f"w{i}": task(f"w{i}", i) for i in (1, 2, 3)}
    assert consistency_problems(healthy, one_step=True) == {}
    odd = dict(healthy, w3=task("w3", 3, SLURM_CONF="/tmp/x", SLURM_SFX_SITE="1", SHLVL="0"))
    found = consistency_problems(odd, one_step=True)
    assert list(found) == ["w3"], found
    assert "sets SLURM_SFX_SITE, unlike the other workers' tasks of the step" in found["w3"]
    # SLURM_CONF is judged against Slurm's own paths (redirection_problems), never by a vote of the tasks
    assert not any(p.startswith("SLURM_CONF") for p in found["w3"]), found
    assert redirection_problems(odd["w3"], "w3", FACTS, submit_dir="/tmp", tmpdir=None)[0].startswith("SLURM_CONF=")


def test_two_workers_split_on_slurm_conf_name_only_the_one_that_redirects_it():
    """sid, two workers, worker2's TaskProlog exporting SLURM_CONF=/tmp/x: a vote of two names both; Slurm's own
    configuration names worker2 alone."""
    split = {"w1": task("w1", 0), "w2": task("w2", 1, SLURM_CONF="/tmp/x")}
    assert consistency_problems(split, one_step=True) == {}
    said = {n: redirection_problems(t, n, FACTS, submit_dir="/tmp", tmpdir=None) for n, t in split.items()}
    assert said["w1"] == [] and said["w2"][0].startswith("SLURM_CONF='/tmp/x' redirects"), said


def test_batch_jobs_differ_in_their_identity_only():
    jobs = {f"w{i}": task(f"w{i}", 0, SLURM_JOB_ID=str(100 + i)) for i in (1, 2)}
    assert consistency_problems(jobs, one_step=False) == {}
    assert set(consistency_problems(jobs, one_step=True)) == {"w1", "w2"}  # one step: one job id; two disagree


def test_batch_jobs_on_slurm_26_05_carry_their_own_sluid():
    """Slurm 26.05 sets SLURM_JOB_SLUID, one per job: the values of two batch jobs of TP's sbatch check on sid's
    26.05.5 (a false FAIL of TP and TR there when the name was read as cluster-wide)."""
    sluids = {1: "s4Y5M94X074600", 2: "s4Y5M94X074G00"}
    jobs = {f"w{i}": task(f"w{i}", 0, SLURM_JOB_ID=str(100 + i), SLURM_JOB_SLUID=sluids[i]) for i in (1, 2)}
    assert consistency_problems(jobs, one_step=False) == {}
    step = {f"w{i}": task(f"w{i}", i - 1, SLURM_JOB_SLUID=sluids[1]) for i in (1, 2)}
    step["w2"]["SLURM_JOB_SLUID"] = sluids[2]  # one step: one job, one SLUID; two disagree
    assert any("SLURM_JOB_SLUID" in p for p in consistency_problems(step, one_step=True).get("w2", []))


def test_batch_jobs_on_slurm_22_05_name_their_own_node_aliases():
    """Slurm 22.05 sets SLURM_NODE_ALIASES to the job's nodes and addresses: one batch job per worker differs there
    (seen on the bookworm cluster: a false FAIL of TP and TR on a healthy 22.05 cluster)."""
    jobs = {
        f"w{i}": task(f"w{i}", 0, SLURM_JOB_ID=str(100 + i), SLURM_NODE_ALIASES=f"w{i}:[10.0.0.{i}]:w{i}")
        for i in (1, 2)
    }
    assert consistency_problems(jobs, one_step=False) == {}


def test_what_each_nodes_pmix_server_exports_is_that_nodes():
    """mpi/pmix: each node's slurmstepd runs its own PMIx server and each task's PMIX_* come from it (its URI
    names its own address and pid): they differ between nodes of one healthy step and are not compared."""
    step = {
        f"w{i}": task(
            f"w{i}", i - 1, PMIX_RANK=str(i - 1), PMIX_SERVER_URI41=f"pmix-server.{300 + i};tcp4://10.0.0.{i}:4{i}"
        )
        for i in (1, 2, 3)
    }
    assert consistency_problems(step, one_step=True) == {}
