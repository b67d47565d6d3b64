"""SIGTERM to the process that owns a run ends it the way Ctrl-C does (pytest_slurmflox/harness/interrupt.py):
pytest's own interrupted exit status, its session end run, no process of the run left."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from pytest_slurmflox.substrates.proc import alive

SLOW = """
import os, time

def test_slow():
    with open(os.environ["SLOW_MARK"], "w") as out:
        out.write(str(os.getpid()))
    time.sleep(120)
"""


@pytest.mark.parametrize("workers", [("-n", "1"), ("-p", "no:xdist")], ids=["xdist-controller", "serial"])
def test_sigterm_ends_the_run_like_ctrl_c_and_leaves_no_worker(pytester, workers):
    pytester.makepyfile(test_slow=SLOW)
    mark = pytester.path / "running"
    env = {**os.environ, "SLOW_MARK": str(mark)}
    cmd = [sys.executable, "-m", "pytest", "-p", "no:randomly", "-p", "no:cacheprovider", *workers, "test_slow.py"]
    proc = subprocess.Popen(cmd, cwd=pytester.path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60
        while not (mark.exists() and mark.read_text()):
            assert proc.poll() is None and time.monotonic() < deadline, "the slow test never started"
            time.sleep(0.1)
        runner = int(mark.read_text())  # the process running the test: an xdist worker, or the serial process
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    # killed by the signal, the exit status would be -15 and no session end would have run
    assert proc.returncode == pytest.ExitCode.INTERRUPTED, out.decode(errors="replace")[-2000:]
    assert b"KeyboardInterrupt" in out, out.decode(errors="replace")[-2000:]
    deadline = time.monotonic() + 20
    while alive(runner):
        assert time.monotonic() < deadline, f"pid {runner} (it ran the test) outlived the interrupted run"
        time.sleep(0.2)
