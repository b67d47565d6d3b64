"""The report as a reader sees it (issue 25, item 7): the sign-off summary's text is readable (WCAG AA contrast,
at least 4.5:1 for normal text, from the colours Chromium computed) and the timeline shows each check's whole name
(group and test name, wrapped inside the picture, never cut off on the left), with the full node id as a tooltip.

A real report is written by a pytester run of the plugin (no cluster); a copy of it gets a small script that
writes what the browser computed (colours, label boxes, label texts) into the DOM, which headless Chromium dumps.
A PNG screenshot of the report is kept in the test's tmp path for a human to look at.
"""

from __future__ import annotations

import itertools
import json
import re
import struct
import zlib
from pathlib import Path

from browser import chromium_dom, screenshot

WINDOW = (1280, 1600)
LONG_TEST = "test_a_check_whose_name_is_long_enough_that_it_never_fits_on_one_line_of_the_timeline_labels"
PARAM = "partition-debug-with-a-long-parameter-value"

FAKE_SUITE = f"""
import pytest

@pytest.mark.acceptance
@pytest.mark.T3
def test_ok():
    pass

@pytest.mark.acceptance
@pytest.mark.T5
@pytest.mark.parametrize("where", ["{PARAM}"])
def {LONG_TEST}(where):
    pytest.skip("missing capability kubernetes: none in this fake")
"""

#: Runs in the page after its own scripts: every text-bearing element of the sign-off block, the timeline and the
#: environment table (built by pytest-html's script) with
#: its colour (``fill`` for SVG text) and the first opaque background behind it, and every timeline bar's label box.
MEASURE = """
<script>
window.addEventListener("load", () => {
  const background = (el) => {
    for (let e = el; e; e = e.parentElement) {
      const bg = getComputedStyle(e).backgroundColor;
      if (bg && !/rgba\\(.*, 0\\)$/.test(bg) && bg !== "transparent") return bg;
    }
    return "rgb(255, 255, 255)";
  };
  const texts = [];
  for (const root of document.querySelectorAll("#slurmflox-signoff, #slurmflox-timeline, #environment")) {
    for (const el of [root, ...root.querySelectorAll("*")]) {
      const own = [...el.childNodes].filter((n) => n.nodeType === 3).map((n) => n.data).join("").trim();
      if (!own) continue;
      const style = getComputedStyle(el);
      const svg = el instanceof SVGElement;
      texts.push({tag: el.tagName, text: own.slice(0, 60), color: svg ? style.fill : style.color,
                  background: background(el)});
    }
  }
  const box = (el) => { const r = el.getBoundingClientRect();
                        return {left: r.left, right: r.right, top: r.top, bottom: r.bottom}; };
  const svg = document.querySelector("#slurmflox-timeline svg");
  const labels = [...document.querySelectorAll("#slurmflox-timeline g.sfx-bar")].map((g) => ({
    text: g.querySelector("text").textContent,
    box: box(g.querySelector("text")),
    bar: box(g.querySelector("rect")),
    title: (g.querySelector("title") || {}).textContent || "",
  }));
  const out = document.createElement("script");
  out.type = "application/json";
  out.id = "sfx-measured";
  out.textContent = JSON.stringify({texts, labels, svg: svg ? box(svg) : null, width: window.innerWidth});
  document.body.appendChild(out);
});
</script>
"""


def _rgb(css: str) -> tuple[float, float, float, float]:
    values = [float(v) for v in re.findall(r"[\d.]+", css)]
    assert len(values) in (3, 4), f"not a computed colour: {css!r}"
    return values[0], values[1], values[2], values[3] if len(values) == 4 else 1.0


def _luminance(rgb: tuple[float, float, float]) -> float:
    """WCAG 2.x relative luminance (https://www.w3.org/TR/WCAG21/#dfn-relative-luminance)."""

    def channel(c: float) -> float:
        c /= 255.0
        return c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4

    r, g, b = (channel(c) for c in rgb)
    return 0.2126 * r + 0.7152 * g + 0.0722 * b


