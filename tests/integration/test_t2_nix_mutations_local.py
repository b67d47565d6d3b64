"""Integration (#20): T2's Nix store check on a live local cluster, and proof that it fails for each mutation.

One private deployment for this module (its own work dir, port, cluster prefix and so its own Nix profiles), so it
runs beside the other integration files under ``-n 2 --dist loadfile``. Each mutation breaks worker1 only, T2 runs as
a user runs it (a pytest subprocess against the recorded deployment), the store check must FAIL naming worker1 and
the path, and after restoring T2 must PASS again:

(a) one byte changed in worker1's realized environment (a file of the pinned store path, inside worker1 only);
(b) worker1's Nix profile switched to another generation of the same environment (``nix-env --switch-generation``);
(c) worker1's profile pointed at a store path that is no generation of ours.

The expected path comes from our code (``nix-instantiate`` over our derivation), never from a worker.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from acceptance_helpers import Run, deployed, local_substrate, node_sh, passes_again, run_checks

pytestmark = pytest.mark.integration

CHECK = "test_t02_pinned_realization::test_every_worker_runs_the_pinned_nix_store_path_unmodified"
PINNED = "local/demo:1"
OTHER = "local/demo:2"


@pytest.fixture(scope="module")
def deployment(tmp_path_factory):
    from pytest_slurmflox.substrates.local.cluster import cluster_prefix

    with deployed(tmp_path_factory, "t2nix", "-m", "T2") as recorded:
        yield recorded
    _, workdir, _, _ = recorded
    profiles = _store(workdir).profiles_dir
    assert not profiles.exists(), f"destroy left this deployment's profiles in {profiles}"
    assert cluster_prefix(workdir) in str(profiles)


def _store(workdir: Path):
    return local_substrate(workdir).pool().nix_store()


def _generation(store, worker: str) -> int:
    """The profile generation ``worker``'s profile is on now (its link names ``<worker>-<N>-link``)."""
    link = os.readlink(store.profiles_dir / worker)
    match = re.fullmatch(rf"{re.escape(worker)}-(\d+)-link", Path(link).name)
    assert match, link
    return int(match[1])


def _t2(deployment) -> Run:
    return run_checks(deployment, "-m", "T2")


def _store_check_fails_naming(run: Run, *said: str, also: tuple[str, ...] = ()) -> str:
    outcome, message = run.cases.get(CHECK, ("absent", ""))
    assert outcome == "failure", (outcome, run.output[-3000:])
    for text in said:
        assert text in message, (text, message[-3000:])
    assert "worker2:" not in message, message[-3000:]  # only worker1 was broken
    others = [k for k, (o, _) in run.cases.items() if o in ("failure", "error") and k not in (CHECK, *also)]
    assert others == [], (others, run.output[-3000:])  # nothing else in T2 judges the store
    print("T2 store check FAILED as it must:", message.splitlines()[0][:600])
    return message


def _passes_again(deployment) -> None:
    """T2 after restoring: nothing in it fails (``passes_again``), and the store check itself is among what passed."""
    run = passes_again(deployment, "-m", "T2")
    assert run.cases.get(CHECK, ("absent", ""))[0] == "passed", run.output[-3000:]


def test_t2_passes_on_the_fresh_deployment_with_per_deployment_profiles(deployment):
    _, workdir, _, first = deployment
    assert first.cases.get(CHECK, ("absent", ""))[0] == "passed", first.output[-4000:]
    assert first.outcomes("failure") == [] and first.outcomes("error") == [], first.output[-4000:]
    store = _store(workdir)
    expected = store.expected_path(PINNED)
    for worker in ("worker1", "worker2"):
        assert store.profile_target(worker) == expected
        profile = store.profile(worker)
        assert f"/workers/{store.deployment}/{worker}" in profile
        # what the node activated is what its profile pins (node-init: FLOX_ENV = readlink -e NIX_PROFILE)
        assert node_sh(workdir, worker, "cat /run/flox-task-profile/current/realized-path").strip() == expected


def test_one_changed_byte_in_worker1s_store_path_fails_t2(deployment):
    _, workdir, _, _ = deployment
    expected = _store(workdir).expected_path(PINNED)
    target = f"{expected}/bin/slurmflox-demo"
    copy = "/tmp/.sfx-t2-byte"
    node_sh(
        workdir,
        "worker1",
        f"cp {target} {copy} && printf '#' | dd of={copy} bs=1 seek=2 conv=notrunc status=none && "
        f"[ $(cmp -l {target} {copy} | wc -l) = 1 ] && mount --bind {copy} {target}",
    )
    try:
        run = _t2(deployment)
    finally:
        node_sh(workdir, "worker1", f"umount {target} && rm -f {copy}")
    # the content digest check (the provider's listing, recomputed on the worker) sees the same byte
    content = "test_t02_pinned_realization::test_every_worker_has_the_pinned_generations_content"
    _store_check_fails_naming(run, f"worker1: {expected} on the worker has NAR hash", "was modified", also=(content,))
    _passes_again(deployment)


def test_worker1s_profile_switched_to_another_generation_fails_t2(deployment):
    _, workdir, _, _ = deployment
    store = _store(workdir)
    expected = store.expected_path(PINNED)
    pinned_generation = _generation(store, "worker1")
    other = store.realize(OTHER)
    store.set_profile("worker1", other)  # a new profile generation holding demo:2 ...
    other_generation = _generation(store, "worker1")
    store.switch_generation("worker1", pinned_generation)  # ... then back: the profile has both
    assert other_generation != pinned_generation and store.profile_target("worker1") == expected
    store.switch_generation("worker1", other_generation)  # the mutation
    try:
        run = _t2(deployment)
    finally:
        store.switch_generation("worker1", pinned_generation)
    _store_check_fails_naming(run, f"worker1: its Nix profile {store.profile('worker1')} points at {other}", expected)
    _passes_again(deployment)


def test_worker1s_profile_on_a_path_that_is_no_pinned_generation_fails_t2(deployment, tmp_path):
    _, workdir, _, _ = deployment
    store = _store(workdir)
    pinned_generation = _generation(store, "worker1")
    src = tmp_path / "sfx-foreign"
    (src / "bin").mkdir(parents=True)
    (src / "bin" / "slurmflox-demo").write_text("#!/bin/sh\necho not the pinned generation\n")
    (src / "bin" / "slurmflox-demo").chmod(0o755)
    foreign = store.add_path(src)
    store.set_profile("worker1", foreign)
    try:
        run = _t2(deployment)
    finally:
        store.switch_generation("worker1", pinned_generation)
    _store_check_fails_naming(run, f"worker1: its Nix profile {store.profile('worker1')} points at {foreign}")
    _passes_again(deployment)
