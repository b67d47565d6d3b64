"""The release as ``python -m build`` makes it: an sdist, and the wheel built from that sdist, both passing
``twine check``. The wheel carries what a customer needs outside any checkout: the suites, the provision scripts,
the shipped environments, the schemas, and the pytest11 entry point that loads the plugin; its metadata carries the
version written once in pyproject.toml (and named by CHANGELOG.md's newest entry), the README as long description,
the Apache-2.0 license and its file, project URLs and classifiers."""

from __future__ import annotations

import configparser
import email.message
import email.parser
import re
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest
from release import REPO, build_dist, built_wheel, project_version

PACKAGE = REPO / "pytest_slurmflox"


@pytest.fixture(scope="module")
def dist(tmp_path_factory) -> Path:
    return build_dist(tmp_path_factory.mktemp("release"))


@pytest.fixture(scope="module")
def wheel(dist) -> Path:
    found = built_wheel(dist)
    assert found.is_file(), sorted(p.name for p in dist.iterdir())
    return found


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


def _metadata(wheel: Path) -> email.message.Message:
    with zipfile.ZipFile(wheel) as zf:
        (name,) = [n for n in zf.namelist() if n.endswith(".dist-info/METADATA")]
        return email.parser.Parser().parsestr(zf.read(name).decode())


def test_the_sdist_and_the_wheel_pass_twine_check(dist):
    files = sorted(str(p) for p in dist.iterdir())
    assert [Path(f).name for f in files] == [
        f"pytest_slurmflox-{project_version()}-py3-none-any.whl",
        f"pytest_slurmflox-{project_version()}.tar.gz",
    ]
    proc = subprocess.run(
        [sys.executable, "-m", "twine", "check", "--strict", *files], capture_output=True, text=True, check=False
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.count("PASSED") == 2, proc.stdout


def test_the_wheel_metadata_is_complete(wheel):
    meta = _metadata(wheel)
    assert meta["Name"] == "pytest-slurmflox" and meta["Version"] == project_version()
    assert meta["License-Expression"] == "Apache-2.0" and meta.get_all("License-File") == ["LICENSE"]
    assert meta["Description-Content-Type"] == "text/markdown"
    assert meta.get_payload().startswith("# pytest-slurmflox\n"), meta.get_payload()[:200]  # the README
    # No public address is recorded for the project yet: a made-up URL in published metadata would mislead.
    assert not meta.get_all("Project-URL"), "Project-URL entries need the project's real public address"
    classifiers = meta.get_all("Classifier") or []
    assert "Framework :: Pytest" in classifiers and "Operating System :: POSIX :: Linux" in classifiers
    assert not [c for c in classifiers if c.startswith("License ::")], "the license is the SPDX expression alone"
    assert meta["Requires-Python"] == ">=3.10"
    with zipfile.ZipFile(wheel) as zf:
        (license_file,) = [n for n in zf.namelist() if n.endswith(".dist-info/licenses/LICENSE")]
        assert "Apache License" in zf.read(license_file).decode()[:200]


def test_the_sdist_carries_the_license_the_changelog_and_the_readme(dist):
    (sdist,) = dist.glob("*.tar.gz")
    top = f"pytest_slurmflox-{project_version()}"
    with tarfile.open(sdist) as tf:
        names = set(tf.getnames())
    assert {f"{top}/{name}" for name in ("LICENSE", "CHANGELOG.md", "README.md", "pyproject.toml")} <= names
    assert not any(n.startswith(f"{top}/tests/") for n in names), "project tests are not part of the release"


def test_the_version_is_written_once_and_the_changelog_names_it():
    """pyproject.toml holds the version; the plugin reads it from the installed metadata (the report's tool
    version), and CHANGELOG.md's newest entry names it."""
    from importlib.metadata import version

    from pytest_slurmflox.reporting.report import _plugin_version

    assert version("pytest-slurmflox") == project_version() == _plugin_version()
    headings = [line for line in (REPO / "CHANGELOG.md").read_text().splitlines() if line.startswith("## ")]
    assert headings and headings[0].split()[1] == project_version(), headings[:1]
    written = [
        str(p.relative_to(REPO))
        for p in sorted(REPO.joinpath("pytest_slurmflox").rglob("*.py"))
        if re.search(r"""__version__\s*=|version\s*=\s*["']\d""", p.read_text())
    ]
    assert written == [], f"a second place that writes the version: {written}"
