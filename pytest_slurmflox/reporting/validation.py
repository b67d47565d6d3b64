"""Schema validation of the written artifacts (for tests and auditors; not needed to run a sign-off)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .signoff import FAIL, NO_GROUP, PASS, SKIP

SCHEMA_ID = "slurmflox-evidence/1"


def schema_path(name: str) -> Path:
    """A schema shipped in the package (``evidence.json``, ``junit.json``)."""
    return Path(__file__).parents[1] / "schemas" / name


def load_schema(name: str) -> dict[str, Any]:
    return json.loads(schema_path(name).read_text())


# ------------------------------------------------------------------------------------------------ validation
def _element(node: Any) -> dict[str, Any]:
    return {
        "tag": node.tag,
        "attrib": dict(node.attrib),
        "text": node.text,
        "children": [_element(child) for child in node],
    }


def junit_document(path: Path) -> dict[str, Any]:
    """JUnit XML parsed into ``{tag, attrib, text, children}``, the form schemas/junit.json describes."""
    import xml.etree.ElementTree as ET

    return _element(ET.parse(path).getroot())


def _schema_errors(doc: Any, schema_name: str) -> list[str]:
    import jsonschema  # artifact validation is for tests and auditors; the target file's is targetschema.py

    validator = jsonschema.Draft202012Validator(load_schema(schema_name))
    return [f"{'/'.join(map(str, e.absolute_path)) or '(root)'}: {e.message}" for e in validator.iter_errors(doc)]


def validate_junit(path: Path) -> list[str]:
    """Schema errors of a JUnit file, plus the counting rules: each suite's tests/failures/errors/skipped equal
    what its test cases carry."""
    try:
        doc = junit_document(path)
    except Exception as exc:
        return [f"not well-formed XML: {exc}"]
    errors = _schema_errors(doc, "junit.json")
    if errors:
        return errors
    for suite in doc["children"]:
        cases = [c for c in suite["children"] if c["tag"] == "testcase"]
        outcomes = [[o["tag"] for o in c["children"] if o["tag"] in ("failure", "error", "skipped")] for c in cases]
        want = {
            "tests": len(cases),
            "failures": sum(o.count("failure") for o in outcomes),
            "errors": sum(o.count("error") for o in outcomes),
            "skipped": sum(o.count("skipped") for o in outcomes),
        }
        for key, count in want.items():
            if int(suite["attrib"][key]) != count:
                errors.append(f"testsuite {suite['attrib']['name']}: {key}={suite['attrib'][key]}, cases say {count}")
    return errors


def validate_evidence(path: Path) -> list[str]:
    """Schema errors of an evidence.json, plus: each group's counts equal its checks' verdicts."""
    try:
        doc = json.loads(path.read_text())
    except ValueError as exc:
        return [f"not JSON: {exc}"]
    errors = _schema_errors(doc, "evidence.json")
    if errors:
        return errors
    for group in doc["groups"]:
        members = [c for c in doc["checks"] if (c["group"] or NO_GROUP) == group["group"]]
        for verdict in (PASS, FAIL, SKIP):
            count = sum(1 for c in members if c["verdict"] == verdict)
            if group["counts"][verdict] != count:
                errors.append(f"group {group['group']}: {verdict} count {group['counts'][verdict]}, checks say {count}")
    return errors
