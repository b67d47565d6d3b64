"""check-pins.sh, run for real: bash, curl and the project's _lib.sh against an HTTPS server on loopback.

What it must do on a host with internet (``provision/guest/check-pins.sh``): ask upstream whether every pinned
download exists (HTTP HEAD, redirects followed) and stop with one ``slurmflox-missing:`` line naming a pin that
does not, before anything is installed. The server here answers like the upstream hosts do for an existing and
a missing release file (200 after a redirect, 404). Helm cannot run here (no binary), so ``helm show chart`` is
a stand-in script that prints what helm prints for an OCI tag that does not exist ("Error: <ref>: not found", as
in helm's own issue threads); only its classification is under test there.
"""

from __future__ import annotations

import datetime
import http.server
import ipaddress
import os
import ssl
import subprocess
import threading
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from pytest_slurmflox.model.settings import resolve
from pytest_slurmflox.substrates.qemu import addons
from pytest_slurmflox.substrates.qemu.guest import guest_script
from pytest_slurmflox.substrates.qemu.provision import missing_line

if subprocess.run(["which", "curl"], capture_output=True).returncode != 0:
    pytest.skip("curl is not installed", allow_module_level=True)


def self_signed(tmp: Path) -> tuple[Path, Path]:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), True)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = tmp / "cert.pem", tmp / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return cert_path, key_path


class Upstream(http.server.BaseHTTPRequestHandler):
    """Existing files answer 200 (a release download first redirects, as github.com does); others 404."""

    existing = {"/flox-1.14.1.x86_64-linux.deb", "/flox-1.14.1.x86_64-linux.rpm", "/storage.yaml", "/store/cm.yaml"}
    heads: list[str] = []

    def do_HEAD(self) -> None:
        type(self).heads.append(self.path)
        if self.path == "/releases/cm.yaml":
            self.send_response(302)
            self.send_header("Location", "/store/cm.yaml")
        else:
            self.send_response(200 if self.path in self.existing else 404)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def upstream(tmp_path):
    cert, key = self_signed(tmp_path)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Upstream)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(cert, key)
    server.socket = ctx.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    Upstream.heads = []
    yield f"https://127.0.0.1:{server.server_address[1]}", cert
    server.shutdown()
    server.server_close()


def helm_standin(tmp: Path, missing_version: str | None) -> Path:
    helm = tmp / "helm"
    helm.write_text(
        "#!/bin/sh\n"
        f'if [ "$5" = "{missing_version}" ]; then echo "Error: ${{3#oci://}}:$5: not found" >&2; exit 1; fi\n'
        'echo "apiVersion: v2"; echo "version: $5"\n'
    )
    helm.chmod(0o755)
    return helm


def run_pins(helm: Path, cert: Path, slinky: str, flox_base: str, *triples: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "CURL_CA_BUNDLE": str(cert)}
    args = [str(helm), addons.CHART_REPO, slinky, "1.14.1", f"{flox_base}/flox-1.14.1.x86_64-linux.deb"]
    args += [f"{flox_base}/flox-1.14.1.x86_64-linux.rpm", *triples]
    return subprocess.run(
        ["bash", "-s", "--", *args], input=guest_script("check-pins.sh"), capture_output=True, text=True, env=env
    )


def test_every_pin_that_exists_passes(upstream, tmp_path):
    base, cert = upstream
    proc = run_pins(
        helm_standin(tmp_path, None),
        cert,
        "1.2.1",
        base,
        *(
            "cert-manager",
            "v1.19.2",
            f"{base}/releases/cm.yaml",
            "local-path-provisioner",
            "v0.0.31",
            f"{base}/storage.yaml",
        ),
    )
    assert proc.returncode == 0, proc.stderr
    assert "Slinky chart slurm 1.2.1 exists" in proc.stdout
    assert f"cert-manager v1.19.2: {base}/releases/cm.yaml exists" in proc.stdout  # the redirect was followed
    assert {"/releases/cm.yaml", "/store/cm.yaml", "/storage.yaml"} <= set(Upstream.heads)


def test_a_missing_download_stops_with_one_line_naming_the_version(upstream, tmp_path):
    base, cert = upstream
    proc = run_pins(helm_standin(tmp_path, None), cert, "1.2.1", base, "flannel", "v9.9.9", f"{base}/kube-flannel.yml")
    assert proc.returncode == 1
    line = missing_line(proc.stderr)
    assert line == f"flannel v9.9.9 does not exist upstream ({base}/kube-flannel.yml: HTTP 404)"


def test_a_missing_flox_package_is_named(upstream, tmp_path):
    base, cert = upstream
    proc = run_pins(helm_standin(tmp_path, None), cert, "1.2.1", f"{base}/gone")
    assert proc.returncode == 1
    assert missing_line(proc.stderr).startswith("Flox package 1.14.1 does not exist upstream (")


def test_a_missing_chart_version_is_named_before_any_download_is_checked(upstream, tmp_path):
    base, cert = upstream
    proc = run_pins(helm_standin(tmp_path, "1.2.2"), cert, "1.2.2", base)
    assert proc.returncode == 1
    assert missing_line(proc.stderr) == (
        "Slinky chart slurm-operator-crds 1.2.2 does not exist upstream (oci://ghcr.io/slinkyproject/charts/"
        "slurm-operator-crds: Error: ghcr.io/slinkyproject/charts/slurm-operator-crds:1.2.2: not found)"
    )
    assert Upstream.heads == []


def test_the_plan_checks_pins_first_with_every_pinned_url():
    s = resolve().settings
    steps = addons.pin_check_steps(s)
    assert [st.script for st in steps] == ["install-helm.sh", "check-pins.sh"]
    args = steps[1].args
    assert args[:4] == (addons.HELM_BIN, addons.CHART_REPO, s.slinky_version, s.flox_version)
    for url in (
        addons.flox_package_url(s.flox_version, "deb"),
        addons.flox_package_url(s.flox_version, "rpm"),
        addons.flannel_url(s.flannel_version),
        addons.cert_manager_url(s.cert_manager_version),
        addons.local_path_url(s.local_path_version),
    ):
        assert url in args