def contrast(foreground: str, background: str) -> float:
    """WCAG contrast ratio of a computed text colour (blended over its background when translucent)."""
    fr, fg, fb, alpha = _rgb(foreground)
    br, bg, bb, _ = _rgb(background)
    blended = (fr * alpha + br * (1 - alpha), fg * alpha + bg * (1 - alpha), fb * alpha + bb * (1 - alpha))
    lighter, darker = sorted((_luminance(blended), _luminance((br, bg, bb))), reverse=True)
    return (lighter + 0.05) / (darker + 0.05)


def test_contrast_ratio_matches_wcag_examples():
    assert round(contrast("rgb(0, 0, 0)", "rgb(255, 255, 255)"), 2) == 21.0
    assert round(contrast("rgb(153, 153, 153)", "rgb(255, 255, 255)"), 2) == 2.85  # #999, pytest-html's body text
    assert round(contrast("rgb(118, 118, 118)", "rgb(255, 255, 255)"), 2) == 4.54  # #767676, the AA threshold grey


def png_facts(path: Path) -> tuple[int, int, int]:
    """(width, height, distinct byte values of the decompressed image data) of a PNG, read by hand."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG"
    width, height = struct.unpack(">II", data[16:24])
    idat, pos = b"", 8
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos : pos + 4])
        if data[pos + 4 : pos + 8] == b"IDAT":
            idat += data[pos + 8 : pos + 8 + length]
        pos += 12 + length
    return width, height, len(set(zlib.decompress(idat)))


def _report(pytester, tmp_path: Path) -> Path:
    pytester.makepyfile(test_fake=FAKE_SUITE)
    reports = tmp_path / "reports"
    pytester.runpytest_inprocess(
        "-p", "no:cacheprovider", "-m", "acceptance", f"--slurmflox-reports={reports}", "--slurmflox-run-id=view1"
    )
    page = reports / "view1" / "report.html"
    assert page.is_file(), "the run wrote no report.html"
    return page


def _measured(page: Path) -> dict:
    probe = page.with_name("report-measured.html")
    text = page.read_text(encoding="utf-8")
    probe.write_text(text.replace("</body>", MEASURE + "</body>", 1), encoding="utf-8")
    dom = chromium_dom(probe, WINDOW)
    match = re.search(r'<script type="application/json" id="sfx-measured">(.*?)</script>', dom, re.S)
    assert match, "the measuring script wrote nothing (did the page load?)"
    return json.loads(match.group(1))


def contrast_problems(texts: list[dict]) -> list[str]:
    """Every measured text below WCAG AA's 4.5:1 for normal text, named with its colours and ratio."""
    return [
        f"{t['tag']} {t['text']!r}: {t['color']} on {t['background']} = {contrast(t['color'], t['background']):.2f}"
        for t in texts
        if contrast(t["color"], t["background"]) < 4.5
    ]


def label_problems(measured: dict, expected: set[str]) -> list[str]:
    """What is wrong with the timeline's labels: not the whole names, cut off, over the bars, overlapping, or a
    tooltip without the node id."""
    svg, labels = measured["svg"], measured["labels"]
    if not svg or len(labels) != len(expected):
        return [f"timeline missing or not one bar per check: {labels}"]
    problems = []
    names = {label["text"] for label in labels}
    if names != expected:
        problems.append(f"labels are not the whole names: {sorted(names)}, expected {sorted(expected)}")
    plot_left = min(label["bar"]["left"] for label in labels)
    for label in labels:
        box = label["box"]
        if box["left"] < max(0.0, svg["left"]) - 0.5:
            problems.append(f"label cut off on the left (svg starts at {svg['left']}): {label}")
        if box["right"] > min(plot_left, measured["width"]) + 0.5:
            problems.append(f"label runs into the bars (plot starts at {plot_left}): {label}")
        if box["top"] < svg["top"] - 0.5 or box["bottom"] > svg["bottom"] + 0.5:
            problems.append(f"label cut off at the top or bottom: {label}")
        if label["text"].split(" · ", 1)[-1] not in label["title"]:
            problems.append(f"tooltip lacks the node id: {label}")
    ordered = sorted((label["box"] for label in labels), key=lambda b: b["top"])
    problems += [f"labels overlap: {a} {b}" for a, b in itertools.pairwise(ordered) if a["bottom"] > b["top"] + 0.5]
    return problems


