"""starter.py: the starter target file (``--slurmflox-init-target``) as a pure writer and its refusals.

The writer: answers as the cluster's commands print them parse into facts; the file rendered from them validates
against the schema and parses as a target; what it fills reads back equal (keys round-trip); every other key of
the schema is there, commented, each line carrying the schema's own description; expectations are never filled.
The refusals: an existing file (exit 4, the file unchanged), no login, a login that is not ``[user@]host[:port]``,
and a login on a real closed loopback port (exit 1, one line naming ``user@host:port`` and the stage; nothing
written). The live path (a real cluster, the doctor reading the file): tests/integration/test_site_access_local.py.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from sshd import free_port, keygen

from pytest_slurmflox.harness.starter import Facts, document, init_target, login_section, parse_facts, render
from pytest_slurmflox.model import targetschema
from pytest_slurmflox.model.target import parse_target

DATA = Path(__file__).resolve().parents[1] / "data"
#: Answers as a 24.11 cluster prints them (the ClusterName line from a real ``scontrol show config``).
ANSWERS = {
    "slurm": (True, "slurm 24.11.5"),
    "partitions": (True, "all* up 3 idle\ndebug up 1 idle"),
    "nodes": (True, "worker1 all idle\nworker2 all idle\nworker3 all idle"),
    "mpi": (True, "MPI plugin types are...\n\tnone\n\tpmi2\n\tpmix"),  # srun --mpi=list
    "task prolog": (True, "TaskProlog              = /etc/slurm/flox-task-prolog/task-prolog.sh"),
    "cluster": (
        True,
        next(x for x in (DATA / "scontrol-show-config-24.11-local.txt").read_text().splitlines() if "ClusterName" in x),
    ),
    "account": (True, "hpc"),
}
LOGIN = {"host": "login.site-a.example", "port": 2222, "user": "alice"}
#: Sections of what the deployment is expected to run: never filled from the cluster.
EXPECTATIONS = ("expect", "identity", "runtime", "limitations", "flox", "directory", "rest", "kubernetes", "admin")


def _rendered(facts: Facts) -> tuple[dict, str]:
    doc = document(facts, LOGIN)
    return doc, render(doc, facts, "alice@login.site-a.example:2222")


def test_the_answers_parse_into_facts():
    facts = parse_facts(ANSWERS)
    assert (facts.slurm_version, facts.cluster_name) == ("24.11.5", "slurmflox")
    assert (facts.default_partition, facts.default_account) == ("all", "hpc")
    assert any(line.startswith("mpi: ") and "pmix" in line for line in facts.shown)
    silent = parse_facts({label: (False, "(no answer: exit 1)") for label in ANSWERS})
    assert (silent.slurm_version, silent.cluster_name, silent.default_partition, silent.default_account) == (None,) * 4
    debian = parse_facts({"slurm": (True, "slurm-wlm 24.11.5")})  # Debian's scontrol --version (the local cluster's)
    assert debian.slurm_version == "24.11.5" and parse_facts({"slurm": (True, "slurm")}).slurm_version is None
    nulled = parse_facts({"cluster": (True, "ClusterName = (null)"), "partitions": (True, "all up 3 idle")})
    assert nulled.cluster_name is None and nulled.default_partition is None  # no default partition: not guessed


def test_the_file_validates_parses_and_its_filled_keys_round_trip():
    doc, text = _rendered(parse_facts(ANSWERS))
    loaded = yaml.safe_load(text)
    assert loaded == doc
    assert loaded == {
        "version": 1,
        "name": "slurmflox",
        "substrate": "existing",
        "login": LOGIN,
        "slurm": {"partition": "all", "version": "24.11.5"},
        "accounting": {"account": "hpc"},
    }
    targetschema.check(loaded)
    spec = parse_target(loaded, path=Path("/sites/a/site.yaml"))
    assert (spec.partition, spec.login.port, spec.accounting and spec.accounting.account) == ("all", 2222, "hpc")


def test_nothing_answered_is_still_a_valid_file_with_only_the_login():
    doc, text = _rendered(parse_facts({}))
    assert yaml.safe_load(text) == doc == {"version": 1, "substrate": "existing", "login": LOGIN}
    targetschema.check(doc)


def test_every_other_key_is_commented_with_the_schemas_description():
    _, text = _rendered(parse_facts(ANSWERS))
    lines = text.splitlines()
    for path, sub in targetschema.leaf_paths():
        if path.startswith("deployment."):
            continue  # a substrate's section: one commented line, its keys not listed
        key = path.rsplit(".", 1)[-1]
        about = " ".join(str(sub["description"]).split())
        mine = [line for line in lines if line.lstrip("# ").startswith(f"{key}:") and line.endswith(f"  # {about}")]
        assert mine, f"{path}: no line with its description"
    body = [line for line in lines if line.strip() and not line.lstrip().startswith("#")]
    assert all("  # " in line for line in body), body  # a filled key says what it is too
    for section in EXPECTATIONS:
        assert any(line.startswith(f"# {section}:") for line in lines), section


def test_expectations_are_never_filled_from_the_cluster():
    doc, _ = _rendered(parse_facts(ANSWERS))
    assert not set(EXPECTATIONS) & set(doc), doc


def test_a_commented_key_uncommented_is_valid_yaml_the_schema_names():
    """A customer uncomments a key and gives it a value: the line is YAML at the right depth."""
    _, text = _rendered(parse_facts(ANSWERS))
    line = next(line for line in text.splitlines() if line.strip().startswith("# busy_timeout:"))
    edited = text.replace(line, line.replace("# busy_timeout:", "busy_timeout: 300", 1))
    loaded = yaml.safe_load(edited)
    assert loaded["slurm"]["busy_timeout"] == 300
    targetschema.check(loaded)


@pytest.mark.parametrize(
    ("text", "section"),
    [
        ("alice@login.example:2222", {"host": "login.example", "port": 2222, "user": "alice"}),
        ("login.example", {"host": "login.example"}),
        ("bob@[::1]:22", {"host": "::1", "port": 22, "user": "bob"}),
    ],
)
def test_the_login_option_is_what_the_user_passed(text: str, section: dict):
    assert login_section(text) == section


@pytest.mark.parametrize("text", ["", "a@b@c", "a@h:port", "a@h1,b@h2", "a@h/x y"])
def test_a_login_that_is_not_user_at_host_port_is_refused(text: str):
    with pytest.raises(ValueError, match=r"--slurmflox-init-login .*: expected \[user@\]host\[:port\]"):
        login_section(text)


def test_an_existing_file_is_refused_unchanged_and_before_any_connection(tmp_path: Path):
    target = tmp_path / "site.yaml"
    target.write_text("mine\n")
    said: list[str] = []
    # a login on a closed port: had the starter connected, it would have said so (exit 1)
    assert init_target(target, f"alice@127.0.0.1:{free_port()}", said.append) == 4
    assert len(said) == 1 and "exists" in said[0] and str(target) in said[0], said
    assert target.read_text() == "mine\n" and sorted(os.listdir(tmp_path)) == ["site.yaml"]


def test_no_login_a_bad_login_or_no_directory_is_one_line_and_exit_4(tmp_path: Path):
    for login, path, words in (
        (None, tmp_path / "a.yaml", "needs --slurmflox-init-login"),
        ("a@b@c", tmp_path / "b.yaml", "expected [user@]host[:port]"),
        ("alice@h:70000", tmp_path / "c.yaml", "login.port"),
        ("alice@h", tmp_path / "nosuch" / "d.yaml", "no directory"),
    ):
        said: list[str] = []
        assert init_target(path, login, said.append) == 4, said
        assert len(said) == 1 and words in said[0], said
    assert os.listdir(tmp_path) == []


def test_an_unreachable_login_is_one_line_naming_it_and_the_stage_and_nothing_is_written(tmp_path: Path):
    key = keygen(tmp_path / "id_ed25519")
    port = free_port()
    env = {**os.environ, "HOME": str(tmp_path)}
    (tmp_path / ".ssh").mkdir()
    (tmp_path / ".ssh" / "config").write_text(f"Host 127.0.0.1\n  IdentityFile {key}\n")
    argv = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--slurmflox-init-login", f"u@127.0.0.1:{port}"]
    env["SLURMFLOX_INIT_TARGET"] = str(tmp_path / "site.yaml")  # the option through its environment variable
    out = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    lines = (out.stdout + out.stderr).splitlines()
    assert out.returncode == 1, lines
    assert len(lines) == 1 and f"u@127.0.0.1:{port}" in lines[0] and "(TCP connect)" in lines[0], lines
    assert "nothing was written" in lines[0] and not (tmp_path / "site.yaml").exists()
