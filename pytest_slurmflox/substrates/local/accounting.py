"""Accounting and REST on the local substrate: the `db` node, their secrets, the associations, the REST port.

Layout (``<workdir>/local/``)::

    accounting/db_password.key   the MariaDB password of slurmdbd's StorageUser (0600, random, never rotated)
    accounting/jwt_hs256.key     the HS256 key of auth/jwt (0600): slurmctld and slurmdbd verify tokens with it
    accounting/slurmdbd.conf     slurmdbd's configuration (0600: it holds the password)
    accounting/mysql/            MariaDB's data directory, bound at /var/lib/mysql in the `db` node (kept by down)
    rest.pid.json                the loopback forwarder to slurmrestd (port recorded in state.json ``rest_port``)

Why a node of its own: slurmdbd and MariaDB are the cluster's accounting service, which Slinky runs as its own
pods (an ``Accounting`` CR next to the controller); here they run like every other daemon of the cluster, in
their own network/PID/mount namespaces, started by node-init.sh and stopped with the cluster. slurmrestd runs
in the controller node (Slinky's ``RestApi`` talks to the controller; it needs no state of its own).

The two secrets are added to the secret scan by name (``*.key`` under the work dir, see secrets.py); the
password never appears on a command line (node-init reads it from a file).
"""

from __future__ import annotations

import base64
import os
import secrets
from dataclasses import dataclass
from pathlib import Path

from ...base.run import quoted
from ...base.waits import WaitTimedOut, poll
from ...model.settings import Settings
from ...model.workdir import write_secret
from .. import SubstrateUnavailable
from .network import address_for
from .nsrunner import NamespaceRunner

DB = "db"
DB_ADDRESS_INDEX = 4
DBD_PORT = 6819
REST_PORT = 6820  #: slurmrestd's port inside the controller's namespace (Slinky's restapi default too)
ACCOUNT = "slurmflox"
#: an account of the test user whose association allows one job at a time (TA's limit check)
LIMITED_ACCOUNT = "slurmflox-limited"
LIMITED_MAX_JOBS = 1
#: a login-node user with no association at all (TA: refused at submission)
UNASSOCIATED_USER = "sfxstranger"
UNASSOCIATED_UID = 61999
DB_NAME = "slurm_acct_db"
DB_USER = "slurm"
JWT_KEY_IN_NODE = "/run/slurmflox/jwt_hs256.key"
#: How jobs' resource use is gathered for accounting. jobacct_gather/cgroup reads the cgroup v1 cpuacct and memory
#: controllers; the nodes here are given freezer, cpuset and memory only (cgroups.py), so the polling Linux plugin
#: (/proc of the job's processes) is used, which records the same per-step fields sacct shows.
JOBACCT_GATHER = "jobacct_gather/linux"


def controller_boot(settings: Settings) -> dict[str, str]:
    """The controller's boot.env entries for slurmrestd, and the test user it must resolve: auth/jwt maps a token's
    user name to a uid in slurmctld, and `scontrol token` needs the caller's name there."""
    s = settings
    return {
        "REST_PORT": str(REST_PORT),
        **{"TEST_USER": s.test_user, "TEST_UID": str(s.test_uid), "TEST_GID": str(s.test_gid)},
        "TEST_GROUP": s.test_user,
    }


def db_address() -> str:
    return address_for(DB_ADDRESS_INDEX)


@dataclass(frozen=True)
class AccountingFiles:
    """Where the accounting secrets and data live on the host side."""

    root: Path  #: <workdir>/local/accounting

    @property
    def password(self) -> Path:
        return self.root / "db_password.key"

    @property
    def jwt_key(self) -> Path:
        return self.root / "jwt_hs256.key"

    @property
    def dbd_conf(self) -> Path:
        return self.root / "slurmdbd.conf"

    @property
    def data(self) -> Path:
        return self.root / "mysql"

    def ensure(self) -> None:
        """Generate the password and the JWT key once (0600); a rerun reuses them (the database keeps the
        password it was given and tokens stay valid)."""
        self.root.mkdir(parents=True, exist_ok=True)
        self.root.chmod(0o700)
        if not self.password.is_file() or self.password.stat().st_size < 16:
            # letters and digits only: the value is written into slurmdbd.conf and an SQL string literal
            write_secret(self.password, base64.b32encode(os.urandom(20)).decode().rstrip("=").lower())
        if not self.jwt_key.is_file() or self.jwt_key.stat().st_size < 32:
            write_secret(self.jwt_key, secrets.token_bytes(64))  # HS256 key: Slurm's jwt.html suggests random bytes
        self.data.mkdir(exist_ok=True)

    def write_dbd_conf(self, text: str) -> None:
        if not self.dbd_conf.is_file() or self.dbd_conf.read_text() != text:
            write_secret(self.dbd_conf, text)

    def boot(self) -> dict[str, str]:
        """The db node's boot.env entries (paths only; node-boot installs the files into the node's /run)."""
        return {
            "DB_DATA": str(self.data),
            "DB_PASSWORD_FILE": str(self.password),
            "DBD_CONF": str(self.dbd_conf),
            "JWT_KEY": str(self.jwt_key),
        }


