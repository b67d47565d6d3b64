"""The report's timeline: jobs and workers read from a check's evidence, bars relative to the first check's start,
one SVG bar per check coloured by verdict, the up band, ticks, the legend and its classes (valid and styled), lanes
for many checks, and the sign-off block moved above pytest-html's environment table."""

from __future__ import annotations

import itertools
import re
from html.parser import HTMLParser

from pytest_slurmflox.reporting.artifacts import evidence_html, notes_html, report_style, summary_html
from pytest_slurmflox.reporting.profiles import NOT_APPLICABLE
from pytest_slurmflox.reporting.signoff import FAIL, NOT_RUN, PASS, SKIP, Check, decide
from pytest_slurmflox.reporting.timeline import (
    COLOURS,
    FULL_ROWS,
    TOP_END,
    TOP_START,
    bars,
    hoist_top,
    jobs_and_workers,
    name_of,
    timeline_html,
    timeline_svg,
    wrap,
)
from pytest_slurmflox.reporting.timeline_data import STYLES, UP, lanes, tick_label, ticks


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
    drawn = re.findall(r'<g class="sfx-bar ([\w-]+)">.*?<rect [^>]*fill="(#\w+)"', svg)
    assert drawn == [("sfx-pass", COLOURS["PASS"]), ("sfx-fail", COLOURS["FAIL"])]
    assert "jobs 7" in svg and "1.0-70.0 s" in svg and ">70 s</text>" in svg  # the last tick


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


def test_the_timeline_starts_at_the_first_check():
    checks = [Check("s/test_b", start=1300.0, stop=1310.0), Check("s/test_a", start=1000.0 + 250, stop=1260.0)]
    rows = bars(checks)  # no origin: the first check's start is zero, whatever came before it
    assert [(b.nodeid, b.begin, b.end) for b in rows] == [("s/test_a", 0.0, 10.0), ("s/test_b", 50.0, 60.0)]


def test_ticks_every_few_seconds_six_to_twelve_of_them():
    assert ticks(100) == [float(t) for t in range(0, 101, 10)]
    assert ticks(59) == [0, 10, 20, 30, 40, 50] and ticks(3) == [t / 2 for t in range(7)]
    for span in [6, 7.5, 11.9, 24, 33, 59.9, 61, 99, 121, 250, 601, 999, 1800, 3599, 7200, 20000, 86400]:
        marks = ticks(span)
        assert 6 <= len(marks) <= 12, (span, marks)
        assert marks[0] == 0 and marks[-1] <= span and len({round(b - a, 3) for a, b in itertools.pairwise(marks)}) == 1
    assert tick_label(0) == "0 s" and tick_label(2.5) == "2.5 s" and tick_label(90) == "90 s"
    assert tick_label(300) == "5 min"
    svg = timeline_svg(bars([Check("s/t", start=10.0, stop=110.0)]))
    assert [re.sub("<[^>]+>", "", t) for t in re.findall(r"<text [^>]*text-anchor[^>]*>[^<]*</text>", svg)] == [
        f"{t} s" for t in range(0, 101, 10)
    ]


def test_up_is_one_fixed_narrow_labelled_band_left_of_the_first_check():
    rows = bars([Check("s/test_a", start=500.0, stop=530.0)])
    widths = set()
    for up in (5.0, 312.0, 5000.0):
        svg = timeline_svg(rows, up=up)
        band = re.search(r'<g class="sfx-band sfx-up">.*?</g>', svg).group(0)
        widths.add(re.search(r'<rect x="(\d+)" [^>]*width="([\d.]+)"', band).groups())
        assert f">{tick_label(round(up))}</text>" in band and ">up</text>" in band
        bar_x = float(re.search(r'<g class="sfx-bar[^"]*">.*?<rect x="([\d.]+)"', svg).group(1))
        assert bar_x > sum(float(v) for v in next(iter(widths)))  # the first check starts right of the band
    assert len(widths) == 1  # the band's width does not depend on how long the up took
    assert "sfx-up" not in timeline_svg(rows)  # no up in the run: no band, no legend entry
    page = timeline_html([Check("s/test_a", start=500.0, stop=530.0)], up=(100.0, 412.0))
    assert "after 312.0 s of provisioning" in page and "30.0 s from the first check" in page


