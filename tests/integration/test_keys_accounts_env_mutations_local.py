"""Integration (issue 26, trust round 2): secrets at the places the configuration names, local accounts asked of
the resolver, and a declared environment that is not realized. On a live local cluster of THREE workers, each
mutation breaks worker2 (not the first), runs the checks, asserts they FAIL naming worker2 and what is wrong, and
restores; the healthy cluster passes before and after.

- T10: a key readable by every user at the path only the configuration names (``AuthAltParameters
  jwt_key=/run/slurmflox/jwt_hs256.key``: the controller's JWT key; no worker holds it, no fixed list names it).
- TI: the user in worker2's /etc/passwd: the resolver's ``files`` source answers for the user there.
- T2/TP: a customer-style target (substrate existing: no runtime-provider record) that declares the environment,
  while worker2's TaskProlog gives its tasks nothing (no FLOX_ENV, PATH the system's): FAIL "declared environment
  realized on every worker" naming worker2; healthy, the same target SKIPs for the missing record as before.
- T3 (fail-closed) on that target, which declares no ``runtime.task_prolog``: the TaskProlog each worker's slurm.conf
  names is run on every worker; healthy it PASSes, and worker2's giving-nothing TaskProlog (exit 0) FAILs naming
  worker2 only.
"""

from __future__ import annotations

import re

import pytest
import yaml
from acceptance_helpers import deployed, mutated, node_sh, passes_again, run_pytest

pytestmark = pytest.mark.integration

GROUPS = "T10 or TI"
PROLOG = "/etc/slurm/flox-task-prolog/task-prolog.sh"
FAIL_CLOSED = "test_t03_task_profile::test_task_prolog_in_force_fails_closed_on_every_worker"


@pytest.fixture(scope="module")
def deployment(tmp_path_factory):
    with deployed(tmp_path_factory, "trust2", "-m", GROUPS, options=("--slurmflox-compute-replicas=3",)) as recorded:
        yield recorded


def _said(run) -> list[str]:
    return re.findall(r"requirement not met: [^\n]*", run.messages())


def test_healthy_three_worker_cluster_passes_t10_and_ti(deployment):
    _, workdir, _, run = deployment
    print(node_sh(workdir, "login", "scontrol show config"))  # the real text the parser reads (tests/data)
    assert run.outcomes("failure") == [] and run.outcomes("error") == [], run.output[-4000:]
    assert "test_t10_isolation::test_tasks_cannot_read_node_secrets" in run.outcomes("passed"), run.output[-3000:]
    assert run.in_module("test_ti_identity"), run.output[-3000:]


def test_a_key_readable_at_a_path_only_the_config_names_fails_t10_naming_worker2(deployment):
    _, workdir, _, _ = deployment
    key = node_sh(workdir, "login", "scontrol show config | sed -n 's/^AuthAltParameters *= *jwt_key=//p'").strip()
    assert key.startswith("/") and "munge" not in key and key not in ("/etc/slurm/slurm.key",), key
    breaks = (
        f"test ! -e {key} && mkdir -p $(dirname {key}) && stat -c %a $(dirname {key}) > /tmp/.sfx-keydir-mode && "
        f"chmod 755 $(dirname {key}) && head -c 32 /dev/urandom > {key} && chmod 644 {key}"
    )
    restore = f"rm -f {key} && chmod $(cat /tmp/.sfx-keydir-mode) $(dirname {key})"
    run = mutated(deployment, {"worker2": (breaks, restore)}, "-m", "T10")
    assert run.outcomes("failure") == ["test_t10_isolation::test_tasks_cannot_read_node_secrets"], run.output[-3000:]
    said = _said(run)
    assert said and f"worker2: a task can read {key} (AuthAltParameters jwt_key)" in said[0], said
    assert "worker1:" not in said[0] and "worker3:" not in said[0], said
    passes_again(deployment, "-m", "T10")


