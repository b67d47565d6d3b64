"""Debian's Chromium, headless, as the report tests' browser: the DOM after the page's scripts ran, and screenshots.

Chromium is installed by ``sh bootstrap.sh test`` (Debian package ``chromium``); without it a report test FAILS
naming the missing package (a skip would hide a missing install step, see ``tests/skipguard.py``).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
)


def require_chromium() -> None:
    if not os.access(CHROMIUM, os.X_OK):
        pytest.fail(
            f"headless Chromium not available ({CHROMIUM}): install the Debian package chromium (sh bootstrap.sh test)"
        )


def run_chromium(args: list[str], timeout: float = 120.0) -> subprocess.CompletedProcess[str]:
    """One headless Chromium run with a throw-away profile; fails the test when Chromium does."""
    require_chromium()
    profile = tempfile.mkdtemp(prefix="sfx-chromium-")
    try:
        proc = subprocess.run(
            [CHROMIUM, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    finally:
        shutil.rmtree(profile, ignore_errors=True)
    assert proc.returncode == 0, f"chromium failed ({proc.returncode}): {proc.stderr[-2000:]}"
    return proc


def chromium_dom(page: Path, window: tuple[int, int] = (1280, 1600), timeout: float = 120.0) -> str:
    """The DOM after Chromium loaded ``page`` and ran its scripts."""
    proc = run_chromium([f"--window-size={window[0]},{window[1]}", "--dump-dom", page.resolve().as_uri()], timeout)
    assert "<html" in proc.stdout, f"chromium dumped no DOM: {proc.stderr[-2000:]}"
    return proc.stdout


def screenshot(page: Path, out: Path, window: tuple[int, int] = (1280, 1600), timeout: float = 120.0) -> Path:
    """A PNG of the page's first ``window`` pixels as Chromium draws it."""
    run_chromium([f"--window-size={window[0]},{window[1]}", f"--screenshot={out}", page.resolve().as_uri()], timeout)
    assert out.is_file(), f"chromium wrote no screenshot at {out}"
    return out