class _Classes(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.used: set[str] = set()
        self.css = ""
        self._in_style = False

    def handle_starttag(self, tag, attrs):
        self._in_style = tag == "style"
        for name, value in attrs:
            if name == "class" and value:
                self.used.update(value.split())

    def handle_data(self, data):
        if self._in_style:
            self.css += data


def styled_classes(css: str) -> set[str]:
    """Every class a selector of ``css`` names (comments dropped, declarations skipped)."""
    css = re.sub(r"/\*.*?\*/", "", css, flags=re.S)
    selectors = " ".join(re.findall(r"([^{}]+)\{[^{}]*\}", css))
    return set(re.findall(r"\.(-?[_a-zA-Z][_a-zA-Z0-9-]*)", selectors))


def every_verdict_page() -> str:
    """Our whole block as the report writes it, with every verdict, an up band, evidence and notes."""
    checks = [
        Check(f"s/test_{i}.py::test_{v.lower().replace(' ', '_')}", group=f"T{i + 1}", verdict=v, start=100.0 + i)
        for i, v in enumerate((PASS, FAIL, SKIP, NOT_RUN, NOT_APPLICABLE))
    ]
    for check in checks:
        check.stop = check.start + 3
    signoff = decide(checks, requested=True)
    records = [{"command": "sbatch x", "stdout": "x" * 10, "stderr": "e", "stdout_file": "logs/a", "exit_status": 0}]
    return (
        report_style()
        + summary_html(signoff, "r1")
        + timeline_html(checks, up=(0.0, 50.0))
        + notes_html(["[slurmflox 1.0s] local: tfprobe: a line"])
        + evidence_html(records)
    )


def test_every_class_is_a_valid_identifier_and_styled():
    parser = _Classes()
    parser.feed(every_verdict_page())
    valid = re.compile(r"-?[_a-zA-Z][_a-zA-Z0-9-]*")
    assert {"sfx-not-applicable", "sfx-not-run", "sfx-up", "sfx-fail"} <= parser.used
    assert [c for c in parser.used if not valid.fullmatch(c)] == []
    assert sorted(parser.used - styled_classes(parser.css)) == []


def test_the_legend_names_every_kind_of_bar_from_the_one_mapping():
    checks = [Check("s/test_a", verdict=PASS, start=1.0, stop=2.0)]
    svg = timeline_svg(bars(checks), up=40.0)
    legend = re.search(r'<g class="sfx-legend">(.*?)</g></g>', svg).group(0)
    keys = re.findall(r'<g class="sfx-key ([\w-]+)"><rect [^>]*/><text [^>]*>([^<]*)</text>', legend)
    assert keys == [(s.css, s.label) for s in STYLES.values()] + [(UP.css, UP.label)]
    assert {PASS, FAIL, SKIP, NOT_RUN, NOT_APPLICABLE} == set(STYLES)


def test_many_checks_share_lanes_per_group_and_the_picture_stays_short():
    checks = []
    for g in range(17):  # a whole run: 80 checks in 17 groups, two workers side by side
        for i in range(5 if g < 12 else 4):
            begin = 1.0 + 10 * g + 4 * (i // 2)
            checks.append(Check(f"s/test_t{g}.py::test_{i}", group=f"T{g}", start=begin, stop=begin + 3.5))
    rows = bars(checks, origin=0.0)
    packed = lanes(rows)
    assert sorted(b.nodeid for _, lane in packed for b in lane) == sorted(c.nodeid for c in checks)
    for _, lane in packed:  # no two bars of a lane overlap
        assert all(a.end <= b.begin for a, b in itertools.pairwise(lane))
    assert len(packed) < len(rows) / 2
    svg = timeline_svg(rows)
    assert svg.count('class="sfx-bar ') == 80 and float(re.search(r'height="(\d+)"', svg).group(1)) < 600
    assert "T0 · 5 checks" in svg and "T16 · 4 checks" in svg
    assert "test_t3.py::test_4" in svg  # every bar still names its check on hover
    few = timeline_svg(rows[:FULL_ROWS])
    assert few.count('class="sfx-name"') == FULL_ROWS  # up to FULL_ROWS: a row and a whole name each
