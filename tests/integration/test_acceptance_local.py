"""Integration: the acceptance suites against a real local substrate, and proof that they can fail.

One cluster for the module, provisioned the way a user does it (``pytest --slurmflox-up=local -m acceptance`` in a
subprocess, with a private work dir and port). Then each mutation breaks one property of the running cluster
through a root shell inside a node (or the owner's record on the host), runs the matching group against the
recorded deployment, asserts that group FAILS naming what is wrong, puts the property back and asserts the group
PASSES again. A suite that cannot fail is a defect. docs/evidence-table.md maps each group to its mutation here.
"""

from __future__ import annotations

import json
import time

import pytest
import yaml
from acceptance_helpers import (
    assert_local_acceptance,
    cluster_of,
    deployed,
    mutated,
    node_sh,
    passes_again,
    run_pytest,
    task_prolog_exporting,
)

from pytest_slurmflox.harness.concurrency import AUTO_WORKERS

pytestmark = pytest.mark.integration

PROFILE = "/run/flox-task-profile/current"


@pytest.fixture(scope="module")
def deployment(tmp_path_factory):
    # serial on purpose: the reference the concurrent default run is compared with (test_xdist_...)
    with deployed(tmp_path_factory, "acceptance", "-m", "acceptance", "--slurmflox-workers=0") as recorded:
        yield recorded


def test_acceptance_run_passes_everything_it_can_and_skips_the_rest_with_reasons(deployment):
    _, _, _, run = deployment
    assert_local_acceptance(run)


def _profile_edit(file: str, sed: str) -> str:
    return f"cd {PROFILE} && cp {file} /tmp/.sfx-{file}.bak && sed -i {sed} {file}"


def _profile_restore(file: str) -> str:
    return f"cd {PROFILE} && cp /tmp/.sfx-{file}.bak {file}"


def test_flipped_path_policy_fails_tp(deployment):
    flip = "-e 's/^prepend$/SWAP/' -e 's/^append$/prepend/' -e 's/^SWAP$/append/'"
    cmds = {
        w: (_profile_edit("path-precedence", flip), _profile_restore("path-precedence")) for w in ("worker1", "worker2")
    }
    run = mutated(deployment, cmds, "-m", "TP", "-k", "srun and default")
    assert run.outcomes("failure"), run.output[-3000:]
    assert "PATH is " in run.messages() and "expected" in run.messages(), run.output[-3000:]


def test_extra_non_allow_listed_variable_fails_t3(deployment):
    cmds = {
        "worker1": (
            f"cd {PROFILE} && cp exports /tmp/.sfx-exports.bak && echo SFX_SMUGGLED=1 >> exports",
            _profile_restore("exports"),
        )
    }
    run = mutated(deployment, cmds, "-m", "T3")
    failed = run.outcomes("failure")
    assert any("exports_exactly_the_allow_listed" in f for f in failed), run.output[-3000:]
    assert "extra ['SFX_SMUGGLED']" in run.messages(), run.output[-3000:]


def test_profile_removed_from_one_worker_fails_t3(deployment):
    cmds = {"worker2": (f"mv {PROFILE} {PROFILE}.sfx-moved", f"mv {PROFILE}.sfx-moved {PROFILE}")}
    run = mutated(deployment, cmds, "-m", "T3")
    assert run.outcomes("failure"), run.output[-3000:]


def test_worker_with_another_revision_fails_t11(deployment):
    other = "sha256:" + "0" * 64
    cmds = {"worker1": (_profile_edit("revision", f"'s/^.*$/{other}/'"), _profile_restore("revision"))}
    run = mutated(deployment, cmds, "-m", "T11")
    assert any("reports_the_expected_revision" in f for f in run.outcomes("failure")), run.output[-3000:]


def test_shared_home_unmounted_on_one_worker_fails_t9(deployment):
    cmds = {"worker2": ("mount -t tmpfs -o mode=1777 sfx-hide-home /home", "umount /home")}
    run = mutated(deployment, cmds, "-m", "T9")
    assert any("write_on_one_worker" in f for f in run.outcomes("failure")), run.output[-3000:]


def test_other_generations_content_under_the_pinned_path_fails_t2(deployment):
    """Issue case 1: the worker's realized environment replaced by another generation's content while every
    profile file still names the pinned generation. T2 recomputes the content digest on the worker."""
    from pytest_slurmflox.substrates.local import image, nix

    _, workdir, _, _ = deployment
    # what the substrate recorded for the node on the host (the owner's record, not the worker's)
    pinned = cluster_of(workdir).node("worker1").annotations()["realized_path"]
    other = nix.NixStore(image.cache_root() / "nix").realize("local/demo:2")
    cmds = {"worker1": (f"mount --bind {other} {pinned}", f"umount {pinned}")}
    run = mutated(deployment, cmds, "-m", "T2 or T3 or TP or T11")
    failed = run.outcomes("failure")
    assert any("test_every_worker_has_the_pinned_generations_content" in f for f in failed), run.output[-3000:]
    message = run.messages()
    assert "worker1: content at " + pinned in message and "worker2:" not in message, message[-3000:]
    passes_again(deployment, "-m", "T2")


