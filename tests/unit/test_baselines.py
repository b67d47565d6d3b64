"""The TB judges: declared bands (absolute and percent), units, the cohort median and its outliers."""

from __future__ import annotations

import time

import pytest

from pytest_slurmflox.judges.baselines import (
    BURST_JOBS,
    Sample,
    annotated,
    band,
    best_of,
    burst_jobs,
    declared_problems,
    kind_of,
    median,
    outliers,
    parse_lines,
)


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


def test_a_slow_worker_is_the_one_throughput_outlier():
    samples = [Sample("memory_triad", w, v) for w, v in (("w1", 1000), ("w2", 990), ("w3", 300))]
    assert outliers(samples, {}) == ["memory_triad: w3 is an outlier: 300 MB/s < 0.7 x the cohort median 990"]


def test_a_high_latency_pair_names_the_slow_worker_alone():
    pairs = {"w1->w2": 20, "w2->w3": 90, "w3->w1": 95, "w2->w1": 21, "w3->w2": 92, "w1->w3": 94}
    samples = [Sample("mpi_latency", p, v) for p, v in pairs.items()]
    assert outliers(samples, {}) == ["mpi_latency: w3 is an outlier: 90 us > 1.5 x the cohort median 20"]


def test_thresholds_are_configurable_and_a_declared_metric_is_not_judged_by_the_cohort():
    samples = [Sample("storage_write", w, v) for w, v in (("w1", 100), ("w2", 80))]
    assert outliers(samples, {}) == []
    assert outliers(samples, {}, throughput_ratio=0.95) == [
        "storage_write: w2 is an outlier: 80 MB/s < 0.95 x the cohort median 90"
    ]
    assert outliers(samples, {"storage_write": {"reference": 90, "unit": "MB/s"}}, throughput_ratio=0.95) == []


def test_cluster_wide_metrics_and_a_cohort_of_one_have_no_cohort_verdict():
    samples = [Sample("scheduler_burst", "cluster", 0.1), Sample("memory_triad", "w1", 1.0)]
    assert outliers(samples, {}) == []


def test_samples_carry_unit_subject_and_method_and_lines_parse_only_our_metrics():
    samples = parse_lines(["mpi_bandwidth w1->w2 812.5", "noise", "memory_triad w1 nan?", "x w1 3"])
    assert [s.as_dict()["unit"] for s in samples] == ["MB/s"]
    assert samples[0].as_dict()["over"] == "pair" and "ping-pong" in samples[0].as_dict()["method"]


def test_the_burst_size_comes_from_the_target_else_the_default():
    assert burst_jobs({}) == BURST_JOBS
    assert burst_jobs({"scheduler_burst": {"reference": 5, "unit": "jobs/s", "jobs": 12}}) == 12


def test_annotated_values_carry_the_median_the_band_and_who_the_judges_named():
    samples = [Sample("memory_triad", w, v) for w, v in (("w1", 1000), ("w2", 990), ("w3", 300))]
    samples += [Sample("mpi_latency", "w1->w2", 40.0)]
    declared = {"mpi_latency": {"reference": 1, "unit": "us", "upper": 0.001}}
    out = {(d["metric"], d["subject"]): d for d in annotated(samples, declared)}
    assert out["memory_triad", "w3"]["named"] and not out["memory_triad", "w1"]["named"]
    assert out["memory_triad", "w1"]["median"] == 990 and out["memory_triad", "w1"]["upper"] is None
    assert out["mpi_latency", "w1->w2"]["named"] and out["mpi_latency", "w1->w2"]["upper"] == 0.001


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
    assert outliers(best_of(*slow), {}) == ["memory_triad: w2 is an outlier: 1502 MB/s < 0.7 x the cohort median 15751"]


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


