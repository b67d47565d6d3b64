"""The report's timeline (#16): jobs and workers read from a check's evidence, bars relative to the run's start,
one SVG bar per check coloured by verdict, and the sign-off block moved above pytest-html's environment table."""

from __future__ import annotations

import re

from pytest_slurmflox.signoff import Check
from pytest_slurmflox.timeline import (
    COLOURS,
    TOP_END,
    TOP_START,
    bars,
    hoist_top,
    jobs_and_workers,
    name_of,
    timeline_svg,
    wrap,
)


def test_jobs_and_workers_from_sbatch_and_squeue_rows():
    evidence = [
        {"command": "sbatch x.sh", "stdout": "Submitted batch job 41\n"},
        {"command": "squeue", "stdout": "41|RUNNING|None|w0,w1\n42_3|COMPLETED|None|w2\nnoise|x\n"},
    ]
    assert jobs_and_workers(evidence) == (("41", "42"), ("w0", "w1", "w2"))
    assert jobs_and_workers([{"command": "true", "stdout": ""}]) == ((), ())


def test_bars_are_relative_sorted_and_skip_unstarted_checks():
    late = Check("s/test_b", verdict="FAIL", start=110.0, stop=115.0)
    early = Check("s/test_a", start=101.0, stop=170.0, evidence=[{"stdout": "Submitted batch job 7"}])
    never = Check("s/test_c")
    rows = bars([late, early, never], origin=100.0)
    assert [(b.nodeid, b.begin, b.end, b.jobs) for b in rows] == [
        ("s/test_a", 1.0, 70.0, ("7",)),
        ("s/test_b", 10.0, 15.0, ()),
    ]
    svg = timeline_svg(rows)
    assert svg.count("<rect") == 2 and COLOURS["FAIL"] in svg and COLOURS["PASS"] in svg
    assert "jobs 7" in svg and "70.0 s" in svg


def test_hoist_top_moves_the_block_above_the_environment(tmp_path):
    page = tmp_path / "r.html"
    page.write_text(f'<h1>t</h1><div id="environment-header">env</div><p>x</p>{TOP_START}<b>top</b>{TOP_END}<i/>')
    assert hoist_top(page)
    text = page.read_text()
    assert text.index("<b>top</b>") < text.index("environment-header") and text.count("<b>top</b>") == 1
    assert not hoist_top(page)  # already on top: unchanged


def test_wrap_breaks_after_separators_and_keeps_every_character():
    name = "T5 · test_t05.py::test_interactive_srun[partition-debug]"
    lines = wrap(name, 20)
    assert "".join(lines) == name and all(len(line) <= 20 for line in lines)
    assert lines[0] == "T5 · test_t05.py::"  # broken after "::", not inside a word
    assert wrap("x" * 25, 10) == ["x" * 10, "x" * 10, "x" * 5]  # no separator: hard split
    assert wrap("short", 10) == ["short"] and wrap("", 10) == [""]


def test_label_is_the_group_and_whole_test_name_wrapped_in_tspans():
    long = "suites/test_t07_policy.py::test_" + "very_long_" * 12 + "name[p-1]"
    check = Check(long, group="T7", start=101.0, stop=102.0, evidence=[{"stdout": "Submitted batch job 9"}])
    (bar,) = bars([check], origin=100.0)
    assert name_of(bar) == "T7 · test_t07_policy.py::test_" + "very_long_" * 12 + "name[p-1]"
    svg = timeline_svg([bar])
    name_text = svg[svg.index('<text class="sfx-name"') : svg.index("</text>", svg.index('class="sfx-name"'))]
    spans = re.findall(r"<tspan[^>]*>([^<]*)</tspan>", name_text)
    assert len(spans) > 1 and "".join(spans) == name_of(bar)
    assert f"<title>{long}: PASS" in svg  # the full node id on hover
    assert 'class="sfx-meta"' in svg and "jobs 9" in svg
    assert 'text-anchor="end"' not in name_text  # left-aligned: a long name grows right, never off the left edge
