"""T3's fail-closed probe (suites/_failclosed.py) and T6's pair judging (suites/_mpitalk.py).

The probe script runs for real with bash against the real TaskProlog (provision/task-prolog.sh), named by a
slurm.conf the test writes, and against copies broken the ways a worker's TaskProlog can be: one that exits 0
where it must refuse, one that says nothing, one that exports before it refuses. The judge must pass the first and
name each of the others.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from pytest_slurmflox.suites._failclosed import CASES, judge, probe_script
from pytest_slurmflox.suites._mpitalk import (
    MPI_TALK,
    NAMED_PAIRS,
    WAIT_S,
    exchange_seconds,
    pairs_message,
    program_seconds,
    senders,
    silent_pairs,
)

PROLOG = Path(__file__).resolve().parents[2] / "provision" / "task-prolog.sh"


def _probe(tmp_path: Path, prolog: Path, declared: str = "") -> list[str]:
    conf = tmp_path / "slurm.conf"
    conf.write_text(f"ClusterName=x\ntaskprolog = {prolog}  # the site's\n")
    env = {"SLURM_CONF": str(conf), "PATH": os.environ["PATH"]}
    res = subprocess.run(["/bin/bash", "-c", probe_script(declared)], env=env, capture_output=True, text=True)
    return res.stdout.splitlines()


def _broken(tmp_path: Path, old: str, new: str) -> Path:
    path = tmp_path / "broken-prolog.sh"
    text = PROLOG.read_text()
    assert old in text
    path.write_text(text.replace(old, new))
    path.chmod(0o755)
    return path


def test_the_real_task_prolog_refuses_every_case(tmp_path):
    lines = _probe(tmp_path, PROLOG)
    assert f"taskprolog={PROLOG}" in lines
    assert sorted(line for line in lines if line.startswith("case=")) == sorted(f"case={c} rc=1" for c in CASES)
    assert judge(lines) is None
    assert judge(lines, str(PROLOG)) is None


@pytest.mark.parametrize(
    ("old", "new", "said"),
    [
        ("\texit 1\n", "\texit 0\n", "exit 0 (a task would start without a valid profile)"),
        ("\tprintf 'print slurmflox", "\t: printf 'print slurmflox", "no 'print slurmflox: task profile invalid: ...'"),
        ("_sfp_fail() {\n", "_sfp_fail() {\n\techo export LEAK=1\n", "it exported ['export LEAK=1']"),
    ],
)
def test_a_task_prolog_that_does_not_fail_closed_is_named(tmp_path, old, new, said):
    prolog = _broken(tmp_path, old, new)
    problem = judge(_probe(tmp_path, prolog))
    assert problem is not None and said in problem and str(prolog) in problem, problem
    for what in CASES.values():
        assert what in problem


def test_a_worker_whose_slurm_conf_names_another_prolog_than_the_declared_one_is_named(tmp_path):
    problem = judge(_probe(tmp_path, PROLOG, "/etc/slurm/declared.sh"), "/etc/slurm/declared.sh")
    assert problem is not None and f"names TaskProlog '{PROLOG}', not the declared /etc/slurm/declared.sh" in problem


def test_a_configless_relative_task_prolog_is_run_from_beside_the_slurm_conf_slurmd_read(tmp_path):
    """Slurm 25.11+ configless: ``TaskProlog=task-prolog.sh`` and the file shipped into slurmd's conf-cache beside
    slurm.conf (judges/taskprolog.py); the probe runs that copy, from a task whose cwd is elsewhere, and a declared
    bare name is compared as written."""
    cache = tmp_path / "conf-cache"
    cache.mkdir()
    (cache / "task-prolog.sh").write_text(PROLOG.read_text())
    (cache / "task-prolog.sh").chmod(0o755)
    (cache / "slurm.conf").write_text("ClusterName=x\nTaskProlog=task-prolog.sh\n")
    env = {"SLURM_CONF": str(cache / "slurm.conf"), "PATH": os.environ["PATH"]}
    for declared in ("", "task-prolog.sh"):
        script = probe_script(declared)
        res = subprocess.run(["/bin/bash", "-c", script], env=env, capture_output=True, text=True, cwd=tmp_path)
        lines = res.stdout.splitlines()
        assert "taskprolog=task-prolog.sh" in lines, lines
        assert sorted(x for x in lines if x.startswith("case=")) == sorted(f"case={c} rc=1" for c in CASES), lines
        assert judge(lines, declared) is None
    (cache / "task-prolog.sh").unlink()  # named but not shipped: nothing runs, every case is named
    res = subprocess.run(["/bin/bash", "-c", probe_script()], env=env, capture_output=True, text=True, cwd=tmp_path)
    assert judge(res.stdout.splitlines()) is not None


def test_a_worker_without_a_task_prolog_is_named():
    assert "names no TaskProlog" in judge(["conf=/etc/slurm/slurm.conf", "taskprolog="])


def test_the_prolog_each_worker_names_is_read_and_only_a_plain_slurm_cluster_may_have_none(tmp_path):
    """A target silent about runtime.task_prolog runs the TaskProlog each worker's slurm.conf names; none named is
    NOT APPLICABLE only on profile existing (reporting/profiles.py), required (a FAIL naming the worker) elsewhere."""
    from pytest_slurmflox.suites._failclosed import CAPABILITY, named

    from pytest_slurmflox.reporting.profiles import PROFILES

    assert named(_probe(tmp_path, PROLOG, "")) == str(PROLOG) and named(["conf=/c", "taskprolog="]) == ""
    assert [p for p, profile in PROFILES.items() if CAPABILITY in profile.absent] == ["existing"]


def test_a_case_that_was_not_run_is_named():
    problem = judge(
        ["conf=/c", "taskprolog=/p", "case=missing rc=1", "out=missing print slurmflox: task profile invalid: x"]
    )
    assert problem is not None and "a profile without its revision marker: it was not run" in problem


def test_every_rank_hears_its_ring_predecessor_and_every_other_rank():
    assert senders(0, 3) == [("ring", 2), ("all", 1), ("all", 2)]


def _talk(rank: int, size: int, silent: set[tuple[str, int]] = frozenset()) -> list[str]:
    return [f"rank={rank} size={size}"] + [
        f"{'silent' if (k, p) in silent else 'heard'} {k} from={p}" for k, p in senders(rank, size)
    ]


def test_a_world_that_talks_names_no_pair():
    assert silent_pairs({f"w{r}": _talk(r, 3) for r in range(3)}, 3) == []


def test_a_silent_pair_is_named_sender_to_receiver():
    lines = {"w0": _talk(0, 3), "w1": _talk(1, 3, {("ring", 0), ("all", 0)}), "w2": _talk(2, 3)}
    assert silent_pairs(lines, 3) == ["w0 -> w1 (ring)", "w0 -> w1 (all)"]


def test_a_rank_ended_before_it_heard_names_every_pair_it_did_not_hear():
    lines = {"w0": ["rank=0 size=2"], "w1": _talk(1, 2)}
    assert silent_pairs(lines, 2) == ["w1 -> w0 (ring)", "w1 -> w0 (all)"]


def test_the_exchange_budget_grows_with_the_peers_and_bounds_the_program():
    assert exchange_seconds(3) == WAIT_S + 1.0
    assert exchange_seconds(64) == WAIT_S + 31.5
    assert program_seconds(4096) == WAIT_S + exchange_seconds(4096) + 10


def test_a_world_where_nothing_talks_is_named_in_a_bounded_message():
    pairs = [f"w{s} -> w{r} (all)" for s in range(64) for r in range(64) if s != r]
    said = pairs_message(pairs)
    assert said[:NAMED_PAIRS] == [f"{pair} cannot talk" for pair in pairs[:NAMED_PAIRS]]
    assert said[-1] == f"and {len(pairs) - NAMED_PAIRS} more pairs cannot talk ({len(pairs)} in all)"
    assert pairs_message(pairs[:2]) == [f"{pair} cannot talk" for pair in pairs[:2]]


def test_the_talking_program_exchanges_in_shifted_rounds_and_stays_until_the_end_when_it_heard_a_silence():
    """The C source's own contract (it is compiled on a worker, never here): one new peer per round, each round
    bounded by WAIT_S, a rank with a silence waits for the exchange's end before it exits."""
    assert "to = (rank + k) % size, from = (rank + size - k) % size" in MPI_TALK
    assert "round_end < end ? round_end : end" in MPI_TALK
    assert MPI_TALK.index("while (MPI_Wtime() < end)") < MPI_TALK.index("return 3;")
