"""The target file's schema (issue 39): one list of keys, every mistake refused in one line naming its path.

The schema (pytest_slurmflox/schemas/target.json) is checked against what the code reads: a document with every
key the schema names parses, the settings sections list exactly settings.py's keys, the substrate choices are the
registry's plus ``existing``, and a target the local substrate writes validates. Every key misspelled once is
refused naming it and the key meant. docs/target-schema.md is generated from the schema and kept equal here.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from targetdocs import EVERY_KEY, KINDED, LOGIN

from pytest_slurmflox.model import targetschema
from pytest_slurmflox.model.settings import KEYS, WORKER_KEYS, resolve
from pytest_slurmflox.model.target import TargetError, parse_target, target_document
from pytest_slurmflox.model.workdir import Workdir
from pytest_slurmflox.substrates import SUBSTRATES
from pytest_slurmflox.substrates.local.cgroups import CONTROLLERS

REPO = Path(__file__).resolve().parents[2]


#: Sections whose keys are the site's own names (variables, PATH entries), not the schema's.
FREE_FORM = {"runtime.exports.", "runtime.executables."} | {f"expect.performance.{m}.features." for m in KINDED}


def _paths(doc: Any, prefix: str = "") -> set[str]:
    if not isinstance(doc, dict) or prefix in FREE_FORM:
        return set()
    return {p for k, v in doc.items() for p in ({f"{prefix}{k}"} | _paths(v, f"{prefix}{k}."))}


def _misspelled(key: str) -> str:
    """``key`` with one letter dropped from its middle (``accounting`` -> ``accouting``)."""
    middle = len(key) // 2
    return key[:middle] + key[middle + 1 :]


def test_the_schema_is_a_valid_json_schema():
    jsonschema.Draft202012Validator.check_schema(targetschema.schema())


def test_a_target_declaring_every_key_parses_and_names_every_key_of_the_schema():
    assert {path for path, _ in targetschema.leaf_paths()} == _paths(EVERY_KEY)
    spec = parse_target(EVERY_KEY, path=Path("/sites/a/target.yaml"))
    assert spec.partition == "gpu" and spec.identity is not None and spec.identity.supp_gid == 2000
    assert spec.flox_lock == Path("/sites/a/hpc-17.lock") and spec.limitations == EVERY_KEY["limitations"]


def test_declared_performance_parses_and_a_bound_that_is_no_percent_is_refused_naming_it():
    spec = parse_target(EVERY_KEY)
    assert spec.performance["scheduler_burst"]["jobs"] == 20 and spec.declares_key("expect.performance")
    doc = copy.deepcopy(EVERY_KEY)
    doc["expect"]["performance"]["mpi_latency"]["upper"] = "lots"
    with pytest.raises(TargetError, match=r"expect\.performance\.mpi_latency\.upper: .lots. does not match"):
        parse_target(doc)


def test_the_settings_sections_and_the_choices_are_the_codes():
    props = targetschema.schema()["properties"]
    assert set(props["expect"]["properties"]["settings"]["properties"]) == {*WORKER_KEYS, "COMPUTE_REPLICAS"}
    assert list(props["deployment"]["properties"]["settings"]["properties"]) == [spec.key for spec in KEYS]
    assert props["substrate"]["enum"] == [*SUBSTRATES, "existing"]
    assert set(props["limitations"]["properties"]) == set(CONTROLLERS.values())


def test_the_local_substrates_written_target_validates(tmp_path: Path):
    """The target ``up`` writes, built by the substrate's own ``target_spec`` (only the node image, which needs
    root and a Debian mirror to build, is given as built)."""
    from pytest_slurmflox.substrates.local import image
    from pytest_slurmflox.substrates.local.cluster import LocalCluster
    from pytest_slurmflox.substrates.local.substrate import LocalSubstrate

    settings = resolve(cli={"WORKDIR": str(tmp_path)}, substrate="local").settings
    cluster = LocalCluster(settings, Workdir(tmp_path), lambda _: None)
    cluster._image = image.NodeImage("e" * 64, tmp_path / "image.tar", tmp_path / "rootfs", "trixie", "24.11.5-1")
    doc = target_document(LocalSubstrate(cluster).target_spec())
    assert targetschema.problems(doc) == []
    assert {"accounting", "rest", "directory", "identity", "deployment"} <= set(doc)
    assert target_document(parse_target(doc)) == doc


@pytest.mark.parametrize("path", sorted(_paths(EVERY_KEY)))
def test_every_key_misspelled_once_is_refused_naming_it_and_the_key_meant(path: str):
    doc = copy.deepcopy(EVERY_KEY)
    *parents, key = path.split(".")
    section = doc
    for part in parents:
        section = section[part]
    section[_misspelled(key)] = section.pop(key)
    wrong = ".".join([*parents, _misspelled(key)])
    with pytest.raises(TargetError) as refused:
        parse_target(doc)
    message = str(refused.value)
    assert f"{wrong} is not a known key (did you mean {path}?)" in message, message
    assert "\n" not in message


@pytest.mark.parametrize(
    ("change", "said"),
    [
        ({"acounting": {"account": "hpc"}}, "acounting is not a known key (did you mean accounting?)"),
        ({"logn": LOGIN, "login": None}, "logn is not a known key (did you mean login?); login is required"),
        ({"login": {**LOGIN, "port": "one"}}, "login.port: 'one' is text, expected a whole number"),
        ({"identity": {"user": "a", "uid": "twelve", "gid": 1}}, "identity.uid: 'twelve' is text, expected a whole"),
        ({"expect": {"replicas": "two"}}, "expect.replicas: 'two' is text, expected a whole number"),
        ({"slurm": {"partiton": "gpu"}}, "slurm.partiton is not a known key (did you mean slurm.partition?)"),
        ({"identiy": {"user": "a"}}, "identiy is not a known key (did you mean identity?)"),
        ({"substrate": "exsting"}, "substrate: 'exsting' is not one of local, qemu, existing (did you mean existing?)"),
        ({"slurm": {"version": 24.11}}, "slurm.version: 24.11 is a number, expected text (quote it)"),
        ({"slurm": {"extra_args": "--qos=x"}}, "slurm.extra_args: '--qos=x' is text, expected a list of text"),
        ({"login": {"user": "u", "key": "k"}}, "login.host is required"),
        ({"login": {**LOGIN, "port": 0}}, "login.port: 0 must be at least 1"),
        ({"version": 2}, "version: 2 is not supported (expected 1)"),
        ({"accounting": {"limited_account": {"name": "x"}}}, "accounting.account is required"),
        ({"directory": {"uri": "u", "base": "b", "user": "a", "bind_dn": "cn=r"}}, "bind_password_file is required"),
        ({"limitations": {"memory-limit": "why"}}, "did you mean limitations.memory-limits?"),
        ({"expect": {"settings": {"WORKER_CPU": 2}}}, "did you mean expect.settings.WORKER_CPUS?"),
        ({"x1": 1, "x2": 2}, "x1, x2 are not known keys (known: accounting, admin,"),
    ],
)
def test_each_mistake_is_one_line_naming_its_path(change: dict, said: str):
    doc = {"login": LOGIN, **change}
    doc = {k: v for k, v in doc.items() if v is not None}
    with pytest.raises(TargetError) as refused:
        parse_target(doc)
    assert said in str(refused.value) and "\n" not in str(refused.value), str(refused.value)


def test_a_file_of_many_mistakes_names_the_first_three_and_counts_the_rest():
    doc = {"login": LOGIN, "acounting": {}, "identiy": {}, "slurm": {"partiton": "x"}, "rets": {}, "flx": {}}
    with pytest.raises(TargetError) as refused:
        parse_target(doc)
    message = str(refused.value)
    assert message.count("is not a known key") == 3 and message.endswith("(and 2 more)"), message


def test_the_published_page_is_the_schema():
    page = REPO / "docs" / "target-schema.md"
    regenerate = (
        'python -c "from pytest_slurmflox.model.targetschema import markdown; print(markdown(), end=str())" '
        "> docs/target-schema.md"
    )
    assert page.read_text() == targetschema.markdown(), f"regenerate it: {regenerate}"
    for path, _ in targetschema.leaf_paths():
        assert f"| `{path}` |" in page.read_text()


def test_every_performance_key_is_described_by_its_metric_method():
    """The schema's word for a metric is the method the evidence records for it (judges/baselines.py): the two are
    written apart, and a check whose method changed must not leave the published page describing the old one."""
    from pytest_slurmflox.judges.baselines import METRICS

    declared = targetschema.schema()["properties"]["expect"]["properties"]["performance"]["properties"]
    for name, metric in METRICS.items():
        assert declared[name]["description"].startswith(metric.method + " ("), (name, declared[name]["description"])


def test_a_key_given_twice_is_refused_naming_its_path_and_both_lines_where_aliases_are_not(tmp_path: Path):
    """YAML loaders keep the last of two equal keys silently; read_document refuses it, at any depth (a list's
    mapping too), and a merge through an anchor is one key, not two."""
    doc = tmp_path / "site.yaml"
    doc.write_text("version: 1\nslurm:\n  extra_args: [a]\nrest:\n  url: u\n  url: v\n")
    with pytest.raises(targetschema.SchemaError, match=r"^rest\.url is given twice \(line 5 and line 6\)"):
        targetschema.read_document(doc)
    doc.write_text("version: 1\nx: [{a: 1, b: 2, a: 3}]\n")
    with pytest.raises(targetschema.SchemaError, match=r"x\[0\]\.a is given twice \(line 2 and line 2\)"):
        targetschema.read_document(doc)
    doc.write_text("version: 1\nlogin: &l {host: h, user: u}\nadmin: *l\nkubernetes: {a: *l, b: *l}\n")
    assert targetschema.read_document(doc)["admin"] == {"host": "h", "user": "u"}
