"""The TB judges' declared side: bands (absolute, percent, the default of a reference without one), units, rounds."""

from __future__ import annotations

import pytest

from pytest_slurmflox.judges.baselines import (
    BURST_JOBS,
    Sample,
    band,
    best_of,
    burst_jobs,
    declared_problems,
    default_band,
    kind_of,
    median,
    parse_lines,
)
from pytest_slurmflox.judges.outliers import judge


def test_percent_bounds_are_shares_of_the_reference():
    b = band({"reference": 100, "unit": "us", "lower": "10%", "upper": "30%"})
    assert (b.lower, b.upper) == (pytest.approx(90.0), pytest.approx(130.0))


def test_absolute_bounds_are_the_bounds_and_a_missing_side_is_unbounded():
    b = band({"reference": 5, "unit": "us", "upper": 0.001})
    assert (b.lower, b.upper) == (None, 0.001)
    assert b.holds(-1e9) and not b.holds(0.002)


def test_a_bound_that_is_neither_number_nor_percent_is_refused():
    with pytest.raises(ValueError, match="percent"):
        band({"reference": 5, "unit": "us", "upper": "lots"})


def test_a_band_that_cannot_hold_names_the_metric_each_pair_the_value_and_the_band():
    samples = [Sample("mpi_latency", "w1->w2", 40.0), Sample("mpi_latency", "w2->w1", 42.0)]
    problems = declared_problems(samples, {"mpi_latency": {"reference": 1, "unit": "us", "upper": 0.001}})
    assert problems == [
        "mpi_latency w1->w2: 40 us outside [-inf, 0.001] us (reference 1)",
        "mpi_latency w2->w1: 42 us outside [-inf, 0.001] us (reference 1)",
    ]


def test_a_declared_unit_other_than_the_metrics_own_is_a_problem():
    samples = [Sample("memory_triad", "w1", 5000.0)]
    assert declared_problems(samples, {"memory_triad": {"reference": 5, "unit": "GB/s"}}) == [
        "memory_triad: declared in GB/s, measured in MB/s"
    ]


def test_inside_the_band_and_undeclared_metrics_carry_no_declared_verdict():
    samples = [Sample("memory_triad", "w1", 5000.0), Sample("storage_read", "w1", 1.0)]
    assert declared_problems(samples, {"memory_triad": {"reference": 5000, "unit": "MB/s", "lower": "20%"}}) == []


def test_the_median_of_an_even_count_is_the_mean_of_the_middle_two():
    assert median([1.0, 3.0, 10.0, 2.0]) == 2.5
    assert median([4.0, 1.0, 9.0]) == 4.0


def test_samples_carry_unit_subject_and_method_and_lines_parse_only_our_metrics():
    samples = parse_lines(["mpi_bandwidth w1->w2 812.5", "noise", "memory_triad w1 nan?", "x w1 3"])
    assert [s.as_dict()["unit"] for s in samples] == ["MB/s"]
    assert samples[0].as_dict()["over"] == "pair" and "one-way stream" in samples[0].as_dict()["method"]


def test_the_burst_size_comes_from_the_target_else_the_default():
    assert burst_jobs({}) == BURST_JOBS
    assert burst_jobs({"scheduler_burst": {"reference": 5, "unit": "jobs/s", "jobs": 12}}) == 12


def test_rounds_keep_each_subjects_best_value_by_the_metrics_direction_and_invent_none():
    first = [Sample("memory_triad", "w1", 30000.0), Sample("memory_triad", "w2", 12000.0)]
    second = [Sample("memory_triad", "w1", 28000.0), Sample("memory_triad", "w2", 29000.0)]
    latency = [Sample("mpi_latency", "w1->w2", 9.0)], [Sample("mpi_latency", "w1->w2", 4.0)]
    assert best_of(first, second) == [Sample("memory_triad", "w1", 30000.0), Sample("memory_triad", "w2", 29000.0)]
    assert best_of(*latency) == [Sample("mpi_latency", "w1->w2", 4.0)]
    # a worker missing from a later round keeps its own value; a round adds no worker it did not measure
    assert best_of(first, second[:1]) == first
    assert {s.subject for s in best_of(first, [])} == {"w1", "w2"}
    # a worker slow in every round stays slow: the cohort judge still names it
    slow = [[Sample("memory_triad", "w1", 30000.0 - r), Sample("memory_triad", "w2", 1500.0 + r)] for r in range(3)]
    assert judge(best_of(*slow)).problems == [
        "memory_triad: w2 is an outlier: 1502 MB/s < 0.7 x the median of the other workers 30000"
    ]


def test_a_worker_kind_is_its_features_and_partitions():
    node = {"NodeName": "gpu1", "AvailableFeatures": "gpu,a100", "Partitions": "gpu,all"}
    assert kind_of(node) == frozenset({"gpu", "a100", "all"})
    assert kind_of({"AvailableFeatures": "(null)", "Partitions": "all"}) == frozenset({"all"})
    assert kind_of({}) == frozenset()


def test_a_heterogeneous_cluster_is_judged_by_each_kinds_own_band():
    kinds = {"c1": frozenset({"all"}), "c2": frozenset({"all"}), "g1": frozenset({"gpu", "all"})}
    declared = {"memory_triad": {"reference": 10000, "unit": "MB/s", "lower": "30%",
                                 "features": {"gpu": {"reference": 40000}}}}  # fmt: skip
    healthy = [Sample("memory_triad", "c1", 9800.0), Sample("memory_triad", "c2", 10100.0),
               Sample("memory_triad", "g1", 39000.0)]  # fmt: skip
    assert declared_problems(healthy, declared, kinds) == []
    slow_gpu = [*healthy[:2], Sample("memory_triad", "g1", 12000.0)]  # fine for a CPU node, slow for a GPU node
    assert declared_problems(slow_gpu, declared, kinds) == [
        "memory_triad g1: 12000 MB/s outside [28000, inf] MB/s (reference 40000, for feature gpu)"
    ]
    assert declared_problems(slow_gpu, declared) == []  # without kinds, every worker has the metric's own band


def test_a_reference_without_a_band_gets_the_default_on_the_side_that_matters():
    """Throughput -20%; latency +30% or +10 us (0.5 s for a scheduler time), whichever is more."""
    from pytest_slurmflox.judges.baselines import METRICS

    assert band({"reference": 20000, "unit": "MB/s"}, METRICS["memory_triad"]).lower == pytest.approx(16000)
    assert band({"reference": 20000, "unit": "MB/s"}, METRICS["memory_triad"]).upper is None
    assert band({"reference": 2, "unit": "us"}, METRICS["mpi_latency"]).upper == pytest.approx(12)
    assert band({"reference": 100, "unit": "us"}, METRICS["mpi_latency"]).upper == pytest.approx(130)
    assert default_band(1.0, "s", METRICS["scheduler_submit_to_start"]).upper == pytest.approx(1.5)
    # one side given: the other stays open, as declared
    assert band({"reference": 100, "unit": "us", "lower": 50}, METRICS["mpi_latency"]).upper is None


def test_a_reference_only_entry_bounds_a_worker_at_fifty_against_twenty_thousand():
    samples = [Sample("memory_triad", "w1", 19500.0), Sample("memory_triad", "w2", 50.0)]
    assert declared_problems(samples, {"memory_triad": {"reference": 20000, "unit": "MB/s"}}) == [
        "memory_triad w2: 50 MB/s outside [16000, inf] MB/s (reference 20000, the default band of a reference "
        "declared without one)"
    ]
