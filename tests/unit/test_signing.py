"""A signed sign-off (reporting/signing.py, reporting/manifest.py): real ``ssh-keygen -Y`` over run folders, real
keys and a real ssh-agent. A signed folder verifies and says who signed which verdict and when; one changed byte, a
missing or an added file fails naming it; a signer not in the allowed-signers file fails naming its key's
fingerprint; a run signed through the plugin carries the statement in its report and verifies."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from sshd import keygen, running_agent

from pytest_slurmflox.reporting.manifest import MANIFEST, SIGNATURE, Manifest
from pytest_slurmflox.reporting.signing import NAMESPACE, SigningError, resolve_signer, sign_run, verify_run

VERDICT = "SIGNED OFF (profile existing; not applicable: T1, TF)"


def _fingerprint(public: Path) -> str:
    out = subprocess.run(["ssh-keygen", "-l", "-f", str(public)], capture_output=True, text=True, check=True)
    return out.stdout.split()[1]


@pytest.fixture
def signed(tmp_path: Path) -> dict:
    """A run folder as the report writer leaves it, signed with alice's key; bob's key is trusted by nobody."""
    key = keygen(tmp_path / "alice")
    subprocess.run(["ssh-keygen", "-q", "-c", "-C", "alice@site-a", "-f", str(key)], check=True, capture_output=True)
    root = tmp_path / "reports" / "run-1"
    (root / "logs").mkdir(parents=True)
    (root / "report.html").write_text("<html>SIGNED OFF</html>\n")
    (root / "junit.xml").write_text("<testsuites/>\n")
    (root / "evidence.json").write_text(json.dumps({"run": {"verdict": "SIGNED OFF"}}) + "\n")
    (root / "logs" / "T5-stdout.txt").write_text("long output\n")
    target = tmp_path / "site.yaml"
    target.write_text("version: 1\n")
    signer = resolve_signer(str(key))
    sign_run(
        root,
        signer,
        run_id="run-1",
        plugin="pytest-slurmflox 0.1.0",
        verdict=VERDICT,
        target=target,
        target_source="--slurmflox-target",
    )
    allowed = tmp_path / "allowed_signers"
    allowed.write_text(f"alice@site-a {(tmp_path / 'alice.pub').read_text()}")
    return {
        "root": root,
        "allowed": allowed,
        "key": key,
        "fingerprint": _fingerprint(tmp_path / "alice.pub"),
        "target": target,
        "tmp": tmp_path,
    }


def _verify_cli(root: Path, allowed: Path) -> subprocess.CompletedProcess[str]:
    """``pytest --slurmflox-verify=DIR --slurmflox-allowed-signers=FILE`` as a reader runs it."""
    argv = [sys.executable, "-m", "pytest", "-p", "no:randomly", "-p", "no:cacheprovider"]
    argv += [f"--slurmflox-verify={root}", f"--slurmflox-allowed-signers={allowed}"]
    return subprocess.run(argv, cwd=root.parent, capture_output=True, text=True, timeout=120, check=False)


def test_a_signed_run_verifies_saying_who_signed_which_verdict_and_when(signed):
    proc = _verify_cli(signed["root"], signed["allowed"])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    said = proc.stdout
    assert f"signed by alice@site-a (key {signed['fingerprint']}) at 20" in said and VERDICT in said, said
    manifest = Manifest.parse((signed["root"] / MANIFEST).read_text())
    assert set(manifest.files) == {"report.html", "junit.xml", "evidence.json", "logs/T5-stdout.txt"}
    assert manifest.target["path"] == str(signed["target"]) and len(manifest.target["sha256"]) == 64
    assert manifest.plugin == "pytest-slurmflox 0.1.0" and manifest.signer["comment"] == "alice@site-a"
    assert f"{signed['root']}: VERIFIED" in said


def test_one_changed_byte_in_evidence_fails_naming_it(signed):
    evidence = signed["root"] / "evidence.json"
    data = bytearray(evidence.read_bytes())
    data[data.index(b"SIGNED")] = ord("Z")
    evidence.write_bytes(bytes(data))
    proc = _verify_cli(signed["root"], signed["allowed"])
    assert proc.returncode == 1, proc.stdout + proc.stderr
    failed = [line for line in proc.stdout.splitlines() if "FAILED" in line]
    assert failed == ["slurmflox: FAILED: evidence.json: changed since it was signed"], proc.stdout
    assert "NOT VERIFIED" in proc.stdout


def test_a_missing_and_an_added_file_fail_naming_them(signed):
    (signed["root"] / "junit.xml").unlink()
    (signed["root"] / "logs" / "extra.txt").write_text("added later\n")
    ok, lines = verify_run(signed["root"], signed["allowed"])
    assert not ok
    assert "FAILED: junit.xml: missing (it was signed)" in lines, lines
    assert f"FAILED: logs/extra.txt: added after signing (not in {MANIFEST})" in lines, lines


def test_a_changed_manifest_or_a_missing_signature_fails(signed):
    manifest = signed["root"] / MANIFEST
    manifest.write_text(manifest.read_text().replace("SIGNED OFF (", "SIGNED OFF  ("))
    ok, lines = verify_run(signed["root"], signed["allowed"])
    assert not ok and lines[0].startswith(f"{MANIFEST}: changed since it was signed"), lines
    (signed["root"] / SIGNATURE).unlink()
    ok, lines = verify_run(signed["root"], signed["allowed"])
    assert not ok and SIGNATURE in lines[0] and "missing" in lines[0], lines


def test_a_signer_not_in_the_allowed_signers_fails_naming_the_fingerprint(signed):
    bob = keygen(signed["tmp"] / "bob")
    others = signed["tmp"] / "others"
    others.write_text(f"bob@site-a {(signed['tmp'] / 'bob.pub').read_text()}")
    proc = _verify_cli(signed["root"], others)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert f"unknown signer: key {signed['fingerprint']} is not in {others}" in proc.stdout, proc.stdout
    assert _fingerprint(bob.with_suffix(".pub")) not in proc.stdout


def test_the_agents_first_key_signs(tmp_path, monkeypatch):
    key = keygen(tmp_path / "carol")
    root = tmp_path / "run"
    root.mkdir()
    (root / "evidence.json").write_text("{}\n")
    with running_agent(tmp_path / "agent") as agent:
        agent.add(key)
        key.unlink()  # the private key exists only in the agent
        monkeypatch.setenv("SSH_AUTH_SOCK", str(agent.sock))
        signer = resolve_signer("agent:")
        assert signer.agent and signer.fingerprint == _fingerprint(tmp_path / "carol.pub")
        sign_run(root, signer, run_id="r", plugin="p", verdict=VERDICT, target=None, target_source="")
    allowed = tmp_path / "allowed"
    allowed.write_text(f"carol {(tmp_path / 'carol.pub').read_text()}")
    ok, lines = verify_run(root, allowed)
    assert ok and lines[0].startswith(f"signed by carol (key {signer.fingerprint})"), lines


def test_a_key_that_cannot_sign_is_refused_before_anything_runs(tmp_path, monkeypatch):
    with pytest.raises(SigningError, match="no such key file"):
        resolve_signer(str(tmp_path / "nope"))
    locked = keygen(tmp_path / "locked", passphrase="secret words")
    with pytest.raises(SigningError, match=r"without a passphrase.*--slurmflox-sign=agent:"):
        resolve_signer(str(locked))
    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)
    with pytest.raises(SigningError, match="no ssh-agent"):
        resolve_signer("agent:")


FAKE_CHECK = """
import pytest

