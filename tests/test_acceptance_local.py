"""Integration: the acceptance suites against a real local substrate, and proof that they can fail.

One cluster for the module, provisioned the way a user does it (``pytest --slurmflox-up=local -m acceptance`` in a
subprocess, with a private work dir and port). Then each mutation breaks one property of the running cluster
through a root shell inside a worker node, runs the matching group against the recorded deployment, asserts that
group FAILS, and puts the property back. A suite that cannot fail is a defect.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from acceptance_helpers import Run, destroy, private_deployment, run_pytest

pytestmark = pytest.mark.integration

PROFILE = "/run/flox-task-profile/current"


@pytest.fixture(scope="module")
def deployment(tmp_path_factory):
    home, workdir, common = private_deployment(tmp_path_factory, "acceptance")
    first = run_pytest(home, "--slurmflox-up=local", "-m", "acceptance", *common)
    try:
        yield home, workdir, common, first
    finally:
        print(destroy(home, common)[-2000:])


def test_acceptance_run_passes_everything_it_can_and_skips_the_rest_with_reasons(deployment):
    _, _, _, run = deployment
    print(run.output[-6000:])
    assert run.cases, run.output[-4000:]
    assert run.outcomes("failure") == [] and run.outcomes("error") == [], run.output[-8000:]
    assert run.rc == 0, run.output[-4000:]
    skipped = {k: m for k, (o, m) in run.cases.items() if o == "skipped"}
    for name, message in skipped.items():
        assert "missing capability" in message, (name, message)
    # Only what needs Kubernetes or the Flox shim may skip on the local substrate.
    kube_only = {"kubernetes", "flox-shim"}
    for name, message in skipped.items():
        assert any(f"missing capability {cap}" in message for cap in kube_only), (name, message)
    must_pass = [
        "test_t03_task_profile",
        "test_t05_interactive",
        "test_t06_mpi",
        "test_t07_policy",
        "test_t08_resources",
        "test_t09_storage_login",
        "test_ti_identity",
        "test_tp_provenance",
        "test_tf_failure_isolation",
        "test_t11_revision",
    ]
    passed = run.outcomes("passed")
    for module in must_pass:
        assert any(p.startswith(module + "::") for p in passed), (module, passed)
    print(f"PASSED {len(passed)}, SKIPPED {len(skipped)}: " + ", ".join(sorted(skipped)))


def _node(workdir: Path, name: str):
    from pytest_slurmflox.settings import resolve
    from pytest_slurmflox.state import Workdir
    from pytest_slurmflox.substrates.local import LocalSubstrate

    settings = resolve(cli={"WORKDIR": str(workdir)}, substrate="local").settings
    return LocalSubstrate(settings, Workdir(workdir), lambda _line: None).node_runner(name)


def _sh(workdir: Path, node: str, command: str) -> None:
    result = _node(workdir, node).run(command)
    assert result.ok, result.describe()


def _mutated(deployment, node_commands: dict[str, tuple[str, str]], *select: str) -> Run:
    """Apply (break) commands per node, run the selected checks, then always run the restore commands."""
    home, workdir, common, _ = deployment
    try:
        for node, (breaks, _restore) in node_commands.items():
            _sh(workdir, node, breaks)
        return run_pytest(home, *select, *common, timeout=600)
    finally:
        for node, (_breaks, restore) in node_commands.items():
            _sh(workdir, node, restore)


def _profile_edit(file: str, sed: str) -> str:
    return f"cd {PROFILE} && cp {file} /tmp/.sfx-{file}.bak && sed -i {sed} {file}"


def _profile_restore(file: str) -> str:
    return f"cd {PROFILE} && cp /tmp/.sfx-{file}.bak {file}"


def test_flipped_path_policy_fails_tp(deployment):
    flip = "-e 's/^prepend$/SWAP/' -e 's/^append$/prepend/' -e 's/^SWAP$/append/'"
    cmds = {
        w: (_profile_edit("path-precedence", flip), _profile_restore("path-precedence")) for w in ("worker1", "worker2")
    }
    run = _mutated(deployment, cmds, "-m", "TP", "-k", "srun and default")
    assert run.outcomes("failure"), run.output[-3000:]
    assert any("PATH starts with the Flox entries" in m for _, m in run.cases.values()), run.output[-3000:]


def test_extra_non_allow_listed_variable_fails_t3(deployment):
    cmds = {
        "worker1": (
            f"cd {PROFILE} && cp exports /tmp/.sfx-exports.bak && echo SFX_SMUGGLED=1 >> exports",
            _profile_restore("exports"),
        )
    }
    run = _mutated(deployment, cmds, "-m", "T3")
    failed = run.outcomes("failure")
    assert any("exports_only_allow_listed" in f for f in failed), run.output[-3000:]


def test_profile_removed_from_one_worker_fails_t3(deployment):
    cmds = {"worker2": (f"mv {PROFILE} {PROFILE}.sfx-moved", f"mv {PROFILE}.sfx-moved {PROFILE}")}
    run = _mutated(deployment, cmds, "-m", "T3")
    assert run.outcomes("failure"), run.output[-3000:]


def test_worker_with_another_revision_fails_t11(deployment):
    other = "sha256:" + "0" * 64
    cmds = {"worker1": (_profile_edit("revision", f"'s/^.*$/{other}/'"), _profile_restore("revision"))}
    run = _mutated(deployment, cmds, "-m", "T11")
    assert any("reports_the_expected_revision" in f for f in run.outcomes("failure")), run.output[-3000:]


def test_shared_home_unmounted_on_one_worker_fails_t9(deployment):
    cmds = {"worker2": ("mount -t tmpfs -o mode=1777 sfx-hide-home /home", "umount /home")}
    run = _mutated(deployment, cmds, "-m", "T9")
    assert any("write_on_one_worker" in f for f in run.outcomes("failure")), run.output[-3000:]


def test_after_restoring_every_mutation_the_groups_pass_again(deployment):
    home, _, common, _ = deployment
    run = run_pytest(home, "-m", "T3 or T9 or T11", *common, timeout=600)
    assert run.outcomes("failure") == [] and run.outcomes("passed"), run.output[-3000:]


def test_xdist_provisions_once_and_gives_the_serial_result(deployment):
    """Under pytest-xdist the controller converges the deployment once; workers reuse its target."""
    home, _, common, serial = deployment
    run = run_pytest(home, "--slurmflox-up=local", "-m", "acceptance", "-n", "2", *common)
    assert run.output.count("up: substrate local") == 1, run.output[-3000:]
    assert "nothing to do" in run.output, run.output[-3000:]  # the rerun took the fast path
    for outcome in ("passed", "skipped", "failure"):
        assert run.outcomes(outcome) == serial.outcomes(outcome), (outcome, run.output[-4000:])