def test_the_cohort_judge_compares_a_worker_only_with_its_kind():
    kinds = {w: frozenset({"cpu"}) for w in ("c1", "c2")} | {w: frozenset({"gpu"}) for w in ("g1", "g2", "g3")}
    values = {"c1": 10000.0, "c2": 10500.0, "g1": 40000.0, "g2": 41000.0, "g3": 40500.0}
    samples = [Sample("memory_triad", w, v) for w, v in values.items()]
    assert outliers(samples, {}, kinds=kinds) == []
    # as one cohort, the CPU nodes would be called slow for being unlike the GPU nodes
    assert [p.split(" is ")[0] for p in outliers(samples, {})] == ["memory_triad: c1", "memory_triad: c2"]
    samples[3] = Sample("memory_triad", "g2", 20000.0)
    assert outliers(samples, {}, kinds=kinds) == [
        "memory_triad: g2 is an outlier: 20000 MB/s < 0.7 x the cohort median of the workers with gpu 40000"
    ]


def test_storage_lines_become_the_best_rate_of_each_worker_from_its_own_pass_count():
    """Every trial, a write's as a read's, says how many times it went through the 32 MiB file in its time."""
    from pytest_slurmflox.suites.test_tb_baselines import STORAGE_MIB, storage_samples

    second = 1_000_000_000
    lines = {
        "w1": [f"storage_write 0 {second} 3", f"storage_write 0 {second} 2", f"storage_read 0 {second} 40"],
        "w2": ["storage_read 5 6", "storage_write 0 x 1", f"storage_write 0 {second // 2}", "prolog says hi"],
    }
    lines["w1"].append(f"storage_read 0 {second} 80")
    lines["w2"].append(f"storage_read 0 {second} 20")
    got = {(s.metric, s.subject): round(s.value, 1) for s in storage_samples(lines)}
    mb = STORAGE_MIB * 1.048576
    assert got == {
        ("storage_write", "w1"): round(3 * mb, 1),  # the faster of its two trials
        ("storage_read", "w1"): round(80 * mb, 1),
        ("storage_read", "w2"): round(20 * mb, 1),  # lines without their pass count, or not numbers, are not read
    }


def test_storage_shell_times_trials_and_waits_for_every_worker_at_a_barrier(tmp_path):
    """The shell the storage check sends, run in bash: :data:`TRIALS` trials, each at least :data:`TRIAL_MS` of
    wall time, each ending in its metric line; a barrier holds each worker until every worker's mark is there (a
    name with a space included), the first one as long as the last one comes later."""
    import subprocess

    from pytest_slurmflox.suites.test_tb_baselines import TRIAL_MS, TRIALS, barrier, timed

    from pytest_slurmflox.base.run import quoted

    said = subprocess.run(["bash", "-c", timed("true", 2, "storage_write")], capture_output=True, text=True).stdout
    trials = [line.split() for line in said.splitlines()]
    assert len(trials) == TRIALS and all(t[0] == "storage_write" and int(t[3]) % 2 == 0 for t in trials), said
    assert all(int(t[2]) - int(t[1]) >= TRIAL_MS * 1_000_000 for t in trials), said

    phase = quoted("%s/run-mark", tmp_path / "shared home") + "-write"
    (tmp_path / "shared home").mkdir()
    script = barrier(phase, ["w1", "w 2"]) + "; date +%s%N"
    first = subprocess.Popen(
        ["bash", "-c", script], env={"PATH": "/usr/bin:/bin", "SLURMD_NODENAME": "w1"}, stdout=subprocess.PIPE
    )
    time.sleep(0.5)
    second = subprocess.run(
        ["bash", "-c", script], env={"PATH": "/usr/bin:/bin", "SLURMD_NODENAME": "w 2"}, capture_output=True
    )
    first_left, second_left = int(first.communicate(timeout=10)[0]), int(second.stdout)
    assert abs(first_left - second_left) < 300_000_000, (first_left, second_left)  # w1 waited for w 2
    assert sorted(m.name for m in (tmp_path / "shared home").iterdir()) == ["run-mark-write-w 2", "run-mark-write-w1"]
