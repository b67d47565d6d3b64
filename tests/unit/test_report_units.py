"""Pure parts of the report: the sign-off decision, long-output files, the secret scanner, metadata rows."""

from __future__ import annotations

import base64
import json
import os

import pytest

from pytest_slurmflox.model.groups import REQUIRED_GROUPS
from pytest_slurmflox.model.secrets import REDACTED, Redactor, scan_for_secrets, secret_needles
from pytest_slurmflox.reporting.artifacts import LONG_OUTPUT, evidence_html, externalize, summary_html
from pytest_slurmflox.reporting.envfacts import image_digest
from pytest_slurmflox.reporting.profiles import NOT_APPLICABLE
from pytest_slurmflox.reporting.signoff import (
    FAIL,
    NOT_RUN,
    NOT_SIGNED_OFF,
    PASS,
    SIGNED_OFF,
    SKIP,
    Check,
    decide,
    summary_lines,
)


def _check(group: str | None, verdict: str, name: str = "t", reason: str = "") -> Check:
    return Check(nodeid=f"suites/test_{group}.py::{name}", group=group, verdict=verdict, reason=reason)


def _all_required_pass(*extra: Check) -> list[Check]:
    return [_check(g, PASS) for g in REQUIRED_GROUPS if g != "TW"] + list(extra)


def test_all_required_groups_passed_is_signed_off():
    so = decide(_all_required_pass(_check("T4", PASS, "b")), requested=True)
    assert so.verdict == SIGNED_OFF and so.signed and so.reasons == ()
    assert so.required == tuple(g for g in REQUIRED_GROUPS if g != "TW")
    assert all(g.verdict == PASS for g in so.groups)


def test_a_subset_run_lists_every_required_group_and_is_not_signed_off():
    """#11 item 5: sign-off covers the whole requirement set; a required group that did not run is NOT RUN."""
    so = decide([_check("T3", PASS), _check("T4", PASS)], requested=True, deselected={"T5": "deselected by -k"})
    assert not so.signed
    listed = {g.group: g for g in so.groups}
    assert set(so.required) <= set(listed)
    assert listed["T5"].verdict == NOT_RUN and listed["T5"].required and listed["T5"].reasons == ("deselected by -k",)
    assert listed["T6"].verdict == NOT_RUN and "no check of this group ran" in listed["T6"].reasons[0]
    assert any("required group T5 is NOT RUN: deselected by -k" in r for r in so.reasons)


def test_a_skip_is_never_a_pass():
    checks = [c for c in _all_required_pass() if c.group != "T3"]
    so = decide([*checks, _check("T3", PASS), _check("T3", SKIP, "k", "missing capability kubernetes")], requested=True)
    assert so.verdict == NOT_SIGNED_OFF
    t3 = next(g for g in so.groups if g.group == "T3")
    assert t3.verdict == SKIP and t3.counts == {PASS: 1, FAIL: 0, SKIP: 1, NOT_APPLICABLE: 0}
    assert [r for r in so.reasons if "missing capability kubernetes" in r] and len(so.reasons) == 1


def test_a_failure_in_an_optional_group_blocks_sign_off():
    so = decide(_all_required_pass(_check("T11R", FAIL, "x", "boom")), requested=True)
    assert "T11R" not in so.required
    assert not so.signed and any("T11R" in r for r in so.reasons)


def test_a_skipped_optional_group_does_not_block():
    so = decide(_all_required_pass(_check("T11R", SKIP, "x", "not here")), requested=True)
    assert so.signed


def test_tw_is_required_only_with_a_corpus():
    without = decide(_all_required_pass(), requested=True, workloads_given=False)
    assert without.signed and "TW" not in without.required
    with_corpus = decide(_all_required_pass(), requested=True, workloads_given=True)
    assert not with_corpus.signed and "TW" in with_corpus.required
    tw = next(g for g in with_corpus.groups if g.group == "TW")
    assert tw.verdict == NOT_RUN


def test_the_required_set_can_be_given():
    so = decide([_check("T3", PASS)], requested=True, required_groups=("T3",))
    assert so.signed and so.required == ("T3",)


def test_nothing_run_is_not_signed_off():
    assert decide([], requested=True).verdict == NOT_SIGNED_OFF


def test_collection_errors_block_sign_off():
    so = decide([_check("T3", PASS)], requested=True, collect_errors=["suites/test_x.py: ImportError"])
    assert not so.signed and "ImportError" in so.reasons[0]


def test_a_run_that_never_ran_a_destructive_group_signs_off_and_one_without_t3_does_not():
    """The destructive groups are opt-in (T11R/U/C/F, TDC, TAR): a sign-off never waits for them; T3 it needs."""
    destructive = {"T11R", "T11U", "T11C", "T11F", "TDC", "TAR"}
    assert decide([c for c in _all_required_pass() if c.group not in destructive], requested=True).signed
    so = decide([c for c in _all_required_pass() if c.group != "T3"], requested=True)
    assert not so.signed and any("T3" in reason for reason in so.reasons)


def test_summary_text_and_html_show_every_group_and_escape():
    so = decide([_check("T3", PASS), _check("T5", SKIP, "s", "<script>alert(1)</script>")], requested=False)
    lines = "\n".join(summary_lines(so, "run-1"))
    assert "T3" in lines and "T5" in lines and NOT_SIGNED_OFF in lines and "not requested" in lines
    page = summary_html(so, "run-1")
    assert 'id="slurmflox-verdict"' in page and "&lt;script&gt;" in page and "<script>" not in page
    assert "\n" not in page


