"""The HTML report as a browser shows it: Debian's Chromium, headless, renders the page (pytest-html builds the
environment table and results with JavaScript) and dumps the DOM; the sign-off summary and the environment table
must be in it (the browser: tests/browser.py)."""

from __future__ import annotations

import html
import json
import re
from html.parser import HTMLParser

import pytest
from browser import chromium_dom

__all__ = ["chromium_dom", "rendered_tables"]


class _Tables(HTMLParser):
    """Rows (cell texts) of the tables with the given ids, as rendered."""

    def __init__(self, ids: set[str]) -> None:
        super().__init__()
        self.ids = ids
        self.tables: dict[str, list[list[str]]] = {i: [] for i in ids}
        self.stack: list[str | None] = []
        self.cell: list[str] | None = None

    def handle_starttag(self, tag, attrs):
        if tag == "table":
            self.stack.append(dict(attrs).get("id") if dict(attrs).get("id") in self.ids else None)
        elif self.stack and self.stack[-1]:
            if tag == "tr":
                self.tables[self.stack[-1]].append([])
            elif tag in ("td", "th"):
                self.cell = []

    def handle_endtag(self, tag):
        if tag == "table" and self.stack:
            self.stack.pop()
        elif tag in ("td", "th") and self.cell is not None and self.stack and self.stack[-1]:
            self.tables[self.stack[-1]][-1].append(" ".join("".join(self.cell).split()))
            self.cell = None

    def handle_data(self, data):
        if self.cell is not None:
            self.cell.append(data)


def rendered_tables(dom: str) -> tuple[dict[str, str], dict[str, list[str]], str]:
    """(environment rows, sign-off group rows, verdict text) from a dumped DOM."""
    parser = _Tables({"environment", "slurmflox-groups"})
    parser.feed(dom)
    env = {row[0]: row[1] for row in parser.tables["environment"] if len(row) == 2}
    groups = {row[0]: row[1:] for row in parser.tables["slurmflox-groups"][1:] if row}
    match = re.search(r'id="slurmflox-verdict"[^>]*>(.*?)</p>', dom, re.S)
    verdict = re.sub(r"<[^>]+>", "", match.group(1)) if match else ""
    return env, groups, verdict


def test_report_renders_summary_and_environment_in_chromium(pytester, tmp_path):
    pytester.makepyfile(
        test_fake="""
import pytest
from pytest_slurmflox.base.run import LocalRunner

@pytest.mark.acceptance
@pytest.mark.T3
def test_ok(slurmflox_state):
    LocalRunner(observer=slurmflox_state.evidence).run("echo evidence-line-for-chromium").check()

@pytest.mark.acceptance
@pytest.mark.T5
def test_skipped():
    pytest.skip("missing capability kubernetes: none in this fake")
"""
    )
    reports = tmp_path / "reports"
    res = pytester.runpytest_inprocess(
        "-p",
        "no:cacheprovider",
        "-m",
        "acceptance",
        "--slurmflox-signoff",
        f"--slurmflox-reports={reports}",
        "--slurmflox-run-id=html1",
    )
    assert res.ret != 0  # the skip fails the sign-off
    dom = chromium_dom(reports / "html1" / "report.html")
    env, groups, verdict = rendered_tables(dom)
    # the environment table is built by the page's JavaScript: present only if the page really rendered
    assert env.get("Run id") == "html1"
    for row in ("Substrate", "Target", "Slurm version", "Kubernetes version", "Runtime revision (desired by owner)"):
        assert row in env, f"environment row {row!r} missing: {sorted(env)}"
    assert verdict.startswith("NOT SIGNED OFF")
    assert groups["T3"][:2] == ["required", "PASS"] and groups["T5"][:2] == ["required", "SKIP"]
    assert "none in this fake" in groups["T5"][-1]
    # per-test evidence, rendered into the results rows by the page's script
    assert "evidence-line-for-chromium" in dom and 'class="sfx-cmd"' in dom
    # the sign-off summary and the run's timeline sit above the environment table (#16)
    assert dom.index('id="slurmflox-signoff"') < dom.index('id="slurmflox-timeline"') < dom.index('id="environment"')
    svg = dom[dom.index("<svg") : dom.index("</svg>")]
    assert svg.count('class="sfx-bar') == 2 and "test_ok" in svg and "test_skipped" in svg
    assert 'class="sfx-bar sfx-pass"' in svg and 'class="sfx-bar sfx-skip"' in svg


TWO_CHECKS = """
import pytest
from pytest_slurmflox.reporting.sessionstate import progress_printer

PROBE = "local: tfprobe: runtime local/broken:1 cannot be realized"


@pytest.fixture(scope="session")
def probed(pytestconfig):
    progress_printer(pytestconfig)(PROBE)  # the run's line, said while the first check's setup runs


@pytest.mark.acceptance
@pytest.mark.T1
def test_t1_check(probed):
    print("T1-own-line")


@pytest.mark.acceptance
@pytest.mark.TF
def test_tf_check(probed):
    print("TF-own-line")
    pytest.skip("missing capability kubernetes: none in this fake")
"""


def report_rows(page) -> dict[str, list[tuple[str, str]]]:
    """node id -> (result, log text) of each of its rows, from pytest-html's data blob in ``page``."""
    text = page.read_text(encoding="utf-8")
    blob = json.loads(html.unescape(re.search(r'data-jsonblob="([^"]*)"', text).group(1)))
    return {
        nodeid: [(row["result"], html.unescape("".join(row.get("log", "")))) for row in rows]
        for nodeid, rows in blob["tests"].items()
    }


@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["serial", "xdist"])
def test_a_message_is_in_its_own_row_and_a_skip_reason_is_text(pytester, tmp_path, workers):
    """Two checks share a session fixture that says a progress line while the first one's setup runs: the line is
    the run's (the report's run notes), in neither check's row; each check's own output is in its own row only;
    the skip's log is its reason as text, never the (path, line, reason) tuple pytest keeps."""
    pytester.makepyfile(test_rows=TWO_CHECKS)
    reports = tmp_path / "reports"
    # in a subprocess: pytest's capture then holds the real standard output, as in a customer's run
    pytester.runpytest_subprocess(
        "-p",
        "no:cacheprovider",
        "-p",
        "no:randomly",
        "-m",
        "acceptance",
        f"--slurmflox-reports={reports}",
        "--slurmflox-run-id=rows1",
        *workers,
    )
    page = reports / "rows1" / "report.html"
    rows = report_rows(page)
    logs = {nodeid.rsplit("::", 1)[-1]: "\n".join(log for _, log in found) for nodeid, found in rows.items()}
    assert set(logs) == {"test_t1_check", "test_tf_check"}, rows
    assert "T1-own-line" in logs["test_t1_check"] and "TF-own-line" not in logs["test_t1_check"]
    assert "TF-own-line" in logs["test_tf_check"] and "T1-own-line" not in logs["test_tf_check"]
    assert all("tfprobe" not in log for log in logs.values()), logs
    skipped = [log for result, log in rows[next(n for n in rows if n.endswith("test_tf_check"))] if result == "Skipped"]
    assert skipped and skipped[0].startswith("SKIP: missing capability kubernetes: none in this fake"), skipped
    assert all("('" not in log and "Skipped: " not in log for log in skipped)
    notes = re.search(r'<details id="slurmflox-notes">.*?</details>', page.read_text(encoding="utf-8"), re.S)
    assert notes and "local: tfprobe: runtime local/broken:1 cannot be realized" in notes.group(0)
