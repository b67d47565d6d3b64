"""The built wheel carries what a customer needs outside any checkout: the suites, the provision scripts, the
shipped environments, the schemas, and the pytest11 entry point that loads the plugin."""

from __future__ import annotations

import configparser
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "pytest_slurmflox"
IGNORE = shutil.ignore_patterns(
    ".git", "build", "dist", "*.egg-info", "__pycache__", "reports", "operator", ".venv", ".hypothesis", ".ruff_cache"
)


def build_wheel(out: Path) -> Path:
    """``python -m build --wheel`` from a copy of the checkout (other work in the tree never races the build)."""
    src = out / "src"
    shutil.copytree(REPO, src, ignore=IGNORE)
    proc = subprocess.run(
        [sys.executable, "-m", "build", "--wheel", "--outdir", str(out / "dist"), str(src)],
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert proc.returncode == 0, f"wheel build failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    (wheel,) = (out / "dist").glob("pytest_slurmflox-*.whl")
    return wheel


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    return build_wheel(tmp_path_factory.mktemp("wheel"))


#: Where each shipped folder lives in the checkout: suites/ and provision/ at the top (mapped into the package by
#: pyproject's package-dir), envs/, schemas/ and resources/ (the report's style sheet) inside the package.
SOURCES = {
    "suites": REPO / "suites",
    "provision": REPO / "provision",
    "envs": PACKAGE / "envs",
    "schemas": PACKAGE / "schemas",
    "resources": PACKAGE / "resources",
}


def _source_files(sub: str) -> set[str]:
    root = SOURCES[sub]
    return {
        f"pytest_slurmflox/{sub}/{p.relative_to(root).as_posix()}"
        for p in root.rglob("*")
        if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc"
    }


def _source_of(wheel_name: str) -> Path:
    parts = wheel_name.split("/")
    if len(parts) > 2 and parts[1] in SOURCES:
        return SOURCES[parts[1]].joinpath(*parts[2:])
    return REPO / wheel_name


def test_wheel_carries_suites_provision_envs_and_schemas(wheel):
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        for sub in ("suites", "provision", "envs", "schemas", "resources"):
            expected = _source_files(sub)
            assert expected, f"nothing under {SOURCES[sub]} in the checkout"
            missing = sorted(expected - names)
            assert not missing, f"{sub}: missing from the wheel: {missing[:10]}"
        for module in (
            "plugin.py",
            "reporting/report.py",
            "judges/workloads.py",
            "model/target.py",
            "model/evidence.py",
        ):
            assert f"pytest_slurmflox/{module}" in names
        assert "pytest_slurmflox/suites/test_tw_workloads.py" in names
        # executable bits survive (provision scripts and environment binaries run on nodes as they are)
        executables = 0
        for info in zf.infolist():
            source = _source_of(info.filename)
            shipped = info.filename.startswith(("pytest_slurmflox/provision/", "pytest_slurmflox/envs/"))
            if shipped and source.exists() and source.stat().st_mode & 0o111:
                executables += 1
                assert (info.external_attr >> 16) & 0o111, f"{info.filename} lost its executable bit"
        assert executables > 0
        (entry_points,) = [n for n in names if n.endswith(".dist-info/entry_points.txt")]
        parser = configparser.ConfigParser()
        parser.read_string(zf.read(entry_points).decode())
        assert parser["pytest11"]["slurmflox"] == "pytest_slurmflox.plugin"
        (metadata,) = [n for n in names if n.endswith(".dist-info/METADATA")]
        requires = [line for line in zf.read(metadata).decode().splitlines() if line.startswith("Requires-Dist:")]
        for dep in ("pytest", "pytest-html", "pytest-metadata", "pytest-xdist", "paramiko", "pyyaml"):
            assert any(line.split()[1].lower().startswith(dep) for line in requires), f"{dep} not required"
        assert not any(n.startswith("tests/") for n in names), "project tests must not ship"


def test_shipped_schemas_are_valid_json_schemas(wheel, tmp_path):
    import json

    import jsonschema

    with zipfile.ZipFile(wheel) as zf:
        for name in ("evidence.json", "junit.json"):
            schema = json.loads(zf.read(f"pytest_slurmflox/schemas/{name}"))
            jsonschema.Draft202012Validator.check_schema(schema)
