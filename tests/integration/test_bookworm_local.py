"""Integration: the default acceptance against a bookworm local cluster, Debian's Slurm 22.05 (issue 17, item 5).

bookworm's Slurm has neither sackd nor auth/slurm (both 23.11), so its local cluster runs auth/munge for RPCs and
job credentials, munged on every node, and the controller resolving users through the cluster's directory too
(slurmctld resolves the submitting user itself, as on a site with a directory service; still no local account).
Provisioned the way a user does it (``--slurmflox-up=local --slurmflox-local-suite=bookworm -m acceptance``) in a
private work dir; destroyed at the end.

The same groups must PASS as on trixie's 24.11 (``LOCAL_PASS_GROUPS``, which
tests/integration/test_acceptance_local.py asserts for trixie's run) and SKIP only for what trixie's run SKIPs for
(Kubernetes, the Flox shim). Where Slurm differs by version, the suites decide by the version the cluster reports:
22.05 has no ``--export=NIL`` keyword and reads NIL as a variable list, so TP judges ``--export=NIL`` by that variable
list's semantics and says so in its requirement.
"""

from __future__ import annotations

import re
import time

import pytest
from acceptance_helpers import assert_local_acceptance, cluster_of, deployed, evidence_of, slurm_2205_config

pytestmark = pytest.mark.integration

SUITE = "bookworm"


@pytest.fixture(scope="module")
def deployment(tmp_path_factory):
    t0 = time.monotonic()
    with deployed(
        tmp_path_factory,
        SUITE,
        "-m",
        "acceptance",
        "--slurmflox-signoff",
        options=(f"--slurmflox-local-suite={SUITE}",),
    ) as recorded:
        print(f"[bookworm] up + signed-off acceptance: {time.monotonic() - t0:.1f}s")
        yield recorded


def test_the_cluster_runs_bookworms_slurm_with_munge_authentication(deployment):
    _, workdir, _, _ = deployment
    settings = slurm_2205_config(workdir, LOCAL_SUITE=SUITE)
    sub = cluster_of(workdir, LOCAL_SUITE=SUITE)
    ctl = sub.node_runner("ctl")
    assert (settings.get("AuthType"), settings.get("CredType")) == ("auth/munge", "cred/munge"), settings
    login = sub.node_runner("login", sub.settings.test_user)
    assert not login.run("test -e /usr/sbin/sackd").ok, "bookworm's image must not carry sackd"
    # slurmctld resolves the submitting user under auth/munge: the controller resolves it (and its groups) through
    # the directory, never from a local account
    assert not ctl.run(f"grep -q '^{sub.settings.test_user}:' /etc/passwd").ok, "no local account on ctl"
    account = ctl.run(f"id {sub.settings.test_user}")
    assert account.ok and f"({sub.settings.test_supp_group})" in account.stdout, account.describe()
    # A task's Nix on a worker is the image suite's own nix-bin (bookworm: 2.8); T2 hashes the store path with it.
    # (Measured: 2.8's `nix-store --version` opens the store and, for a task's user, fails creating its per-user
    # profile dir on the read-only /nix; as root it tries to remount /nix/store writable. nix-hash opens no store.)
    nix = login.run("cd && srun -N1 -w worker1 /usr/bin/nix-hash --version", timeout=120)
    assert nix.ok and re.search(r"\b2\.8\.", nix.stdout), nix.describe()


def test_the_same_groups_pass_as_on_trixie_and_it_is_signed_off_on_22_05(deployment):
    _, _, _, run = deployment
    assert_local_acceptance(run)
    evidence = evidence_of(run.output)["run"]
    assert evidence["verdict"] == "SIGNED OFF" and evidence["exit_status"] == 0, evidence
    # the version the cluster's own client reports (sinfo --version)
    assert re.fullmatch(r"22\.05\.\d+", evidence["target"]["Slurm version"]), evidence["target"]
    # --export=NIL was judged on 22.05 (as the variable list it is there), not skipped
    nil = [k for k in run.in_module("test_tp_provenance") if "[NIL]" in k]
    assert len(nil) == 2, run.outcomes("passed")
