"""The one secret list behind redaction and the artifact scan (pure code, no processes).

A munge key is random bytes, so it begins or ends with an ASCII whitespace byte about one time in twenty. Forms
computed from the stripped value made the scan miss the base64 of such a key (issue #18: a CI run printed
"secret scan clean" over a planted key). These tests pin every edge shape and every base64 alignment explicitly,
instead of waiting for the random key that happens to have them.
"""

from __future__ import annotations

import base64
import os

import pytest

from pytest_slurmflox.model.secrets import REDACTED, Redactor, base64_forms, scan_for_secrets, secret_needles

EDGES = {
    "plain": (b"", b""),
    "leading space": (b" ", b""),
    "trailing newline": (b"", b"\n"),
    "leading tab, trailing vertical tab": (b"\t", b"\x0b"),
    "carriage return both ends": (b"\r", b"\r"),
}


@pytest.fixture(params=list(EDGES), ids=list(EDGES))
def munge_key(request, tmp_path):
    head, tail = EDGES[request.param]
    path = tmp_path / "munge.key"
    path.write_bytes(head + os.urandom(1021) + tail)
    return path


def _plants(key: bytes) -> dict[str, bytes]:
    """Every way the key's bytes can reach a text artifact: raw, hex, base64 alone or inside a longer stream."""
    plants = {"raw": b"x" + key + b"y", "hex": key.hex().encode(), "HEX": key.hex().upper().encode()}
    for offset in range(3):
        stream = base64.b64encode(os.urandom(offset) + key + os.urandom(5))
        plants[f"base64 at offset {offset}"] = b"log: " + stream + b"\n"
    plants["base64 alone"] = base64.b64encode(key)
    return plants


def test_the_scan_finds_every_form_of_the_key_whatever_its_edges(munge_key, tmp_path):
    needles = secret_needles([munge_key])
    artifact = tmp_path / "artifact.txt"
    artifact.write_text("clean\n")
    assert scan_for_secrets([artifact], needles) == []
    for name, data in _plants(munge_key.read_bytes()).items():
        artifact.write_bytes(data)
        leaks = scan_for_secrets([artifact], needles)
        assert len(leaks) == 1 and leaks[0].label.startswith("content of munge.key"), name


def test_the_redactor_hides_every_form_of_the_key_whatever_its_edges(munge_key):
    redact = Redactor()
    redact.add_file(munge_key)
    key = munge_key.read_bytes()
    for name, data in _plants(key).items():
        if name == "raw":
            continue  # not text: random bytes are never a str a runner hands over
        out = redact(data.decode())
        for form in [*base64_forms(key), key.hex().encode()]:
            assert form.decode() not in out, name
        assert REDACTED in out, name


def test_base64_forms_cover_all_three_alignments():
    secret = os.urandom(64)
    forms = base64_forms(secret)
    for offset in range(3):
        stream = base64.b64encode(os.urandom(offset) + secret + os.urandom(offset + 1))
        assert any(form in stream for form in forms), offset


def test_short_values_are_not_secrets():
    redact = Redactor()
    redact.add_value("  abc  ")
    assert redact.secrets == [] and redact("abc") == "abc"
