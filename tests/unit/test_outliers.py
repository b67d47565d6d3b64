"""TB's cohort judge (judges/outliers.py) over replayed figures: each worker against the median of the others, kinds
only where declared, switch groups from Slurm's topology, links attributed to a worker or a pair, and what judged
each metric (judged by nothing said, never silently passed)."""

from __future__ import annotations

from pytest_slurmflox.judges.baselines import Sample
from pytest_slurmflox.judges.outliers import BY_BAND, BY_COHORT, ONE_LINK_BASELINE, Ratios, assess, judge, switches_of


def _workers(metric: str, **values: float) -> list[Sample]:
    return [Sample(metric, w, v) for w, v in values.items()]


def _pairs(metric: str, values: dict[str, float]) -> list[Sample]:
    return [Sample(metric, p, v) for p, v in values.items()]


def test_three_workers_of_three_racks_still_name_the_slow_one():
    """Features the target does not declare as kinds never split the cohort: rack1..rack3 are one cohort."""
    kinds = {"w1": frozenset({"rack1"}), "w2": frozenset({"rack2"}), "w3": frozenset({"rack3"})}
    found = judge(_workers("memory_triad", w1=20000, w2=19000, w3=900), kinds=kinds)
    assert found.problems == ["memory_triad: w3 is an outlier: 900 MB/s < 0.7 x the median of the other workers 19500"]
    assert found.named == {("memory_triad", "w3")}


def test_with_two_workers_the_median_is_the_other_one_not_a_mean_with_itself():
    """0.7 x the other: 0.6 of its peer is slow (the old median with itself in it let 0.54 pass)."""
    assert judge(_workers("memory_triad", w1=1000, w2=600)).problems == [
        "memory_triad: w2 is an outlier: 600 MB/s < 0.7 x the median of the other workers 1000"
    ]
    assert judge(_workers("memory_triad", w1=1000, w2=750)).problems == []


def test_declared_kinds_split_the_cohort_and_a_worker_alone_of_its_kind_is_said_unjudged():
    declared = {"memory_triad": {"reference": 10000, "unit": "MB/s", "features": {"gpu": {"reference": 40000}}}}
    kinds = {w: frozenset({"cpu"}) for w in ("c1", "c2")} | {w: frozenset({"gpu"}) for w in ("g1", "g2", "g3")}
    samples = _workers("memory_triad", c1=10000, c2=10500, g1=40000, g2=41000, g3=40500)
    assert judge(samples, declared, kinds=kinds).problems == []
    samples[3] = Sample("memory_triad", "g2", 20000.0)
    assert judge(samples, declared, kinds=kinds).problems == [
        "memory_triad: g2 is an outlier: 20000 MB/s < 0.7 x the median of the other workers of kind gpu 40250"
    ]
    lonely = judge(_workers("memory_triad", c1=10000, c2=10500, g1=100), declared, kinds=kinds)
    assert lonely.problems == [] and lonely.unjudged == {
        "memory_triad": ["g1 is the only worker of kind gpu: no other to compare with"]
    }


def test_slurms_topology_gives_switch_groups_judged_among_themselves_too():
    text = (
        "SwitchName=s0 Level=0 LinkSpeed=1 Nodes=w[1-3] Switches=(null)\n"
        "SwitchName=s1 Level=0 LinkSpeed=1 Nodes=w[4-6]\n"
        "SwitchName=top Level=1 LinkSpeed=1 Nodes=w[1-6] Switches=s[0-1]\n"
    )
    switches = switches_of(text)
    assert switches == {"w1": "s0", "w2": "s0", "w3": "s0", "w4": "s1", "w5": "s1", "w6": "s1"}
    assert switches_of("Topology plugin may not be configured") == {}
    assert switches_of("BlockName=b1 BlockIndex=0 Nodes=w[1-2] BlockSize=2") == {"w1": "b1", "w2": "b1"}
    # s1's workers are faster as a group (a newer generation), w4 far below its switch peers yet above the cohort's
    # slower half: only its switch group sees it
    samples = _workers("memory_triad", w1=10000, w2=10000, w3=10000, w4=13000, w5=20000, w6=20000)
    assert judge(samples).problems == []
    assert judge(samples, switches=switches).problems == [
        "memory_triad: w4 is an outlier: 13000 MB/s < 0.7 x the median of the other workers of switch s1 20000"
    ]


