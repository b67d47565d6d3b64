"""The declared runtime (issue 38): a target file's ``runtime`` section, parsed, refused, written and read back, and
given to the suites as the runtime provider's record (pytest_slurmflox/model/declaredruntime.py). Pure code; the live
proof is tests/integration/test_declared_runtime_local.py."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from pytest_slurmflox.harness.connection import Target, probe_runtime
from pytest_slurmflox.judges.expectations import Runtime, expected_exports, task_env_problems
from pytest_slurmflox.model import targetschema
from pytest_slurmflox.model.declaredruntime import DeclaredRecord, parse_runtime, runtime_document
from pytest_slurmflox.model.target import TargetError, parse_target, target_document

ROOT = Path(__file__).resolve().parents[2]
ENV = "/nix/store/0000000000000000000000000000000a-hpc-17"
SECTION = {
    "realized_path": ENV,
    "path": [f"{ENV}/bin", f"{ENV}/sbin"],
    "exports": {"HPC_HOME": ENV, "HPC_LEVEL": 3},
    "profile_dir": "/run/flox-task-profile/current",
    "task_prolog": "/etc/slurm/flox-task-prolog/task-prolog.sh",
    "executables": {f"{ENV}/bin": ["python3", "gatk"]},
    "content_digest": "sha256:" + "ab" * 32,
    "nar_hash": "sha256:0h3xka1g4ib7fnwsa16fwg9fwlfkw3izfxdjkf2zg3bs7bgjzp88",
}
LOGIN = {"host": "h", "user": "u", "key": "/k"}
SETTINGS = {"WORKER_FLOX_ENV": "myorg/hpc", "WORKER_FLOX_GENERATION": "17", "WORKER_ENV_EXPORTS": "HPC_HOME"}


def _doc(**runtime) -> dict:
    return {"login": LOGIN, "expect": {"settings": SETTINGS}, "runtime": {**SECTION, **runtime}}


def test_the_section_reads_back_equal_through_the_one_serializer():
    spec = parse_target(_doc())
    rt = spec.runtime
    assert rt.path == (f"{ENV}/bin", f"{ENV}/sbin") and rt.exports == {"HPC_HOME": ENV, "HPC_LEVEL": "3"}
    assert parse_runtime(runtime_document(rt)) == rt
    again = parse_target(yaml.safe_load(yaml.safe_dump(target_document(spec))))
    assert again.runtime == rt and target_document(again)["runtime"] == runtime_document(rt)
    bare = parse_target({"login": LOGIN})
    assert bare.runtime is None and "runtime" not in target_document(bare)


@pytest.mark.parametrize(
    ("change", "said"),
    [
        ({"realized_pth": ENV}, "runtime.realized_pth is not a known key (did you mean runtime.realized_path?)"),
        ({"profile_dir": None}, "runtime.profile_dir is required"),
        ({"task_prolog": "etc/slurm/prolog.sh"}, "runtime.task_prolog must be an absolute path or a file name"),
        ({"path": []}, "runtime.path must list"),
        ({"path": [f"{ENV}/bin", f"{ENV}/bin/"]}, "runtime.path names an entry twice"),
        ({"exports": ["HPC_HOME"]}, "runtime.exports: ['HPC_HOME'] is a list, expected a mapping"),
        ({"exports": {"PATH": "/x"}}, "runtime.exports.PATH is not a variable name"),
        ({"exports": {"A": True}}, "runtime.exports.A: True is true or false, expected text"),
        ({"executables": {"/usr/bin": ["ls"]}}, "runtime.executables./usr/bin is not one of runtime.path's"),
        ({"executables": {f"{ENV}/bin": "python3"}}, "'python3' is text, expected a list of text"),
        ({"content_digest": "sha256:xyz"}, "runtime.content_digest must be sha256:<64 hex>"),
        ({"nar_hash": "sha256:" + "a" * 64}, "runtime.nar_hash must be sha256:<52 base32"),
    ],
)
def test_a_wrong_section_is_refused_in_one_line_naming_the_key(change, said):
    doc = _doc(**change)
    doc["runtime"] = {k: v for k, v in doc["runtime"].items() if v is not None}
    with pytest.raises(TargetError) as refused:
        parse_target(doc)
    assert said in str(refused.value) and "\n" not in str(refused.value), str(refused.value)


def test_not_a_mapping_is_refused():
    with pytest.raises(TargetError, match=r"runtime: .* is a list, expected a mapping"):
        parse_target({"login": LOGIN, "runtime": [ENV]})


def test_the_declared_record_is_the_runtime_every_worker_is_judged_against():
    spec = parse_target(_doc())
    record = DeclaredRecord(spec.runtime, spec.expect.environment, "run")
    got = record.realization("worker7")
    assert got == record.realization("worker1") and got["realized_path"] == ENV
    rt = Runtime.from_record(got["record"], got["realized_path"], "run")
    assert rt.ref == "myorg/hpc:17" and rt.realized_path == ENV and rt.content_digest == SECTION["content_digest"]
    assert rt.path == (f"{ENV}/bin", f"{ENV}/sbin") and rt.bin_entries == {f"{ENV}/bin": ("python3", "gatk")}
    assert expected_exports(("HPC_HOME", "NOT_DEFINED"), rt) == {"HPC_HOME": ENV}
    other_mode = Runtime.from_record(got["record"], ENV, "dev")
    assert other_mode.activation.startswith("missing") and other_mode.path == ()
    # a task's environment is computed from it as from the local provider's record: one wrong export is named
    task = {"PATH": f"{ENV}/bin:{ENV}/sbin:/usr/bin", "HPC_HOME": "/elsewhere"}
    problems = task_env_problems(
        task, {"PATH": "/usr/bin"}, mode="ALL", precedence="prepend", allow_list=("HPC_HOME",), runtime=rt
    )
    assert problems == [f"allow-listed HPC_HOME is '/elsewhere', expected '{ENV}'"], problems


def test_a_declared_runtime_is_the_runtime_record_capability_and_the_targets_records():
    spec = parse_target(_doc())
    caps: set[str] = set()
    missing = {"runtime-record": "the worker owner keeps no runtime-provider record"}
    probe_runtime(spec, caps, missing)
    assert caps == {"runtime-record"} and missing == {}
    target = Target(spec, login=None, admin=None, slurm=None, capabilities=frozenset(caps))
    assert isinstance(target.records, DeclaredRecord) and target.records.ref == "myorg/hpc:17"
    bare = parse_target({"login": LOGIN})
    caps, missing = set(), {"runtime-record": "none"}
    probe_runtime(bare, caps, missing)
    assert caps == set() and "runtime-record" in missing
    assert Target(bare, login=None, admin=None, slurm=None).records is None


def test_the_readme_example_target_declares_a_runtime_that_parses():
    readme = (ROOT / "README.md").read_text()
    section = readme[readme.index("## Your cluster, end to end") :]
    block = re.search(r"```yaml\n(.*?)```", section, re.S)
    assert block, "README: the existing-cluster example target"
    doc = yaml.safe_load(block.group(1))
    assert targetschema.problems(doc) == []  # the schema, every key known and typed, before the parser
    spec = parse_target(doc, path=ROOT / "site-a.yaml")
    assert spec.runtime is not None and spec.runtime.nar_hash and spec.runtime.executables