def test_task_prolog_adding_variables_fails_tp_and_t10(deployment):
    """Issue case 2: the TaskProlog also prints LD_LIBRARY_PATH and a FloxHub token; tasks on that worker carry
    both. TP computes the exact task environment; T10 forbids credentials in tasks."""
    breaks = task_prolog_exporting("export LD_LIBRARY_PATH=/opt/x", "export FLOXHUB_TOKEN=sfx-not-a-token")
    run = mutated(deployment, {"worker1": breaks}, "-m", "TP or T10")
    failed = run.outcomes("failure")
    assert any(f.startswith("test_tp_provenance::test_srun_task_environment") for f in failed), run.output[-3000:]
    assert any(f.startswith("test_tp_provenance::test_sbatch_task_environment") for f in failed), run.output[-3000:]
    assert any("no_pod_or_floxhub_credentials" in f for f in failed), run.output[-3000:]
    message = run.messages()
    assert "unexpected variable LD_LIBRARY_PATH='/opt/x'" in message, message[-3000:]
    assert "unexpected variable FLOXHUB_TOKEN" in message and "found ['FLOXHUB_TOKEN']" in message, message[-3000:]
    assert "on worker2" not in message, message[-3000:]
    passes_again(deployment, "-m", "TP or T10")


def test_login_commands_not_executable_fail_t9(deployment):
    """Issue case 4: squeue and srun non-executable on the login endpoint; each client command is checked alone."""
    tools = "/usr/bin/squeue /usr/bin/srun"
    cmds = {"login": (f"chmod a-x {tools}", f"chmod 0755 {tools}")}
    run = mutated(deployment, cmds, "-m", "T9", "-k", "client_command")
    failed = run.outcomes("failure")
    assert failed == [
        "test_t09_storage_login::test_login_endpoint_has_the_slurm_client_command[squeue]",
        "test_t09_storage_login::test_login_endpoint_has_the_slurm_client_command[srun]",
    ], run.output[-3000:]
    assert len(run.outcomes("passed")) == 3, run.output[-3000:]
    passes_again(deployment, "-m", "T9")


def test_missing_allow_listed_variable_fails_t3_and_tp(deployment):
    """The default local allow-list is SLURMFLOX_DEMO_GENERATION; a profile that lost it must fail T3 (against the
    provider's record) and TP (the task lacks it)."""
    cmds = {
        "worker2": (
            f"cd {PROFILE} && cp exports /tmp/.sfx-exports.bak && sed -i /^SLURMFLOX_DEMO_GENERATION=/d exports",
            _profile_restore("exports"),
        )
    }
    run = mutated(deployment, cmds, "-m", "T3 or TP", "-k", "exports or srun and NONE")
    message = run.messages()
    assert "missing ['SLURMFLOX_DEMO_GENERATION']" in message, run.output[-3000:]
    assert "allow-listed SLURMFLOX_DEMO_GENERATION is None" in message, run.output[-3000:]
    passes_again(deployment, "-m", "T3 or TP", "-k", "exports or srun and NONE")


def test_unready_worker_in_the_partition_fails_the_cohort(deployment):
    """A drained worker is not silently dropped from the cohort: the checks FAIL naming it."""
    cmds = {
        "ctl": (
            "scontrol update nodename=worker2 state=drain reason=sfx-mutation",
            "scontrol update nodename=worker2 state=resume",
        )
    }
    run = mutated(deployment, cmds, "-m", "T2")
    # the cohort pre-flight (#16) decides it in the first check's setup: an error there, every check blocked by it
    assert "test_t02_pinned_realization::test_cohort_is_what_slurm_lists_and_the_owner_owns" in run.outcomes("error"), (
        run.output[-3000:]
    )
    assert "worker2 is in partition all but not serving (state drained)" in run.messages("error"), run.output[-3000:]
    assert run.outcomes("skipped") == [] or all(
        "missing capability kubernetes" in m for o, m in run.cases.values() if o == "skipped"
    ), run.output[-3000:]
    passes_again(deployment, "-m", "T2")