def test_a_worker_every_link_of_which_is_slow_is_named_alone():
    latency = {"w1->w2": 100, "w2->w3": 100, "w3->w4": 20, "w4->w1": 21}
    latency |= {"w2->w1": 101, "w3->w2": 99, "w4->w3": 19, "w1->w4": 20}
    found = judge(_pairs("mpi_latency", latency))
    assert found.problems == [
        "mpi_latency: w2 is an outlier: every link of it is slow (w1-w2 100, w2-w3 99 us > 1.5 x (and +10 us) the "
        "median of the links without it 19.5)"
    ]
    sending = {"w1->w2": 1000, "w2->w3": 100, "w3->w1": 1000, "w2->w1": 110, "w3->w2": 1000, "w1->w3": 1000}
    found = judge(_pairs("mpi_bandwidth", sending))
    assert [p.split(":")[1].strip() for p in found.problems] == ["w2 is an outlier"]
    assert found.named == {("mpi_bandwidth", "w2->w3"), ("mpi_bandwidth", "w2->w1")}


def test_one_slow_link_among_three_workers_names_the_pair_not_a_worker():
    """A one-way pair among three workers is named; a round trip's single slow pair (four workers) is left to its band
    (a healthy pair measured 112.8 us against the others' 21.9 on a loaded 2-core host), said as such, and names no
    worker."""
    latency = {"w1->w2": 112.8, "w2->w3": 20, "w3->w4": 20, "w4->w1": 21.9}
    latency |= {"w2->w1": 101, "w3->w2": 19, "w4->w3": 21, "w1->w4": 20.5}
    found = judge(_pairs("mpi_latency", latency))
    assert found.problems == [] and found.unjudged["mpi_latency"][0].startswith("a single pair's round trip")
    one_way = {"w1->w2": 50, "w2->w3": 1000, "w3->w1": 990, "w2->w1": 1010, "w3->w2": 1000, "w1->w3": 1000}
    assert judge(_pairs("mpi_bandwidth", one_way)).problems == [
        "mpi_bandwidth: pair w1->w2 is slow: 50 MB/s < 0.7 x the median of the other pairs 1000"
    ]


def test_two_workers_a_slow_direction_fails_naming_the_pair_and_which_end_cannot_be_told():
    found = judge(_pairs("mpi_bandwidth", {"w1->w2": 100, "w2->w1": 1000}))
    assert found.problems == [
        "mpi_bandwidth: pair w1->w2 is slow: 100 MB/s < 0.7 x the other direction w2->w1 1000 (two workers: which "
        "end, w1 sending or w2 receiving, cannot be told)"
    ]
    healthy = judge(_pairs("mpi_bandwidth", {"w1->w2": 900, "w2->w1": 1000}))
    assert healthy.problems == [] and "mpi_bandwidth" in healthy.judged
    # a round trip is the same both ways: nothing to compare it with, and that is said
    latency = judge(_pairs("mpi_latency", {"w1->w2": 500, "w2->w1": 510}))
    assert latency.problems == [] and latency.unjudged == {
        "mpi_latency": ["two workers: one round trip over the only link, no other link to compare with"]
    }


def test_the_ratios_are_the_configured_ones():
    samples = _workers("storage_write", w1=100, w2=80)
    assert judge(samples).problems == []
    assert judge(samples, ratios=Ratios(throughput=0.95)).problems == [
        "storage_write: w2 is an outlier: 80 MB/s < 0.95 x the median of the other workers 100"
    ]


def test_a_declared_reference_never_switches_the_cohort_off_and_both_judges_are_recorded():
    """A worker at 50 MB/s against a reference of 20000 with no band: the default band names it, and so does the
    cohort; the evidence says both judged the metric."""
    declared = {"memory_triad": {"reference": 20000, "unit": "MB/s"}}
    found = assess(_workers("memory_triad", w1=19800, w2=20100, w3=50), declared)
    assert [p.split(":")[0] for p in found.problems] == ["memory_triad w3", "memory_triad"]
    assert found.judged_by == {"memory_triad": [BY_BAND, BY_COHORT]} and found.unjudged == {}
    w3 = next(r for r in found.records if r["subject"] == "w3")
    assert w3["named"] and w3["lower"] == 16000 and w3["judged_by"] == [BY_BAND, BY_COHORT]


