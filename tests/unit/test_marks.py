"""The per-check nonce mark (suites/_marks.py): site noise around our command never reaches what a check reads.

Runs the real shell text through bash (no Slurm needed: the mark is plain shell), with noise printed before and
after, the way a site TaskProlog ``print`` line and an echoing profile would."""

from __future__ import annotations

import os
import subprocess

from pytest_slurmflox.suites._marks import Mark, marked, per_node

from pytest_slurmflox.base.run import Result

NOISE = "echo 'node1|site prolog says hi'; echo 'task=9'; echo 'sfxdeadbeef|forged'"


def _bash(script: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", "-c", script], capture_output=True, text=True, env={**os.environ, **env})


def test_wrap_keeps_only_our_lines_and_the_exit_status():
    mark = Mark.new()
    done = _bash(f"{NOISE}; bash -c {_quote(mark.wrap('echo one; echo two >&2; exit 3'))}; s=$?; {NOISE}; exit $s")
    assert done.returncode == 3
    assert mark.lines(done.stdout) == ["one", "two"]


def test_echo_marks_one_expanded_line():
    mark = Mark.new()
    done = _bash(f"{NOISE}; {mark.echo('task=$X')}", X="2")
    assert mark.lines(done.stdout) == ["task=2"]


def test_per_node_reads_only_marked_node_lines():
    mark = Mark.new()
    other = Mark.new()
    stdout = f"node1|noise\n{mark.nonce}|node1|uid=1\n{other.nonce}|node2|uid=0\n{mark.nonce}|node2|uid=1\n"
    res = marked(Result("x", "login", "u", 0, stdout, "", 0.1), mark)
    assert per_node(res) == {"node1": ["uid=1"], "node2": ["uid=1"]}
    assert res.stdout == stdout  # the raw output stays the evidence


def _quote(text: str) -> str:
    import shlex

    return shlex.quote(text)


def test_login_shell_noise_before_the_start_marker_is_dropped():
    from pytest_slurmflox.base.run import after_start

    start = "sfx-start-abc"
    assert after_start("Welcome!\nsfx-start-abc\nuid=1\n", start) == "uid=1\n"
    assert after_start("no marker: the shell failed first\n", start) == "no marker: the shell failed first\n"


def test_wrap_takes_a_multi_line_script():
    mark = Mark.new()
    done = _bash(_quote(mark.wrap("\necho one\nfor i in 1 2; do\n  echo i=$i\ndone\n")).join(["bash -c ", ""]))
    assert done.returncode == 0, done.stderr
    assert mark.lines(done.stdout) == ["one", "i=1", "i=2"]