def test_the_user_in_worker2s_passwd_fails_ti_naming_the_files_source(deployment):
    _, workdir, _, _ = deployment
    ident = yaml.safe_load((workdir / "target.yaml").read_text())["identity"]
    entry = f"{ident['user']}:x:{ident['uid']}:{ident['gid']}::/home/{ident['user']}:/bin/bash"
    breaks = f"cp /etc/passwd /tmp/.sfx-passwd.bak && echo '{entry}' >> /etc/passwd"
    run = mutated(deployment, {"worker2": (breaks, "cp /tmp/.sfx-passwd.bak /etc/passwd")}, "-m", "TI")
    failed = run.outcomes("failure")
    assert failed == ["test_ti_identity::test_workers_hold_no_local_account_for_the_user"], run.output[-3000:]
    said = _said(run)
    assert f"worker2: the local files source answers passwd {ident['user']}: {entry}" in said[0], said
    assert "worker1:" not in said[0] and "worker3:" not in said[0], said
    passes_again(deployment, "-m", "TI")


def _customer_with_environment(home, workdir) -> str:
    """The deployment described as a customer's (substrate existing: no runtime-provider record), declaring the
    environment, the activation mode, PATH precedence and exports it deployed."""
    doc = yaml.safe_load((workdir / "target.yaml").read_text())
    settings = doc["expect"]["settings"]
    keep = ("WORKER_FLOX_ENV", "WORKER_FLOX_GENERATION", "WORKER_FLOX_ACTIVATE_MODE", "WORKER_PATH_PRECEDENCE")
    doc.update(substrate="existing", name="trust2-customer")
    for key in ("deployment", "workdir", "identity"):
        doc.pop(key, None)
    doc["expect"] = {
        "settings": {k: settings[k] for k in keep} | {"WORKER_ENV_EXPORTS": settings.get("WORKER_ENV_EXPORTS", "")}
    }
    path = home / "trust2-customer.yaml"
    path.write_text(yaml.safe_dump(doc))
    return f"--slurmflox-target={path}"


def test_a_declared_environment_not_realized_on_worker2_fails_t2_and_tp(deployment):
    home, workdir, common, _ = deployment
    target = _customer_with_environment(home, workdir)
    keyword = "pinned_generations_content or srun_task_environment or fails_closed"
    select = ("-m", "T2 or TP or T3", "-k", keyword, *common)
    healthy = run_pytest(home, target, *select, timeout=600)
    assert healthy.outcomes("failure") == [] and healthy.outcomes("error") == [], healthy.output[-3000:]
    # the target declares no runtime.task_prolog: the one slurm.conf names is run on every worker, and refuses
    assert healthy.outcomes("passed") == [FAIL_CLOSED], healthy.output[-3000:]
    others = [msg for case, (_, msg) in healthy.cases.items() if case != FAIL_CLOSED]
    assert others and all("runtime-record" in msg for msg in others), healthy.output[-3000:]
    fake = "/tmp/.sfx-empty-prolog.sh"  # a TaskProlog that gives the task nothing
    empty = f"printf '#!/bin/sh\\nexit 0\\n' > {fake} && chmod 755 {fake} && mount --bind {fake} {PROLOG}"
    try:
        node_sh(workdir, "worker2", empty)
        run = run_pytest(home, target, *select, timeout=600)
    finally:
        node_sh(workdir, "worker2", f"umount {PROLOG}")
    failed = run.outcomes("failure")
    assert "test_t02_pinned_realization::test_every_worker_has_the_pinned_generations_content" in failed, run.output[
        -3000:
    ]
    assert any(f.startswith("test_tp_provenance::test_srun_task_environment") for f in failed), run.output[-3000:]
    assert FAIL_CLOSED in failed, run.output[-3000:]
    for line in _said(run):
        closed = f"worker2: TaskProlog {PROLOG}: a missing profile directory: exit 0" in line
        assert closed or "realized on every worker: worker2: no FLOX_ENV" in line, line
        assert "worker1:" not in line.split("): ", 1)[-1] and "worker3:" not in line.split("): ", 1)[-1], line