def test_metrics_nothing_judged_are_listed_with_the_reason():
    """A uniformly slow cluster with no reference: the cohort finds no outlier, the cluster-wide values have no
    cohort at all; every such metric is said to be judged by nothing, never passed in silence."""
    samples = [*_workers("memory_triad", w1=900), Sample("scheduler_burst", "cluster", 0.2)]
    found = assess(samples, {})
    assert found.problems == [] and found.judged_by == {"memory_triad": [], "scheduler_burst": []}
    assert found.lines() == [
        "memory_triad: judged by nothing (no reference declared; w1 is the only worker of the cohort: no other to "
        "compare with)",
        "scheduler_burst: judged by nothing (no reference declared; one value for the cluster: no cohort to compare "
        "with)",
    ]
    declared = {"scheduler_burst": {"reference": 5, "unit": "jobs/s", "lower": "50%"}}
    found = assess(samples, declared)
    assert found.judged_by["scheduler_burst"] == [BY_BAND] and "scheduler_burst" not in found.unjudged
    assert found.problems == ["scheduler_burst cluster: 0.2 jobs/s outside [2.5, inf] jobs/s (reference 5)"]


def test_where_tb_is_required_a_metric_nothing_judged_makes_the_check_not_run():
    """A sign-off of a target that declares expect.performance: a figure nothing judged is no PASS; elsewhere the
    same figure is only said."""
    samples = [*_workers("memory_triad", w1=900, w2=880), Sample("scheduler_burst", "cluster", 0.2)]
    found = assess(samples, {"memory_triad": {"reference": 1000, "unit": "MB/s", "lower": "20%"}})
    assert found.not_run(required=False) == ""
    assert found.not_run(required=True) == (
        "nothing could judge scheduler_burst (no reference declared; one value for the cluster: no cohort to compare "
        "with): declare a reference for it in expect.performance"
    )
    both = assess(samples, {"scheduler_burst": {"reference": 0.1, "unit": "jobs/s"}})
    assert both.not_run(required=True) == "" and both.problems == []


def test_a_latency_is_slow_only_past_the_ratio_and_the_absolute_slack_too():
    """Measured on a loaded 2-core host, three healthy workers: one pair's 8-byte round trip at 21.9 us against the
    others' 12.3 (1.78x) is scheduling; a worker both links of which are past 1.5 x and +10 us is named."""
    from pytest_slurmflox.judges.baselines import METRICS

    ratios = Ratios()
    assert not ratios.slow(METRICS["mpi_latency"], 21.9, 12.3) and ratios.slow(METRICS["mpi_latency"], 40.0, 12.3)
    slow = {"w1->w2": 40.0, "w2->w3": 41.0, "w3->w4": 12.4, "w4->w1": 12.2}
    slow |= {"w2->w1": 39.0, "w3->w2": 42.0, "w4->w3": 12.3, "w1->w4": 12.1}
    assert [p.split(" is ")[0] for p in judge(_pairs("mpi_latency", slow)).problems] == ["mpi_latency: w2"]


def test_three_workers_name_no_worker_by_round_trip_one_link_is_no_baseline():
    """The clean-clone CI of 06 Dec 2026: three healthy workers on a loaded 2-core host, worker3's 8-byte round trips
    (best of three rounds) 83.2 and 56.0 us against the third link's 22.6: a vote of one link named worker3. At
    three workers a round trip is judged by its declared band only, and says so."""
    ci = {"w1->w2": 23.207, "w2->w3": 56.028, "w3->w1": 135.113, "w1->w3": 83.184, "w2->w1": 22.621, "w3->w2": 162.499}
    found = judge(_pairs("mpi_latency", ci))
    assert found.problems == [] and found.unjudged["mpi_latency"] == [ONE_LINK_BASELINE]


def test_one_fast_worker_does_not_make_the_rest_outliers():
    """A loaded host gave one of three healthy workers idle cores for its trials (CI: 30490 MB/s against 12748 and
    12339): most of the group slow against the rest is one fast worker, not a slow majority; one slow worker of three
    is still named."""
    assert judge(_workers("memory_triad", w1=12748, w2=30490, w3=12339)).problems == []
    assert [p.split(":")[1] for p in judge(_workers("memory_triad", w1=20000, w2=30490, w3=9000)).problems] == [
        " w3 is an outlier"
    ]
