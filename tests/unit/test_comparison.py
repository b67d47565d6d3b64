"""TB over time (judges/comparison.py): figures are medians, a regression beyond the tolerance is a FAIL line, and
a saved baseline is a block the target schema accepts and the same values pass against."""

from __future__ import annotations

import yaml

from pytest_slurmflox.judges.baselines import Sample, declared_problems
from pytest_slurmflox.judges.comparison import baseline_block, compare, evidence_metrics, figures
from pytest_slurmflox.model import targetschema

SAMPLES = [
    Sample("mpi_latency", "worker1->worker2", 20.0),
    Sample("mpi_latency", "worker2->worker1", 22.0),
    Sample("mpi_bandwidth", "worker1->worker2", 900.0),
    Sample("mpi_bandwidth", "worker2->worker1", 1000.0),
    Sample("memory_triad", "worker1", 19000.0),
    Sample("memory_triad", "worker2", 21000.0),
    Sample("scheduler_submit_to_start", "cluster", 0.09),
    Sample("scheduler_burst", "cluster", 3.8),
]


def test_a_runs_figure_is_the_median_of_its_samples_and_unknown_entries_are_ignored():
    entries = [s.as_dict() for s in SAMPLES] + [{"metric": "gpu_flops", "value": 1.0}, {"metric": "mpi_latency"}]
    assert figures(entries) == {
        "mpi_latency": 21.0,
        "mpi_bandwidth": 950.0,
        "memory_triad": 20000.0,
        "scheduler_submit_to_start": 0.09,
        "scheduler_burst": 3.8,
    }
    doc = {"checks": [{"metrics": entries[:2]}, {"nodeid": "x"}]}
    assert evidence_metrics(doc) == entries[:2]


def test_a_regression_beyond_the_tolerance_fails_on_the_side_that_matters():
    before = {"mpi_latency": 20.0, "mpi_bandwidth": 1000.0, "memory_triad": 20000.0}
    now = {"mpi_latency": 41.0, "mpi_bandwidth": 450.0, "memory_triad": 30000.0, "scheduler_burst": 4.0}
    found = {c.metric: c for c in compare(before, now)}
    assert set(found) == {"mpi_latency", "mpi_bandwidth", "memory_triad"}  # only what both runs measured
    assert found["mpi_latency"].regressed and found["mpi_bandwidth"].regressed
    assert not found["memory_triad"].regressed  # faster is never a regression
    line = found["mpi_latency"].line()
    assert line == "mpi_latency: before 20 us, now 41 us, ratio 2.05 (FAIL, regressed beyond x2 of before)"
    assert "ratio 2.00 (within x2" in compare({"mpi_latency": 20.0}, {"mpi_latency": 40.0})[0].line()


def test_a_saved_baseline_is_accepted_by_the_schema_and_the_same_values_pass_against_it():
    text = baseline_block(figures(s.as_dict() for s in SAMPLES), run_id="r1", burst_jobs=20)
    assert text.startswith("# expect.performance from run r1")
    block = yaml.safe_load(text)["expect"]["performance"]
    assert block["mpi_bandwidth"] == {"reference": 950.0, "unit": "MB/s", "lower": "50%"}
    assert block["mpi_latency"] == {"reference": 21.0, "unit": "us", "upper": 42.0}
    assert block["scheduler_submit_to_start"]["upper"] == 0.59  # the absolute slack, not x2 of 0.09 s
    assert block["scheduler_burst"]["jobs"] == 20
    doc = {"version": 1, "name": "site", "substrate": "existing", "login": {"host": "login.example", "user": "a"},
           "expect": {"performance": block}}  # fmt: skip
    assert targetschema.problems(doc) == []
    assert declared_problems(SAMPLES, block) == []
    slower = [Sample("memory_triad", "worker2", 9000.0)]
    assert declared_problems(slower, block) == [
        "memory_triad worker2: 9000 MB/s outside [10000, inf] MB/s (reference 20000)"
    ]
