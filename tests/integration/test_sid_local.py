"""Integration: Slurm 26.05 (Debian sid) signed off, and the trust mutations that FAIL on 24.11 still FAIL (issue 51).

Provisioned the way a user does it (the README's first command with ``--slurmflox-local-suite=sid``) in a private
work dir, with ``--slurmflox-local-accept-expired-release=1``: the mirror these machines reach is a snapshot whose sid
Release file has expired (harmless where it has not). The image is the cached one when its recipe is unchanged.

sid differs from trixie where Slurm does (docs/design-notes.md): Debian's 26.05.5 builds no mpi/pmix, so the image
carries MPICH and its target declares ``slurm.mpi: pmi2`` (substrates/local/mpistack.py); its workers resolve the
directory user (nslcd, 26.05 holds ``--get-user-env`` jobs otherwise); T8 reads slurmstepd's unnamed OOM report under
``srun --label``. The same groups must PASS as on trixie (``assert_local_acceptance``) and the run SIGNS OFF.

Mutations, each breaking one worker that is not the first, run against the same cluster, then restored and PASSing:
- a TaskProlog on worker2 that fails open (its refusals end ``exit 0``): T3's fail-closed check FAILs naming worker2;
- a TaskProlog on worker2 exporting ``SLURM_CONF`` (a Slurm-named variable Slurm did not set): TP FAILs naming
  worker2;
- MPI ranks that cannot talk: worker2's packets to worker1 held by tc in worker2's namespace (an htb class of 8 bit/s
  with a one-packet queue: Slurm's own port 6818 still passes, so the step launches). MPICH over UCX connects its
  ranks inside ``MPI_Init`` (measured: UCX gives up with "Destination is unreachable"), so no rank starts and T6
  FAILs naming both ends of the link, where 24.11's Open MPI started the ranks and named the silent pair.
"""

from __future__ import annotations

import re
import time

import pytest
from acceptance_helpers import (
    TASK_PROLOG,
    assert_local_acceptance,
    deployed,
    evidence_of,
    mutated,
    node_sh,
    passes_again,
    task_prolog_exporting,
)

pytestmark = pytest.mark.integration

SUITE = ("--slurmflox-local-suite=sid", "--slurmflox-local-accept-expired-release=1")


@pytest.fixture(scope="module")
def deployment(tmp_path_factory):
    t0 = time.monotonic()
    with deployed(tmp_path_factory, "sid", "-m", "acceptance", "--slurmflox-signoff", options=SUITE) as recorded:
        print(f"[sid] up + signed-off acceptance: {time.monotonic() - t0:.1f}s")
        yield recorded


def test_slurm_26_05_is_signed_off_with_the_same_groups_as_trixie(deployment):
    _, workdir, _, run = deployment
    assert_local_acceptance(run)
    evidence = evidence_of(run.output)
    assert evidence["run"]["verdict"] == "SIGNED OFF" and evidence["run"]["exit_status"] == 0, evidence["run"]
    # the version the cluster's own client reports (sinfo --version), not the one the image was built from
    assert re.fullmatch(r"26\.05\.\d+", evidence["run"]["target"]["Slurm version"]), evidence["run"]["target"]
    # T6's world was launched with the plugin the substrate's target declares for sid's MPICH
    assert "mpi: pmi2" in (workdir / "target.yaml").read_text()
    t6 = [e["command"] for c in evidence["checks"] if c["group"] == "T6" for e in c["evidence"]]
    assert any("--mpi=pmi2" in command for command in t6) and not any("--mpi=pmix" in c for c in t6), t6


def test_a_fail_open_task_prolog_on_worker2_fails_t3_naming_worker2(deployment):
    open_prolog = (
        f"cp {TASK_PROLOG} /tmp/.sfx-open-prolog.sh && sed -i 's/^\\texit 1$/\\texit 0/' /tmp/.sfx-open-prolog.sh && "
        f"! grep -qP '^\\texit 1$' /tmp/.sfx-open-prolog.sh && mount --bind /tmp/.sfx-open-prolog.sh {TASK_PROLOG}"
    )
    select = ("-m", "T3", "-k", "fails_closed")
    run = mutated(deployment, {"worker2": (open_prolog, f"umount {TASK_PROLOG}")}, *select)
    assert run.outcomes("failure") == ["test_t03_task_profile::test_task_prolog_in_force_fails_closed_on_every_worker"]
    said = re.findall(r"requirement not met: [^\n]*", run.messages())
    assert said and "worker2: TaskProlog " in said[0] and "worker1: " not in said[0], said
    passes_again(deployment, *select)


def test_a_slurm_named_variable_leaked_on_worker2_fails_tp_naming_worker2(deployment):
    breaks, restore = task_prolog_exporting("export SLURM_CONF=/tmp/x")
    select = ("-m", "TP", "-k", "srun_task_environment")
    run = mutated(deployment, {"worker2": (breaks, restore)}, *select)
    failed = run.outcomes("failure")
    assert failed and all(f.startswith("test_tp_provenance::test_srun_task_environment") for f in failed), failed
    said = re.findall(r"requirement not met: [^\n]*", run.messages())
    assert said and all("worker2" in line and "worker1" not in line for line in said), said
    assert "SLURM_CONF='/tmp/x' redirects Slurm's configuration" in run.messages(), run.messages()[-3000:]
    passes_again(deployment, *select)


def test_mpi_ranks_that_cannot_reach_each_other_fail_t6_naming_both_ends(deployment):
    _, workdir, _, _ = deployment
    worker1 = re.search(r"inet (\d+\.\d+\.\d+\.\d+)/", node_sh(workdir, "worker1", "ip -o -4 addr show dev eth0"))
    assert worker1, "worker1 has no fabric address"
    held = (  # everything worker2 sends worker1 but Slurm's own port, into a class that holds it
        "tc qdisc add dev eth0 root handle 1: htb default 10 r2q 1000000 && "
        "tc class add dev eth0 parent 1: classid 1:10 htb rate 100gbit && "
        "tc class add dev eth0 parent 1: classid 1:20 htb rate 8bit ceil 8bit burst 1 cburst 1 && "
        "tc qdisc add dev eth0 parent 1:20 handle 20: pfifo limit 1 && "
        "tc filter add dev eth0 parent 1: prio 1 protocol ip u32 match ip dport 6818 0xffff flowid 1:10 && "
        "tc filter add dev eth0 parent 1: prio 2 protocol ip u32 match ip sport 6818 0xffff flowid 1:10 && "
        f"tc filter add dev eth0 parent 1: prio 3 protocol ip u32 match ip dst {worker1.group(1)}/32 flowid 1:20"
    )
    run = mutated(deployment, {"worker2": (held, "tc qdisc del dev eth0 root")}, "-m", "T6")
    assert run.outcomes("failure") == [
        "test_t06_mpi::test_mpi_ranks_on_every_worker",
        "test_t06_mpi::test_mpi_ranks_talk_between_every_pair_of_workers",
    ], run.output[-3000:]
    said = re.findall(r"requirement not met: [^\n]*", run.messages())[0]
    assert "with a rank on each of the 2 workers" in said and "worker1: " in said and "worker2: " in said, said
    assert "test_t06_mpi::test_the_declared_mpi_plugin_is_offered" in run.outcomes("passed"), run.output[-3000:]
    passes_again(deployment, "-m", "T6")
