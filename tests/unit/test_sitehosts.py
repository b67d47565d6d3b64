"""A site's worker Hosts (harness/sitehosts.py): the step script, run by real bash once per worker as Slurm would
run its one task there, answers every command of every worker from lines it marked itself; gathering asks many
facts in as many steps as the longest command chain, whatever the number of workers.

The step's fan-out is the one stand-in here (:class:`LocalSteps`: the script in bash once per worker, with the
worker's ``SLURMD_NODENAME``); the live run through Slurm is tests/integration/test_wheel_install.py.
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from pytest_slurmflox.base.run import Result
from pytest_slurmflox.harness.sitehosts import (
    SYSTEM_COMMANDS,
    Workers,
    parse_answers,
    parse_systems,
    step_script,
    system_probe,
)


@dataclass
class LocalSteps:
    """The ``submit`` helper's ``srun`` for :class:`Workers`: the command in bash once per ``-w`` worker."""

    noise: str = ""  #: what a site's TaskProlog prints before the task's own lines
    calls: int = 0

    def srun(self, args: str, command: str, *, timeout: float) -> Result:
        self.calls += 1
        nodes = args.split("-w ", 1)[1].split()[0].split(",")
        out = ""
        for node in nodes:
            env = {**os.environ, "SLURMD_NODENAME": node}
            proc = subprocess.run(["bash", "-c", command], env=env, capture_output=True, text=True, timeout=timeout)
            out += self.noise + proc.stdout
        return Result(command, "local", "root", 0, out, "", 0.0)


def test_every_answer_comes_back_byte_for_byte_from_its_own_worker():
    wanted = {
        "w1": ["printf 'a|b\\\\n\\n%s' \"$SLURMD_NODENAME\"", "echo err >&2; exit 3", "printf 'ends in x'; exit 4"],
        "w2": ["printf 'é\\n\\n'"],
    }
    script = step_script("sfxnonce", wanted)
    out = ""
    for node in wanted:
        out += "print sfx|w1|0|0|Zm9yZ2Vk|\nsfxother|w1|0|0|Zm9yZ2Vk|\n"  # a site's lines, and another step's
        out += subprocess.run(["bash", "-c", script], env={**os.environ, "SLURMD_NODENAME": node},
                              capture_output=True, text=True, check=True).stdout  # fmt: skip
    got = parse_answers("sfxnonce", out, wanted)
    assert got[("w1", wanted["w1"][0])] == (0, "a|b\\n\nw1", "")
    assert got[("w1", wanted["w1"][2])] == (4, "ends in x", "")
    assert got[("w1", wanted["w1"][1])] == (3, "", "err\n")
    assert got[("w2", wanted["w2"][0])] == (0, "é\n\n", "")


def test_facts_of_every_worker_cost_the_longest_chain_not_the_cohort():
    def fact(host):  # two commands in sequence, the second chosen by the first's answer
        kind = host.run("echo linux").stdout.strip()
        return host.run("echo %s-$SLURMD_NODENAME", kind).stdout.strip()

    for size in (3, 32):
        steps = LocalSteps(noise="TaskProlog says hello\n")
        workers = Workers(steps, tuple(f"w{i}" for i in range(1, size + 1)))
        facts = workers.gather({f"f{i}": fact for i in range(20)})
        assert steps.calls == workers.steps == 2, size
        assert facts["f7"]["w3"] == "linux-w3" and len(facts["f0"]) == size


def test_a_worker_host_outside_gathering_runs_its_own_step_and_quotes_through_the_projects_helper():
    steps = LocalSteps()
    workers = Workers(steps, ("w1", "w2"))
    result = workers["w2"].run("printf %s", "it's $HOME")
    assert (result.rc, result.stdout, steps.calls) == (0, "it's $HOME", 1)
    with pytest.raises(KeyError, match="w9 is not a worker"):
        workers["w9"]


def test_a_worker_the_step_did_not_answer_on_is_named():
    class Lost(LocalSteps):
        def srun(self, args: str, command: str, *, timeout: float) -> Result:
            return Result(command, "local", "root", 1, "", "srun: error: w2: task 1: Killed", 0.0)

    workers = Workers(Lost(), ("w1", "w2"))
    said = r"did not answer on every worker: not on w1, w2 \(for example w1: true\).*w2: task 1"
    with pytest.raises(RuntimeError, match=said):
        workers.gather({"up": lambda host: host.run("true").rc})


