"""TR against slurmrestd 26.05's own OpenAPI document (suites/test_tr_rest.py): the version it chooses and the body
it sends, judged by the schema the server published (tests/data/openapi-26.05-sid-local.json, trimmed from
``GET /openapi/v3`` of Debian sid's 26.05.5 on the local substrate)."""

from __future__ import annotations

import json
from pathlib import Path

from pytest_slurmflox.suites.test_tr_rest import submit_body, submit_versions

DOC = json.loads((Path(__file__).parents[1] / "data" / "openapi-26.05-sid-local.json").read_text())
JOB = {
    "name": "sfx-tr",
    "partition": "all",
    "account": "slurmflox",
    "script": "#!/bin/bash\nenv\n",
    "required_nodes": ["worker1"],
    "current_working_directory": "/home/u/out",
    "standard_output": "/home/u/out/%j.out",
    "environment": {"PATH": "/usr/bin:/bin", "SFX": "from-rest"},
}


def test_26_05_lists_v0_0_42_to_45_and_tr_takes_the_newest():
    """Slurm 26.05 dropped v0.0.41 and keeps v0.0.42-45 (RELEASE_NOTES); the server says the same of itself."""
    assert DOC["info_x_slurm"]["release"] == "26.05.5"
    assert submit_versions(DOC["paths"]) == ["v0.0.42", "v0.0.43", "v0.0.44", "v0.0.45"]


def test_the_body_tr_sends_uses_only_keys_v0_0_45_and_v0_0_42_define():
    for version in ("v0.0.45", "v0.0.42"):
        body = submit_body(version, JOB)
        schemas = DOC["schemas"]
        assert set(body) <= set(schemas[f"{version}_job_submit_req"]), (version, sorted(body))
        assert set(body["job"]) <= set(schemas[f"{version}_job_desc_msg"]), (version, sorted(body["job"]))
        # environment: a list of K=V strings, the schema's string_array
        assert schemas[f"{version}_job_desc_msg.environment"]["$ref"].endswith("_string_array")
        assert body["job"]["environment"] == ["PATH=/usr/bin:/bin", "SFX=from-rest"]
        # required_nodes: a csv_string, whose parser takes a list as well as "a,b" (data_parser v0.0.4x parsers.c
        # PARSE_FUNC(CSV_STRING): list, dict or string); TR's list was accepted live on 26.05.5 (TR PASS on sid)
        assert schemas[f"{version}_job_desc_msg.required_nodes"]["$ref"].endswith("_csv_string")
        assert body["job"]["required_nodes"] == ["worker1"]
