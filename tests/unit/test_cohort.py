"""The cohort's pure parts (suites/_cohort.py): which sinfo states serve, the write-here-read-there ring, and how one
step's answer names the worker whose line is missing or wrong. The ring's case statement runs through real bash."""

from __future__ import annotations

import subprocess

import pytest
from pytest_slurmflox.suites._cohort import Across, ring, ring_case, serving
from pytest_slurmflox.suites._marks import Mark, marked

from pytest_slurmflox.base.run import Result


@pytest.mark.parametrize("state", ["idle", "mixed", "allocated", "completing", "planned", "idle-", "mixed@"])
def test_serving_states(state):
    assert serving(state)


@pytest.mark.parametrize(
    "state",
    ["idle*", "idle~", "idle#", "idle%", "idle$", "idle!", "mixed*", "down", "down*", "drained", "draining",
     "idle+drain", "fail", "unknown", "future", "inval", ""],
)  # fmt: skip
def test_not_serving_states(state):
    assert not serving(state), state


def test_ring_pairs_every_worker_once_as_writer_and_once_as_reader():
    pairs = ring(["w1", "w2", "w3"])
    assert pairs == [("w1", "w2"), ("w2", "w3"), ("w3", "w1")]
    assert ring(["w1"]) == []


def test_ring_case_runs_each_nodes_own_arm():
    pairs = ring(["w1", "w2", "w3"])
    script = ring_case(pairs, lambda me, other: f"echo {me}-writes-for-{other}")
    readers = ring_case([(b, a) for a, b in pairs], lambda me, other: f"echo {me}-reads-{other}")
    for node, want in (("w1", "w1-writes-for-w2"), ("w3", "w3-writes-for-w1"), ("x", "not in the cohort: x")):
        done = subprocess.run(["bash", "-c", script], env={"SLURMD_NODENAME": node}, capture_output=True, text=True)
        assert done.stdout.strip() == want
    done = subprocess.run(["bash", "-c", readers], env={"SLURMD_NODENAME": "w1"}, capture_output=True, text=True)
    assert done.stdout.strip() == "w1-reads-w3"


def test_across_names_the_worker_whose_line_is_missing_or_wrong():
    mark = Mark.new()
    stdout = f"w1|site noise\n{mark.nonce}|w1|ok\n{mark.nonce}|w3|bad\n"
    res = marked(Result("x", "login", "u", 1, stdout, "", 0.1), mark)
    step = Across(res, ("w1", "w2", "w3"), {"w1": ["ok"], "w3": ["bad"]})
    assert step.missing == ["w2"]
    problems = step.wrong(lambda node, lines: None if lines == ["ok"] else f"said {lines}")
    assert problems == ["w2: no line of ours from a task there", "w3: said ['bad']"]


def test_across_names_the_worker_a_step_could_not_launch_on():
    stderr = (
        "srun: error: Task launch for StepId=18.0 failed on node worker3: Unspecified error\n"
        "srun: error: Application launch failed: Unspecified error\nsrun: error: worker2: task 1: Killed\n"
    )
    res = marked(Result("x", "login", "u", 137, "", stderr, 0.5), Mark.new())
    step = Across(res, ("worker1", "worker2", "worker3"), {})
    assert step.launch_failed == {"worker3": "Unspecified error"}
    problems = step.wrong(lambda node, lines: None)
    assert problems == [
        "worker3: the step could not launch there (Unspecified error)",
        "worker1: no line of ours from a task there (the step was aborted: it could not launch on worker3)",
        "worker2: no line of ours from a task there (the step was aborted: it could not launch on worker3)",
    ]
    # as data, the FAIL names the worker that broke the step, never the ones its abort silenced (quarantine)
    assert problems.workers == {"worker3": "worker3: the step could not launch there (Unspecified error)"}


def test_across_gives_srun_s_word_on_the_task_of_a_worker_that_printed_nothing():
    """A rank that died in MPI_Init prints no line: the problem names the worker and what srun says of its task."""
    stderr = (
        "[worker17:687 :0:687] Caught signal 11 (Segmentation fault: address not mapped to object at address 0xe0)\n"
        "srun: error: worker17: task 16: Segmentation fault\n"
    )
    mark = Mark.new()
    res = marked(Result("x", "login", "u", 139, f"{mark.nonce}|worker1|rank=0\n", stderr, 0.5), mark)
    step = Across(res, ("worker1", "worker17"), {"worker1": ["rank=0"]})
    assert step.task_ends == {"worker17": "task 16: Segmentation fault"}
    assert step.wrong(lambda node, lines: None) == [
        "worker17: no line of ours from a task there (srun: task 16: Segmentation fault)"
    ]


def test_a_worker_whose_task_failed_there_still_answered_the_preflight():
    """A TaskProlog that fails closed on worker2 is T3's FAIL, not a dead worker: its slurmstepd ran the step."""
    from pytest_slurmflox.suites._cohort import reached_workers

    text = (
        "slurmstepd-worker2: error: TaskProlog failed status=1\n"
        "srun: error: worker2: task 1: Exited with exit code 1\n"
        "srun: error: Task launch for StepId=9.0 failed on node worker3: Communication connection failure\n"
    )
    assert reached_workers(text) == {"worker2"}


def test_the_preflight_answers_each_workers_system_without_changing_its_own_answer():
    """The pre-flight's one step also answers testinfra's system commands on each worker (under a nonce of their
    own): the run's worker Hosts start from them, and the pre-flight still judges only its own "answered"."""
    import os
    import subprocess

    from pytest_slurmflox.suites._cohort import preflight_step

    from pytest_slurmflox.base.run import Result
    from pytest_slurmflox.harness.sitehosts import SYSTEM_COMMANDS

    class Steps:  # the step's fan-out: the command in bash once per -w worker, a site's prolog printing first
        def srun(self, args: str, command: str, *, timeout: float) -> Result:
            out = ""
            for node in args.split("-w ", 1)[1].split()[0].split(","):
                env = {**os.environ, "SLURMD_NODENAME": node}
                proc = subprocess.run(["bash", "-c", command], env=env, capture_output=True, text=True)
                out += "site prolog says hi\n" + proc.stdout
            return Result(command, "login", "u", 0, out, "", 0.1)

    pre = preflight_step(Steps(), ["worker1", "worker2"])
    assert pre.silent == []
    assert set(pre.systems) == {"worker1", "worker2"} and set(pre.systems["worker2"]) == set(SYSTEM_COMMANDS)
    assert pre.systems["worker1"]["uname -s"] == [0, os.uname().sysname + "\n", ""]