def _this_hosts_systems(nodes) -> dict:
    """The cohort pre-flight's seed, from its own probe run by bash once per worker (as the step would)."""
    out = ""
    for node in nodes:
        env = {**os.environ, "SLURMD_NODENAME": node}
        out += subprocess.run(["bash", "-c", system_probe("sfxpre", nodes)], env=env, capture_output=True,
                              text=True, check=True).stdout  # fmt: skip
    return parse_systems("sfxpre", out, nodes)


def _module_facts() -> dict:
    """20 facts in testinfra's own modules: 10 packages, 10 files (this Debian host stands in for each worker)."""
    facts = {f"pkg{i}": (lambda host, n=name: host.package(n).is_installed) for i, name in enumerate(["bash"] * 10)}
    facts.update({f"file{i}": (lambda host, i=i: host.file(f"/etc/nothere{i}").exists) for i in range(9)})
    facts["bash on PATH"] = lambda host: host.exists("bash")
    return facts


def test_module_facts_cost_one_step_when_the_run_knows_each_workers_system():
    nodes = tuple(f"w{i}" for i in range(1, 33))
    systems = _this_hosts_systems(nodes)
    assert set(systems) == set(nodes) and set(systems["w7"]) == set(SYSTEM_COMMANDS)
    steps = LocalSteps(noise="TaskProlog says hello\n")
    workers = Workers(steps, nodes, systems=systems)
    facts = workers.gather(_module_facts())
    assert steps.calls == 1
    assert all(facts["pkg3"].values()) and not any(facts["file4"].values()) and all(facts["bash on PATH"].values())
    assert workers["w5"].system_info.distribution == "debian"  # from the seed: no further step
    assert steps.calls == 1


def test_an_unknown_system_is_asked_with_the_first_step_and_kept_for_the_run():
    nodes = ("w1", "w2", "w3")
    run_systems: dict = {}
    steps = LocalSteps()
    first = Workers(steps, nodes, systems=run_systems).gather(_module_facts())
    assert steps.calls == 2  # the system with the first step, then every module's own command
    assert set(run_systems) == set(nodes)  # the session's store, filled for the checks after it
    again = Workers(steps, nodes, systems=run_systems).gather(_module_facts())
    assert steps.calls == 3 and again == first


def test_a_worker_that_did_not_answer_the_system_probe_is_left_to_ask_it_itself():
    env = {**os.environ, "SLURMD_NODENAME": "w1"}  # only w1's task ran
    out = subprocess.run(["bash", "-c", system_probe("sfxpre", ["w1", "w2"])], env=env, capture_output=True, text=True)
    out = out.stdout
    assert list(parse_systems("sfxpre", out, ["w1", "w2"])) == ["w1"]
    assert parse_systems("sfxother", out, ["w1", "w2"]) == {}  # another step's lines are not ours


def test_a_fact_that_catches_exception_does_not_swallow_a_pending_answer():
    def content_or_none(host):
        try:
            return host.file("/etc/os-release").content_string
        except Exception:  # a missing file, as a site would write it
            return None

    steps = LocalSteps()
    workers = Workers(steps, ("w1",), systems=_this_hosts_systems(("w1",)))
    facts = workers.gather({"hostname": content_or_none})
    assert facts["hostname"]["w1"] == Path("/etc/os-release").read_text() and steps.calls == 1


def test_a_fact_with_a_bare_except_is_asked_again_once_its_command_ran():
    """A bare ``except:`` catches the pending signal itself (a BaseException) and answers without running anything:
    that answer is never taken; the fact is asked again after the step, with its command's real answer."""

    def swallowing(host):
        try:
            return host.file("/etc/os-release").content_string
        except:  # noqa: E722 - what a site may write
            return "nothing ran"

    steps = LocalSteps()
    workers = Workers(steps, ("w1", "w2"), systems=_this_hosts_systems(("w1", "w2")))
    facts = workers.gather({"release": swallowing})
    text = Path("/etc/os-release").read_text()
    assert facts["release"] == {"w1": text, "w2": text} and steps.calls == 1
