"""Quarantine's pure rules (pytest_slurmflox/model/quarantine.py): which workers a run drains and with what reason,
the share that makes a fault the cluster's, reading our reasons back, and which re-tested workers resume."""

from __future__ import annotations

import pytest

from pytest_slurmflox.model.quarantine import (
    NodeRecord,
    WorkerFailure,
    drain_reason,
    drained_by,
    one_line,
    parse_share,
    plan,
    quarantined,
    retest_set,
    share_limit,
    to_resume,
)

IDLE = NodeRecord("idle")


def _cohort(n: int, **records: NodeRecord) -> dict[str, NodeRecord]:
    nodes = {f"worker{i}": IDLE for i in range(1, n + 1)}
    nodes.update(records)
    return nodes


def _fail(worker: str, what: str = "TaskProlog exit 0", check: str = "test_fails_closed") -> WorkerFailure:
    return WorkerFailure(worker, "T3", check, what)


@pytest.mark.parametrize(
    ("cohort", "share", "limit"),
    [(1, 0.25, 0), (2, 0.25, 1), (3, 0.25, 1), (4, 0.25, 1), (8, 0.25, 2), (64, 0.25, 16), (3, 1.0, 2), (10, 0.3, 3)],
)
def test_the_share_allows_a_quarter_rounded_down_at_least_one_and_never_the_whole_cohort(cohort, share, limit):
    assert share_limit(cohort, share) == limit


def test_one_bad_worker_among_three_is_drained_with_the_run_the_check_and_its_line():
    found = plan("q1", [_fail("worker2", "worker2: TaskProlog\n exit 0 (a task would start)")], _cohort(3), 0.25)
    assert found.drain == {
        "worker2": "slurmflox q1: T3 test_fails_closed: worker2: TaskProlog exit 0 (a task would start)"
    }
    assert not found.refused and not found.already and found.named == ("worker2",)


def test_a_worker_named_by_several_checks_is_drained_once_with_the_first():
    failures = [_fail("worker2", "first"), _fail("worker2", "second", "test_other")]
    assert plan("q1", failures, _cohort(4), 0.25).drain == {"worker2": "slurmflox q1: T3 test_fails_closed: first"}


def test_every_worker_named_is_a_cluster_fault_and_nothing_is_drained():
    found = plan("q2", [_fail(f"worker{i}") for i in (1, 2, 3)], _cohort(3), 0.25)
    assert found.drain == {} and found.named == ("worker1", "worker2", "worker3")
    assert found.refused.startswith("quarantine refused: the per-worker FAILs name 3 of 3 workers")
    assert "more than the share 0.25 allows (1)" in found.refused and "nothing drained" in found.refused


def test_a_worker_drained_already_is_left_as_it_is_and_one_unknown_to_slurm_is_not_touched():
    nodes = _cohort(8, worker3=NodeRecord("drained", "disk replaced by ops"))
    found = plan("q3", [_fail("worker3"), _fail("worker5"), _fail("worker99")], nodes, 0.25)
    assert found.already == {"worker3": "disk replaced by ops"}
    assert list(found.drain) == ["worker5"] and found.named == ("worker3", "worker5")


def test_nothing_named_plans_nothing():
    assert plan("q4", [], _cohort(3), 0.25).drain == {}
    assert plan("q4", [], _cohort(3), 0.25).refused == ""


def test_our_reason_read_back_gives_the_run_and_no_other_reason_does():
    reason = drain_reason("20261206-0411-ab12", _fail("worker2"))
    assert drained_by(reason) == "20261206-0411-ab12"
    for other in ("", "disk replaced", "slurmflox", "slurmflox : x", "Slurmflox q1: x", "slurmflox ../x: y"):
        assert drained_by(other) is None, other
    # the maintenance barrier's own drain (cluster/lifecycle.py) is no quarantine: a re-test never resumes it
    from pytest_slurmflox.cluster.lifecycle import DRAIN_REASON

    assert drained_by(f"{DRAIN_REASON} to sha256:0123456789ab") is None


def test_one_line_collapses_and_cuts():
    assert one_line("a\n  b\tc") == "a b c"
    cut = one_line("x" * 500)
    assert len(cut) == 160 and cut.endswith("...")