def test_drained_worker_fails_the_preflight_fast_and_blocks_the_run(deployment):
    """#16: the default acceptance run with one worker drained reports the pre-flight FAIL naming that worker
    within 60 s, every other check blocked by the same cause (no check waits for its own timeout)."""
    home, workdir, common, _ = deployment
    node_sh(workdir, "ctl", "scontrol update nodename=worker2 state=drain reason=sfx-preflight")
    try:
        began = time.monotonic()
        run = run_pytest(home, "-m", "acceptance", *common, timeout=600)
        elapsed = time.monotonic() - began
    finally:
        node_sh(workdir, "ctl", "scontrol update nodename=worker2 state=resume")
    assert elapsed < 60, f"the drained-worker run took {elapsed:.0f} s"
    assert run.outcomes("passed") == [], run.output[-3000:]
    blocked = [m for o, m in run.cases.values() if o == "error"]
    assert blocked and all("worker2 is in partition all but not serving (state drained)" in m for m in blocked), (
        run.output[-3000:]
    )


def test_node_its_owner_does_not_list_fails_the_cohort(deployment):
    """A node in the partition that the owner (local pool) does not list is foreign: FAIL naming it."""
    _, workdir, _, _ = deployment
    state_file = workdir / "local" / "state.json"
    original = state_file.read_text()
    home, _, common, _ = deployment
    try:
        doc = json.loads(original)
        doc["workers"] = [w for w in doc["workers"] if w != "worker2"]
        state_file.write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n")
        run = run_pytest(home, "-m", "T2", "-k", "cohort", *common, timeout=600)
    finally:
        state_file.write_text(original)
    # The cohort is established by a fixture, so its FAIL reaches JUnit as an error of each check that needs it.
    said = run.messages() + run.messages("error")
    assert "worker2 is in partition all but its owner does not list it (foreign)" in said, run.output[-3000:]
    passes_again(deployment, "-m", "T2", "-k", "cohort")


def test_declared_but_unreachable_kubernetes_fails_instead_of_skipping(deployment, tmp_path):
    """A target file that declares Kubernetes whose API does not answer: the Kubernetes checks FAIL with the
    error. The same cluster without the declaration SKIPs them, naming the missing capability."""
    home, workdir, common, _ = deployment
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:1"}}],
                "users": [{"name": "u", "user": {"token": "sfx-unused"}}],
                "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "x",
            }
        )
    )
    doc = yaml.safe_load((workdir / "target.yaml").read_text())
    doc["kubernetes"] = {"kubeconfig": str(kubeconfig), "namespace": "slurm", "nodeset": "slurm-worker-compute"}
    declared = tmp_path / "target-with-kubernetes.yaml"
    declared.write_text(yaml.safe_dump(doc, sort_keys=False))
    run = run_pytest(home, "-m", "T1 or T4", f"--slurmflox-target={declared}", *common, timeout=600)
    failed = run.outcomes("failure")
    assert "test_t04_ordinary_sbatch::test_submission_creates_no_kubernetes_object" in failed, run.output[-3000:]
    assert any(f.startswith("test_t01_flox_shim::") for f in failed), run.output[-3000:]
    assert "declared capability kubernetes" in run.messages(), run.output[-3000:]
    assert not any("missing capability kubernetes" in m for _, m in run.cases.values()), run.output[-3000:]
    plain = run_pytest(home, "-m", "T1 or T4", *common, timeout=600)
    assert plain.outcomes("failure") == [] and all(
        "missing capability kubernetes" in m for o, m in plain.cases.values() if o == "skipped"
    ), plain.output[-3000:]


def test_after_restoring_every_mutation_the_groups_pass_again(deployment):
    home, _, common, _ = deployment
    run = run_pytest(home, "-m", "T2 or T3 or T9 or T10 or T11 or TP", *common, timeout=600)
    assert run.outcomes("failure") == [] and run.outcomes("passed"), run.output[-3000:]


def test_xdist_provisions_once_and_gives_the_serial_result(deployment):
    """The default acceptance run is concurrent (#16: pytest-xdist workers, the long waits first); the controller
    converges the deployment once, the workers reuse its target, and the verdicts are the serial run's."""
    home, _, common, serial = deployment
    run = run_pytest(home, "--slurmflox-up=local", "-m", "acceptance", *common)
    assert f"{AUTO_WORKERS} workers [" in run.output, run.output[:3000]  # xdist: "N workers [M items]"
    assert run.output.count("up: substrate local") == 1, run.output[-3000:]
    assert "nothing to do" in run.output, run.output[-3000:]  # the rerun took the fast path
    for outcome in ("passed", "skipped", "failure"):
        assert run.outcomes(outcome) == serial.outcomes(outcome), (outcome, run.output[-4000:])