def render_slurmdbd_conf(password: str, auth: str = "slurm") -> str:
    """slurmdbd.conf: the cluster's own RPC authentication (``auth``: auth/slurm with client identities from the
    login node's sackd, or auth/munge where the suite's Slurm has no auth/slurm, bookworm's 22.05; munged runs on
    the db node too), auth/jwt as the alternative (REST tokens), storage in the db node's own MariaDB over its unix
    socket. slurmdbd refuses RPCs from a daemon or client authenticating with another plugin."""
    if auth not in ("munge", "slurm"):
        raise ValueError(f"auth must be munge or slurm, not {auth!r}")
    rpc = ["AuthType=auth/munge"] if auth == "munge" else ["AuthType=auth/slurm", "AuthInfo=use_client_ids"]
    lines = [
        "# Generated by pytest-slurmflox (local substrate). 0600: holds the storage password.",
        *rpc,
        "AuthAltTypes=auth/jwt",
        f"AuthAltParameters=jwt_key={JWT_KEY_IN_NODE}",
        f"DbdHost={DB}",
        f"DbdPort={DBD_PORT}",
        "SlurmUser=slurm",
        "DebugLevel=info",
        "LogFile=/var/log/slurm/slurmdbd.log",
        "PidFile=/run/slurmdbd/slurmdbd.pid",
        "StorageType=accounting_storage/mysql",
        "StorageHost=localhost",
        "StoragePort=3306",
        f"StorageLoc={DB_NAME}",
        f"StorageUser={DB_USER}",
        f"StoragePass={password}",
    ]
    return "\n".join(lines) + "\n"


@dataclass(frozen=True)
class Association:
    account: str
    user: str
    max_jobs: str


def read_associations(ctl: NamespaceRunner, cluster: str) -> list[Association] | None:
    """The cluster's associations as slurmdbd lists them (None when slurmdbd does not answer)."""
    res = ctl.run(quoted("sacctmgr -n -P show assoc cluster=%s format=account,user,maxjobs", cluster), timeout=20)
    if res.exit_status != 0:
        return None
    out = []
    for line in res.stdout.splitlines():
        parts = line.strip().split("|")
        if len(parts) == 3:
            out.append(Association(*parts))
    return out


#: slurm.conf's SlurmUser. Under AccountingStorageEnforce=associations it needs an association like any user:
#: Slurm's own admin paths run jobs as SlurmUser (Slurm's testsuite in local-config mode failed them without one).
SLURM_USER = "slurm"
SLURM_USER_ACCOUNT = "root"  #: the cluster's root account, which slurmctld's registration creates


def association_steps(have: list[Association], cluster: str, user: str) -> list[str]:
    """The sacctmgr commands that add what ``have`` lacks: the accounts ``slurmflox`` and ``slurmflox-limited``, the
    test user in both (MaxJobs on the limited one), and SlurmUser in the root account; none when all is there."""
    steps: list[str] = []
    accounts = {a.account for a in have}
    for account in (ACCOUNT, LIMITED_ACCOUNT):
        if account not in accounts:
            add = "sacctmgr -i add account %s cluster=%s description=slurmflox org=slurmflox"
            steps.append(quoted(add, account, cluster))
    users = {(a.account, a.user): a for a in have if a.user}
    if (ACCOUNT, user) not in users:
        steps.append(
            quoted("sacctmgr -i add user %s account=%s defaultaccount=%s cluster=%s", user, ACCOUNT, ACCOUNT, cluster)
        )
    limited = users.get((LIMITED_ACCOUNT, user))
    if limited is None:
        steps.append(quoted("sacctmgr -i add user %s account=%s cluster=%s", user, LIMITED_ACCOUNT, cluster))
    if limited is None or limited.max_jobs != str(LIMITED_MAX_JOBS):
        modify = "sacctmgr -i modify user where user=%s account=%s cluster=%s set maxjobs=%s"
        steps.append(quoted(modify, user, LIMITED_ACCOUNT, cluster, LIMITED_MAX_JOBS))
    if (SLURM_USER_ACCOUNT, SLURM_USER) not in users:
        add = "sacctmgr -i add user %s account=%s defaultaccount=%s cluster=%s"
        steps.append(quoted(add, SLURM_USER, SLURM_USER_ACCOUNT, SLURM_USER_ACCOUNT, cluster))
    return steps


def ensure_associations(ctl: NamespaceRunner, cluster: str, user: str, timeout: float = 60.0) -> bool:
    """The cluster, the accounts, the test user's and SlurmUser's associations, created with sacctmgr where missing
    (idempotent: an unchanged cluster costs one query; :func:`association_steps`). Returns True when something was
    added."""

    def registered() -> list[Association] | None:
        # slurmctld registers the cluster with slurmdbd shortly after it starts (root account, root association)
        have = read_associations(ctl, cluster)
        return have if have is not None and any(a.account == "root" and not a.user for a in have) else None

    try:
        have = poll(registered, what=f"cluster {cluster} in slurmdbd", timeout=timeout, interval=0.2)
    except WaitTimedOut:
        res = ctl.run(quoted("sacctmgr -n -P show assoc cluster=%s", cluster), timeout=20)
        raise SubstrateUnavailable(f"local: slurmdbd does not list cluster {cluster}: {res.describe()}") from None
    return _run_steps(ctl, association_steps(have, cluster, user))


def _run_steps(ctl: NamespaceRunner, steps: list[str]) -> bool:
    """Run the sacctmgr ``steps`` (each built with quoted()) as one command; True when there were any."""
    if not steps:
        return False
    res = ctl.run(" && ".join(steps), timeout=60)
    if res.exit_status != 0:
        raise SubstrateUnavailable(f"local: creating the associations failed: {res.describe()}")
    return True
