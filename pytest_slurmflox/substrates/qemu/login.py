"""The login endpoint's SSH host keys, pinned from where the Slinky operator keeps them.

The operator generates the LoginSet's host keys once and stores them in an immutable Secret that the login pods
mount as /etc/ssh/ssh_host_*_key[.pub] (slurm-operator v1.2.1 ``internal/builder/loginbuilder/login_secret.go``
``BuildLoginSshHostKeys``; name from ``api/v1beta1/loginset_keys.go`` ``SshHostKeys()``: ``<loginset>-ssh-host-keys``;
data keys from ``loginbuilder/login_app.go``: ``ssh_host_{ecdsa,ed25519,rsa}_key`` and ``.pub``). Each public key
is ``ssh.MarshalAuthorizedKey`` output (``internal/utils/crypto/keypair.go``): ``<type> <base64>\\n``. Reading
the public halves from that Secret and pinning them for the forwarded login port is what lets the SSH runner,
which refuses unknown host keys, reach the login pod, exactly as the local substrate pins its own login key.
"""

from __future__ import annotations

import base64
from pathlib import Path

from ...model.workdir import write_secret
from .. import SubstrateUnavailable
from ..local.keys import known_hosts_line
from .addons import SLURM_RELEASE
from .render.values import loginset_name

#: The LoginSet of our release, as the rendered values declare it (Slinky 1.2 has no default LoginSet): the chart
#: names it ``<slurm.login.name>-<key>`` = ``slurm-login-login`` (render/values.py ``loginset_name``).
LOGINSET_NAME = loginset_name(SLURM_RELEASE)
#: The public halves the operator stores (login_app.go ``SshHost*PubKeyFile``).
PUBLIC_KEY_ITEMS = ("ssh_host_ed25519_key.pub", "ssh_host_ecdsa_key.pub", "ssh_host_rsa_key.pub")


def host_keys_secret_name(loginset: str = LOGINSET_NAME) -> str:
    """``LoginSet.SshHostKeys()`` in api/v1beta1/loginset_keys.go."""
    return f"{loginset}-ssh-host-keys"


def host_public_keys(secret: dict | None, name: str) -> list[str]:
    """``type base64`` of each public host key in the operator's Secret (API shape: ``data`` is base64)."""
    if secret is None:
        raise SubstrateUnavailable(f"the operator has not created Secret {name}: the login host keys are unknown")
    data = secret.get("data") or {}
    missing = [item for item in PUBLIC_KEY_ITEMS if item not in data]
    if missing:
        raise SubstrateUnavailable(f"Secret {name} lacks {', '.join(missing)}: the login host keys are incomplete")
    keys = []
    for item in PUBLIC_KEY_ITEMS:
        fields = base64.b64decode(data[item]).decode().split()
        if len(fields) < 2 or not fields[0].startswith(("ssh-", "ecdsa-")):
            raise SubstrateUnavailable(f"Secret {name}: {item} is not an OpenSSH public key")
        keys.append(f"{fields[0]} {fields[1]}")
    return keys


def pin_host_keys(known_hosts: Path, host: str, port: int, keys: list[str]) -> None:
    """Replace every entry for ``[host]:port`` in ``known_hosts`` by ``keys``, keeping all other entries."""
    name = known_hosts_line(host, port, keys[0]).split()[0]
    kept = []
    if known_hosts.exists():
        kept = [line for line in known_hosts.read_text().splitlines() if line.split()[:1] != [name] and line.strip()]
    pinned = [known_hosts_line(host, port, key).strip() for key in keys]
    write_secret(known_hosts, "\n".join([*kept, *pinned]) + "\n")