def test_long_outputs_go_to_log_files(tmp_path):
    long = "x" * (LONG_OUTPUT + 10) + "\nTAIL-MARK\n"
    records = [
        {"command": "c", "where": "w", "user": "u", "exit_status": 0, "stdout": long, "stderr": "e"},
        {"command": "d", "where": "w", "user": "u", "exit_status": 1, "stdout": "short", "stderr": ""},
    ]
    out = externalize(records, "suites/test_a.py::test_b[x/y]", tmp_path / "logs", Redactor())
    assert out[1]["stdout"] == "short" and "stdout_file" not in out[1]
    rel = out[0]["stdout_file"]
    assert rel.startswith("logs/") and "/" not in rel[5:]
    assert (tmp_path / rel).read_text() == long
    assert out[0]["stdout_chars"] == len(long) and len(out[0]["stdout"]) < len(long)
    page = evidence_html(out)
    assert f'href="{rel}"' in page and "exit 1" in page and "TAIL-MARK" not in page


def test_externalize_redacts_again(tmp_path):
    redact = Redactor()
    redact.add_value("hunter2-very-secret")
    out = externalize(
        [{"command": "echo hunter2-very-secret", "stdout": "token: abc123", "stderr": ""}], "n", tmp_path, redact
    )
    assert "hunter2" not in json.dumps(out) and "abc123" not in json.dumps(out)
    assert REDACTED in out[0]["command"]


def _secret_files(tmp_path):
    munge = tmp_path / "munge.key"
    munge.write_bytes(os.urandom(1024))
    key = tmp_path / "id_test"
    body = base64.b64encode(os.urandom(300)).decode()
    key.write_text(
        "-----BEGIN OPENSSH PRIVATE KEY-----\n"
        + "\n".join(body[i : i + 70] for i in range(0, len(body), 70))
        + "\n-----END OPENSSH PRIVATE KEY-----\n"
    )
    kube = tmp_path / "kubeconfig"
    kube.write_text(
        "users:\n- name: admin\n  user:\n    token: kube-token-0123456789abcdef\n"
        f"    client-key-data: {base64.b64encode(os.urandom(64)).decode()}\n"
    )
    return munge, key, kube


def test_scanner_is_clean_on_clean_files_and_catches_each_planted_secret(tmp_path):
    munge, key, kube = _secret_files(tmp_path)
    needles = secret_needles([munge, key, kube])
    art = tmp_path / "artifact.html"
    art.write_text("<html>nothing secret here</html>")
    assert scan_for_secrets([art], needles) == []
    plants = {
        "raw munge key": munge.read_bytes(),
        "munge key base64": base64.b64encode(munge.read_bytes()),
        "munge key hex": munge.read_bytes().hex().encode(),
        "one PEM body line": key.read_text().splitlines()[2].encode(),
        "PEM block shape": b"-----BEGIN RSA PRIVATE KEY-----\nAAAA\n",
        "kube token": b"Authorization: kube-token-0123456789abcdef",
        "kube client key": kube.read_text().split("client-key-data: ")[1].strip().encode(),
        "html-escaped json": json.dumps({"t": kube.read_text()}).replace('"', "&quot;").encode(),
        "inside a data: URI": b'<a href="data:text/plain;charset=utf-8;base64,'
        + base64.b64encode(b"x" + key.read_text().encode())
        + b'">',
    }
    for name, data in plants.items():
        art.write_bytes(b"<html>" + data + b"</html>")
        assert scan_for_secrets([art], needles), f"planted {name} was not found"


def test_image_digest():
    digest = "sha256:" + "a" * 64
    assert image_digest(f"repo/img:1@{digest}") == digest
    assert image_digest("repo/img:1") is None


@pytest.mark.parametrize("verdict", [PASS, FAIL, SKIP])
def test_check_requirement_id_is_group_and_node(verdict):
    c = _check("T7", verdict, "test_x", "why")
    doc = c.as_dict()
    assert doc["requirement_id"] == "T7:suites/test_T7.py::test_x"
    assert (doc["skip_reason"] is not None) == (verdict == SKIP)
    assert (doc["failure"] is not None) == (verdict == FAIL)


def test_redactor_learns_secrets_after_first_use_and_ignores_duplicates():
    redact = Redactor()
    assert redact("nothing to hide here") == "nothing to hide here"  # fills the forms cache
    redact.add_value("late-secret-value-123")
    redact.add_value("late-secret-value-123")
    assert len(redact.secrets) == 1
    hexed = b"late-secret-value-123".hex()
    assert redact(f"a late-secret-value-123 b {hexed}") == f"a {REDACTED} b {REDACTED}"


def test_only_a_work_dir_that_records_a_deployment_is_walked_for_credentials(tmp_path):
    """Issue 38: a work dir named by the environment (``SLURMFLOX_WORKDIR=/usr/lib``) is never walked; its well-known
    files are looked at, nothing below. A deployment's work dir is walked, on its own file system only."""
    from pytest_slurmflox.model.secrets import secret_files
    from pytest_slurmflox.model.workdir import Workdir

    wd = Workdir(tmp_path / "wd")
    deep = wd.root / "local" / "ldap" / "bind.key"
    deep.parent.mkdir(parents=True)
    deep.write_text("bind-secret\n")
    wd.munge_key.write_bytes(os.urandom(64))
    assert secret_files(wd) == [wd.munge_key]
    wd.deployment.write_text("{}")
    assert secret_files(wd) == [wd.munge_key, deep]
