"""The report's timeline (#16): jobs and workers read from a check's evidence, bars relative to the run's start,
one SVG bar per check coloured by verdict, and the sign-off block moved above pytest-html's environment table."""

from __future__ import annotations

from pytest_slurmflox.signoff import Check
from pytest_slurmflox.timeline import COLOURS, TOP_END, TOP_START, bars, hoist_top, jobs_and_workers, timeline_svg


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