@pytest.mark.parametrize("text", ["0", "-1", "1.5", "nan", "a quarter", ""])
def test_a_share_outside_zero_to_one_is_refused_naming_the_rule(text):
    with pytest.raises(ValueError, match=r"not a share of the cohort in \(0, 1\]"):
        parse_share(text)


def test_a_share_in_range_is_read():
    assert parse_share("0.25") == 0.25 and parse_share("1") == 1.0


def _slurm() -> dict[str, NodeRecord]:
    return {
        "worker1": IDLE,
        "worker2": NodeRecord("drained", "slurmflox q1: T3 test_fails_closed: exit 0"),
        "worker3": NodeRecord("drained", "hand drained: fan"),
        "worker4": NodeRecord("draining", "slurmflox q0: TP test_srun: PATH"),
    }


def test_retest_quarantined_is_every_worker_our_reason_names():
    tested, left = retest_set("quarantined", _slurm())
    assert sorted(tested) == ["worker2", "worker4"] and left == {}
    assert quarantined(_slurm()) == tested


def test_retest_by_name_never_takes_a_worker_someone_else_drained():
    tested, left = retest_set("worker2, worker3,worker1,worker9", _slurm())
    assert tested == {"worker1": "", "worker2": "slurmflox q1: T3 test_fails_closed: exit 0"}
    assert "drained by someone else" in left["worker3"] and "never resumed" in left["worker3"]
    assert left["worker9"] == "not a node of the partition"


def test_a_worker_resumes_only_when_nothing_named_it_and_nothing_blocked_the_run():
    assert to_resume(["worker2", "worker4"], {"worker4": "T3: exit 0"}, "") == {
        "worker2": None,
        "worker4": "T3: exit 0",
    }
    blocked = to_resume(["worker2"], {}, "T5 test_salloc FAILED naming no worker")
    assert blocked == {"worker2": "T5 test_salloc FAILED naming no worker"}


FAKE = r"""
import json
import pytest
from pytest_slurmflox.cluster.workerfail import fail_naming
from pytest_slurmflox.model.quarantine import QUARANTINED

pytestmark = pytest.mark.acceptance


@pytest.mark.T3
def test_names_worker2():
    fail_naming("requirement not met: the TaskProlog refuses: worker2: exit 0", {"worker2": "worker2: exit 0"})


@pytest.mark.T5
def test_held_out(request):
    request.node.user_properties.append((QUARANTINED, json.dumps({"worker3": "slurmflox q0: T3 test_x: exit 0"})))
"""


def _run(pytester: pytest.Pytester, tmp_path, run_id: str, *args: str):
    import json

    target = tmp_path / "target.yaml"
    target.write_text("version: 1\nname: fake\nsubstrate: existing\nlogin: {host: 127.0.0.1, port: 22, user: alice}\n")
    pytester.makepyfile(test_fake=FAKE)
    result = pytester.runpytest_inprocess(
        "-p", "no:cacheprovider", f"--slurmflox-target={target}", f"--slurmflox-reports={tmp_path / 'reports'}",
        f"--slurmflox-run-id={run_id}", *args, str(pytester.path),
    )  # fmt: skip
    evidence = tmp_path / "reports" / run_id / "evidence.json"
    return result, evidence, json.loads(evidence.read_text())


def test_a_fail_naming_workers_reaches_the_run_end_as_data_and_without_admin_nothing_is_drained(
    pytester, tmp_path, monkeypatch
):
    """A check's FAIL carries its workers to the run's end (no text parsed); a target without ``admin`` drains
    nothing and the verdict says why; a worker the cohort held out as quarantined is NOT RUN naming it; the
    evidence validates against the schema with its ``quarantine`` block."""
    from pytest_slurmflox.reporting.validation import validate_evidence

    monkeypatch.setenv("SLURMFLOX_WORKDIR", str(tmp_path / "operator"))
    result, path, evidence = _run(pytester, tmp_path, "q-noadmin", "--slurmflox-quarantine")
    out = result.stdout.str()
    assert "slurmflox quarantine: quarantine needs the target's admin endpoint" in out, out
    assert "slurmflox quarantine: worker3 held out of the cohort: slurmflox q0: T3 test_x: exit 0" in out, out
    quarantine = evidence["run"]["quarantine"]
    assert quarantine["actions"] == [] and quarantine["held"] == {"worker3": "slurmflox q0: T3 test_x: exit 0"}
    reasons = evidence["run"]["verdict_reasons"]
    assert any(r.startswith("quarantine needs the target's admin endpoint") for r in reasons), reasons
    assert "NOT RUN on worker3: quarantined (slurmflox q0: T3 test_x: exit 0); re-test it with " in "\n".join(reasons)
    assert validate_evidence(path) == []
    page = (path.parent / "report.html").read_text()
    assert 'id="slurmflox-quarantine"' in page and "held out (NOT RUN)" in page