pytestmark = pytest.mark.acceptance


@pytest.mark.T3
def test_passes():
    pass
"""


def test_a_run_signed_through_the_plugin_says_so_in_its_report_and_verifies(tmp_path, monkeypatch):
    """``--slurmflox-sign=KEY`` on a run of a fake check: the report states the signer, the folder verifies."""
    key = keygen(tmp_path / "dana")
    login = keygen(tmp_path / "login")
    target = tmp_path / "site.yaml"
    target.write_text(
        "version: 1\nname: fake-site\nsubstrate: existing\n"
        f"login: {{host: 127.0.0.1, port: 22, user: a, key: {login}}}\n"
    )
    (tmp_path / "checks").mkdir()
    (tmp_path / "checks" / "test_fake_signed.py").write_text(FAKE_CHECK)
    monkeypatch.setenv("SLURMFLOX_WORKDIR", str(tmp_path / "operator"))
    argv = [sys.executable, "-m", "pytest", "-p", "no:randomly", "-p", "no:cacheprovider", "-p", "no:xdist"]
    argv += [f"--slurmflox-target={target}", f"--slurmflox-reports={tmp_path / 'reports'}", "--slurmflox-run-id=s1"]
    argv += [f"--slurmflox-sign={key}", str(tmp_path / "checks")]
    proc = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, timeout=300, check=False, env=os.environ)
    root = tmp_path / "reports" / "s1"
    fingerprint = _fingerprint(tmp_path / "dana.pub")
    assert f"slurmflox: signed with ED25519 key {fingerprint}" in proc.stdout, proc.stdout[-3000:]
    assert (root / SIGNATURE).is_file() and proc.returncode in (0, 1), proc.stdout[-3000:]
    report = (root / "report.html").read_text()
    assert "Signed sign-off" in report and fingerprint in report and NAMESPACE in report
    allowed = tmp_path / "allowed"
    allowed.write_text(f"dana {(tmp_path / 'dana.pub').read_text()}")
    ok, lines = verify_run(root, allowed)
    manifest = Manifest.parse((root / MANIFEST).read_text())
    assert ok, lines
    assert {"report.html", "junit.xml", "evidence.json"} <= set(manifest.files)
    assert manifest.verdict == json.loads((root / "evidence.json").read_text())["run"]["verdict_line"]
    assert manifest.target["path"] == str(target.resolve())
    bad = subprocess.run(
        [*argv[:-2], f"--slurmflox-sign={tmp_path / 'nope'}", argv[-1]],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert bad.returncode == 4 and "no such key file (nothing was run)" in bad.stderr, bad.stdout + bad.stderr


def test_a_manifest_re_signed_by_another_trusted_key_fails_naming_both(signed):
    """The report states who signs (before it is hashed); another key that re-signs the same manifest is trusted,
    but it is not the signer the report and the manifest name."""
    erin = keygen(signed["tmp"] / "erin")
    (signed["root"] / SIGNATURE).unlink()
    made = subprocess.run(
        ["ssh-keygen", "-Y", "sign", "-f", str(erin), "-n", NAMESPACE, str(signed["root"] / MANIFEST)],
        capture_output=True,
        check=False,
    )
    assert made.returncode == 0, made.stderr
    with signed["allowed"].open("a") as handle:
        handle.write(f"erin@site-a {(signed['tmp'] / 'erin.pub').read_text()}")
    ok, lines = verify_run(signed["root"], signed["allowed"])
    erin_key = _fingerprint(signed["tmp"] / "erin.pub")
    assert not ok and f"FAILED: {MANIFEST} names signer {signed['fingerprint']}, but {erin_key} signed it" in lines
