"""Integration (issue 38, a declared runtime): the local cluster described as a customer's signs off, and FAILs T2
naming the worker that holds another generation's content.

One private deployment (two workers), brought up with a plain ``--slurmflox-up=local``, which also writes
``<workdir>/site-example.yaml`` (substrate existing, a ``runtime`` section computed from the pinned environment's
definition, pytest_slurmflox/substrates/local/siteexample.py). Then:

- the runtime section is what the runtime provider realized (its record and Nix's registered hash; read here, by
  the test, only to prove the computation right: the file never reads them);
- a full sign-off against that file as a customer runs it: SIGNED OFF (profile existing), TP's 11 checks PASS
  (judged, not SKIPped), and T2, T3 and TR judged against the declared runtime;
- another generation's content (``local/demo:2``, realized into the same store) bind-mounted over the pinned
  realized path on worker2 only: T2 FAILs naming worker2 (and not worker1); restored, T2 PASSes again.
"""

from __future__ import annotations

import re

import pytest
import yaml
from acceptance_helpers import deployed, group_verdicts, local_substrate, node_sh, run_pytest

from pytest_slurmflox.model.target import load_target

pytestmark = pytest.mark.integration

OTHER = "local/demo:2"  # the local default pins local/demo:1
T2_CONTENT = "test_t02_pinned_realization::test_every_worker_has_the_pinned_generations_content"
T2_STORE = "test_t02_pinned_realization::test_every_worker_runs_the_pinned_nix_store_path_unmodified"


@pytest.fixture(scope="module")
def deployment(tmp_path_factory):
    with deployed(tmp_path_factory, "declrt") as recorded:
        yield recorded


def _site(deployment) -> tuple[str, ...]:
    _, workdir, common, _ = deployment
    return (f"--slurmflox-target={workdir / 'site-example.yaml'}", *common)


def test_site_example_declares_what_the_provider_realized(deployment):
    _, workdir, _, up = deployment
    assert up.rc == 0, up.output[-3000:]
    doc = yaml.safe_load((workdir / "site-example.yaml").read_text())
    assert doc["substrate"] == "existing" and "deployment" not in doc and not doc.get("workdir"), doc
    spec = load_target(workdir / "site-example.yaml")
    rt = spec.runtime
    assert rt is not None and spec.declared is not None, doc
    pool = local_substrate(workdir).pool()
    for worker in ("worker1", "worker2"):  # the provider's own record, read here only to check the computation
        got = pool.realization(worker)
        assert got["realized_path"] == rt.realized_path, (got, rt)
        record = got["record"]
        assert record["content_digest"] == rt.content_digest, (record, rt)
        act = record["activations"][spec.expect.settings.worker_flox_activate_mode]
        assert [f"{rt.realized_path}/{rel}" for rel in act["path"]] == list(rt.path), (act, rt)
    assert pool.store_verification(rt.realized_path)[2] == rt.nar_hash, rt
    assert rt.exports == {"SLURMFLOX_DEMO_GENERATION": "1"}, rt.exports
    assert rt.task_prolog == "/etc/slurm/flox-task-prolog/task-prolog.sh" and rt.profile_dir.startswith("/run/")


def test_site_example_is_signed_off_with_the_task_environment_judged(deployment):
    home, _, _, _ = deployment
    run = run_pytest(home, *_site(deployment), "--slurmflox-signoff", timeout=900)
    line = re.search(r"^verdict for run \S+: (.*) \(sign-off requested", run.output, re.M)
    print(run.output[-5000:])
    assert line and line.group(1).startswith("SIGNED OFF (profile existing"), run.output[-6000:]
    assert run.rc == 0, run.output[-3000:]
    assert run.outcomes("failure") == [] and run.outcomes("error") == [], run.output[-4000:]
    tp = run.in_module("test_tp_provenance")
    assert len(tp) == 11, (tp, run.in_module("test_tp_provenance", "skipped"))
    for name in (
        T2_CONTENT,
        T2_STORE,
        "test_t02_pinned_realization::test_realized_path_is_consistent_across_the_cohort",
    ):
        assert name in run.outcomes("passed"), (name, run.cases.get(name))
    t3 = run.in_module("test_t03_task_profile")
    assert len(t3) == 5 and run.in_module("test_t03_task_profile", "skipped") == [], run.output[-3000:]
    skipped = " ".join(message for _, message in run.cases.values())
    assert "runtime-record" not in skipped, skipped[-3000:]
    verdicts = group_verdicts(run.output)
    assert all(verdicts[g] == "PASS" for g in ("T2", "T3", "TP", "TR")), verdicts


def test_another_generation_on_worker2_fails_t2_naming_worker2(deployment):
    home, workdir, _, _ = deployment
    spec = load_target(workdir / "site-example.yaml")
    pinned = spec.runtime.realized_path
    other = local_substrate(workdir).pool().nix_store().realize(OTHER)  # another generation, built into the store
    assert other != pinned
    node_sh(workdir, "worker2", f"test -d {other} && mount --bind {other} {pinned}")
    try:
        run = run_pytest(home, *_site(deployment), "-m", "T2", timeout=600)
    finally:
        node_sh(workdir, "worker2", f"umount {pinned}")
    failed = run.outcomes("failure")
    assert T2_CONTENT in failed and T2_STORE in failed, run.output[-4000:]
    for name in (T2_CONTENT, T2_STORE):
        message = run.cases[name][1]
        print(f"{name} FAILED as it must:", message.splitlines()[0][:600])
        assert "worker2:" in message and "worker1:" not in message.split("\n", 1)[0], message[-2000:]
    assert f"worker2: {pinned} on the worker has NAR hash" in run.cases[T2_STORE][1], run.cases[T2_STORE][1][-2000:]
    again = run_pytest(home, *_site(deployment), "-m", "T2", timeout=600)
    assert again.outcomes("failure") == [] and T2_CONTENT in again.outcomes("passed"), again.output[-3000:]
    assert T2_STORE in again.outcomes("passed"), again.output[-3000:]