def test_without_the_option_a_fail_naming_workers_drains_nothing_and_says_nothing(pytester, tmp_path, monkeypatch):
    monkeypatch.setenv("SLURMFLOX_WORKDIR", str(tmp_path / "operator"))
    result, _, evidence = _run(pytester, tmp_path, "q-off")
    assert evidence["run"]["quarantine"]["refused"] == [], evidence["run"]["quarantine"]
    assert "quarantine needs" not in result.stdout.str()


def test_a_share_out_of_range_is_refused_in_one_line_before_anything_runs(pytester, tmp_path, monkeypatch):
    monkeypatch.setenv("SLURMFLOX_WORKDIR", str(tmp_path / "operator"))
    pytester.makepyfile(test_fake=FAKE)
    result = pytester.runpytest_inprocess("--slurmflox-quarantine-share=1.5", str(pytester.path))
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "--slurmflox-quarantine-share: '1.5' is not a share of the cohort in (0, 1]" in result.stderr.str()


def test_sinfo_lines_with_reasons_are_read_whole_and_a_banner_is_no_node():
    from pytest_slurmflox.model.quarantine import parse_nodes

    text = "Welcome to site-a\nworker1|idle|none\nworker2|drained|slurmflox q1: T3 test_x: a|b c\nworker3|mixed|\n"
    nodes = parse_nodes(text)
    assert nodes == {
        "worker1": NodeRecord("idle", ""),
        "worker2": NodeRecord("drained", "slurmflox q1: T3 test_x: a|b c"),
        "worker3": NodeRecord("mixed", ""),
    }
    assert nodes["worker2"].drained and not nodes["worker3"].drained


def test_a_verdict_without_quarantine_is_unchanged_and_one_with_it_is_not_signed_off():
    from pytest_slurmflox.model.quarantine import DRAINED, Action, Outcome, Retest
    from pytest_slurmflox.reporting.quarantine import with_quarantine
    from pytest_slurmflox.reporting.signoff import NOT_SIGNED_OFF, SIGNED_OFF, SignOff

    signed = SignOff(requested=True, verdict=SIGNED_OFF, groups=(), reasons=(), required=())
    assert with_quarantine(signed, Outcome(), {}, None) is signed
    drained = Outcome([Action("worker2", DRAINED, "slurmflox q1: T3 test_x: exit 0", "q1", 0.0)])
    got = with_quarantine(signed, drained, {}, None)
    assert got.verdict == NOT_SIGNED_OFF
    assert got.reasons == ("quarantined by this run: worker2 drained (slurmflox q1: T3 test_x: exit 0)",)
    retest = with_quarantine(signed, Outcome(), {}, Retest("sfx-retest-r1", {"worker2": "slurmflox q1: x"}))
    assert retest.verdict == NOT_SIGNED_OFF and "a re-test covers worker2 only" in retest.reasons[0]


def test_a_retest_without_an_admin_endpoint_is_one_line_and_nothing_runs(pytester, tmp_path, monkeypatch):
    monkeypatch.setenv("SLURMFLOX_WORKDIR", str(tmp_path / "operator"))
    target = tmp_path / "target.yaml"
    target.write_text("version: 1\nname: fake\nsubstrate: existing\nlogin: {host: 127.0.0.1, port: 22, user: alice}\n")
    pytester.makepyfile(test_fake=FAKE)
    result = pytester.runpytest_inprocess(
        f"--slurmflox-target={target}", "--slurmflox-retest=quarantined", "-p", "no:cacheprovider", str(pytester.path)
    )
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "--slurmflox-retest needs the target's admin endpoint (admin:); nothing was run" in result.stderr.str()
