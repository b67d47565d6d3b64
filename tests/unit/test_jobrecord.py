"""What Slurm still says of a job slurmctld purged (pytest_slurmflox/cluster/jobrecord.py): sacct's one-line form
replayed, in Slurm's format (``-n -X -P``: no header, allocations only, ``|`` between fields; a state with a detail,
``CANCELLED by 1000``, as its first word). The live path (MinJobAge=30 on the local cluster, sacct answering for an
array's purged tasks) is tests/integration/test_group_mutations_local.py."""

from __future__ import annotations

from pytest_slurmflox.cluster.jobrecord import parse_accounted
from pytest_slurmflox.cluster.slurm import TERMINAL_STATES, JobState


def test_array_tasks_by_their_own_id_states_by_their_first_word():
    text = "248_0|COMPLETED|None|worker1\n248_1|COMPLETED|None|worker2\n249|CANCELLED by 1000|None|worker1\n"
    found = parse_accounted(text)
    assert sorted(found) == ["248_0", "248_1", "249"]
    assert JobState(*found["249"]).state == "CANCELLED" and JobState(*found["248_1"]).done
    assert {state for _, state, _, _ in found.values()} <= TERMINAL_STATES


def test_a_line_that_is_not_a_record_is_no_job():
    assert parse_accounted("") == {}
    assert parse_accounted("sacct: error: Slurm accounting storage is disabled\n250||None|\n") == {}
