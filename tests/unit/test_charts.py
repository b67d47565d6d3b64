"""TB's pictures in the HTML report (reporting/charts.py): a bar per worker or pair, the median, the band, the named
subject in the failure colour, cluster-wide values as text, everything escaped, no script."""

from __future__ import annotations

import xml.etree.ElementTree as ET

from pytest_slurmflox.judges.baselines import Sample
from pytest_slurmflox.judges.outliers import assess
from pytest_slurmflox.reporting.charts import BAD, BAND, OK, charts_html, metric_svg


def _values(declared=None):
    samples = [Sample("memory_triad", w, v) for w, v in (("w1", 1000), ("w2", 990), ("w3", 300))]
    samples.append(Sample("scheduler_burst", "cluster", 3.8))
    return assess(samples, declared or {}).records


def test_one_bar_per_worker_the_outlier_in_the_failure_colour_and_the_median_dashed():
    svg = ET.fromstring(metric_svg([v for v in _values() if v["metric"] == "memory_triad"]))
    ns = "{http://www.w3.org/2000/svg}"
    bars = {r.find(f"{ns}title").text.split(":")[0]: r.get("fill") for r in svg.iter(f"{ns}rect")}
    assert bars == {"w1": OK, "w2": OK, "w3": BAD}
    assert [line.get("stroke-dasharray") for line in svg.iter(f"{ns}line")] == ["4 3"]


def test_a_declared_band_is_drawn_and_cluster_values_are_text_and_nothing_is_scripted():
    page = charts_html(_values({"memory_triad": {"reference": 1000, "unit": "MB/s", "lower": "10%"}}))
    assert f'fill="{BAND}"' in page and "<script" not in page
    burst = "<b>scheduler_burst (jobs/s, N one-task sbatch jobs, submitted to all ended)</b>: 3.8 jobs/s"
    assert f'{burst}; <span style="color:{BAD}">judged by nothing</span>' in page
    assert "; judged by reference band and cohort</p>" in page  # memory_triad: both judges, always
    assert charts_html([]) == ""


def test_every_text_is_escaped():
    hostile = [{**_values()[0], "subject": "<w1&>"}]
    assert "&lt;w1&amp;&gt;" in metric_svg(hostile) and "<w1&>" not in metric_svg(hostile)