def test_summary_is_readable_and_timeline_shows_whole_names(pytester, tmp_path):
    page = _report(pytester, tmp_path)
    measured = _measured(page)
    # a screenshot a human can look at, kept next to the report in the test's tmp path
    png = screenshot(page, tmp_path / "report.png", WINDOW)
    width, height, distinct = png_facts(png)
    assert (width, height) == WINDOW and distinct > 16, f"screenshot looks empty: {width}x{height}, {distinct}"
    print(f"screenshot: {png}")

    measured_texts = {t["text"] for t in measured["texts"]}
    for seen in ("T3", "Requirement", "view1", "evidence.json"):  # summary, its links, environment rows
        assert seen in measured_texts, f"{seen!r} not measured: {sorted(measured_texts)}"
    expected = {"T3 · test_fake.py::test_ok", f"T5 · test_fake.py::{LONG_TEST}[{PARAM}]"}
    problems = contrast_problems(measured["texts"]) + label_problems(measured, expected)
    assert not problems, "the report is hard to read:\n" + "\n".join(problems)


FIRST_SCREEN = (1400, 900)
#: a run of many checks in many groups: every required group shows in the summary table, the timeline draws lanes
MANY_CHECKS = "import pytest\n" + "".join(
    f"""
@pytest.mark.acceptance
@pytest.mark.{group}
@pytest.mark.parametrize("n", range(4))
def test_{group.lower()}(n):
    if n == 3:
        pytest.skip("missing capability kubernetes: none in this fake")
"""
    for group in ("T1", "T2", "T3", "T4", "T5", "T6", "T7", "T8", "T9", "T10", "T11")
)

#: Runs in the page after its own scripts: where the verdict, the summary table, the timeline's first bars and the
#: results table are drawn (viewport pixels at the top of the page).
PLACES = """
<script>
window.addEventListener("load", () => {
  const box = (el) => { if (!el) return null; const r = el.getBoundingClientRect();
                        return {left: r.left, right: r.right, top: r.top, bottom: r.bottom}; };
  const bars = [...document.querySelectorAll("#slurmflox-timeline g.sfx-bar rect")].map(box)
    .sort((a, b) => a.left - b.left || a.top - b.top);
  const out = document.createElement("script");
  out.type = "application/json";
  out.id = "sfx-places";
  out.textContent = JSON.stringify({
    verdict: box(document.querySelector("#slurmflox-verdict")),
    groups: box(document.querySelector("#slurmflox-groups")),
    legend: box(document.querySelector("#slurmflox-timeline .sfx-legend")),
    bars: bars.slice(0, 3),
    results: box(document.querySelector("#results-table")),
  });
  document.body.appendChild(out);
});
</script>
"""


def test_the_first_screen_shows_the_verdict_the_summary_and_the_first_checks(pytester, tmp_path):
    """At 1400x900 (one laptop screen) the verdict, the whole summary table and the timeline's first checks are
    drawn within the first screen, and the results table starts within two (boxes measured by Chromium)."""
    pytester.makepyfile(test_many=MANY_CHECKS)
    reports = tmp_path / "reports"
    pytester.runpytest_inprocess(
        "-p", "no:cacheprovider", "-m", "acceptance", f"--slurmflox-reports={reports}", "--slurmflox-run-id=screen1"
    )
    page = reports / "screen1" / "report.html"
    probe = page.with_name("report-places.html")
    probe.write_text(page.read_text(encoding="utf-8").replace("</body>", PLACES + "</body>", 1), encoding="utf-8")
    dom = chromium_dom(probe, FIRST_SCREEN)
    match = re.search(r'<script type="application/json" id="sfx-places">(.*?)</script>', dom, re.S)
    assert match, "the measuring script wrote nothing (did the page load?)"
    places = json.loads(match.group(1))
    png = screenshot(page, tmp_path / "first-screen.png", FIRST_SCREEN)
    print(f"screenshot: {png}; places: {places}")
    width, height = FIRST_SCREEN
    assert len(places["bars"]) == 3, places
    for name, where in [
        ("verdict", places["verdict"]),
        ("summary table", places["groups"]),
        ("legend", places["legend"]),
        *(("first checks", bar) for bar in places["bars"]),
    ]:
        assert where and where["top"] >= 0 and where["bottom"] <= height and where["right"] <= width, (name, where)
    assert places["results"]["top"] <= 2 * height, places["results"]
