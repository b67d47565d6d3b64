"""The Flox lock parser T2 uses on a Flox target (pure code; the lock shape is Flox's, see floxlock.py)."""

from __future__ import annotations

import json

import pytest

from pytest_slurmflox.model.floxlock import LockError, nix_system, parse_lock

LOCK = {
    "lockfile-version": 1,
    "manifest": {"version": 1, "install": {"hello": {"pkg-path": "hello"}, "curl": {"pkg-path": "curl"}}},
    "packages": [
        {
            "attr_path": "hello",
            "install_id": "hello",
            "outputs": {"out": "/nix/store/y4qpcibkj767szhjb58i2sidmz8m24hb-hello-2.12.1"},
            "outputs_to_install": ["out"],
            "system": "x86_64-linux",
            "group": "toplevel",
            "priority": 5,
        },
        {
            "attr_path": "hello",
            "install_id": "hello",
            "outputs": {"out": "/nix/store/kfhcq0i3ls63ac09lil23ni6l9a2rqrv-hello-2.12.1"},
            "system": "aarch64-linux",
        },
        {
            "attr_path": "curl",
            "install_id": "curl",
            "outputs": {
                "bin": "/nix/store/1033k8sfipzk1ly7igmawdra7lg348wb-curl-8.7.1-bin",
                "out": "/nix/store/37ydms17yxwi5y5rck08c93jad1rmrn8-curl-8.7.1",
            },
            "system": "x86_64-linux",
        },
    ],
}


def test_store_paths_are_the_locked_outputs_of_the_workers_system():
    lock = parse_lock(json.dumps(LOCK))
    assert lock.version == 1
    assert lock.systems() == ["aarch64-linux", "x86_64-linux"]
    assert lock.store_paths("x86_64-linux") == {
        "hello.out": "/nix/store/y4qpcibkj767szhjb58i2sidmz8m24hb-hello-2.12.1",
        "curl.bin": "/nix/store/1033k8sfipzk1ly7igmawdra7lg348wb-curl-8.7.1-bin",
        "curl.out": "/nix/store/37ydms17yxwi5y5rck08c93jad1rmrn8-curl-8.7.1",
    }
    arm = lock.store_paths("aarch64-linux")
    assert arm == {"hello.out": "/nix/store/kfhcq0i3ls63ac09lil23ni6l9a2rqrv-hello-2.12.1"}
    assert lock.store_paths("x86_64-darwin") == {}


def test_the_digest_identifies_the_lock_not_its_formatting():
    same = parse_lock(json.dumps(LOCK, indent=2, sort_keys=False))
    assert same.digest == parse_lock(json.dumps(LOCK)).digest
    other = json.loads(json.dumps(LOCK))
    other["packages"][0]["outputs"]["out"] = "/nix/store/00000000000000000000000000000000-hello-2.12.1"
    assert parse_lock(json.dumps(other)).digest != same.digest


@pytest.mark.parametrize(
    ("mutate", "said"),
    [
        (lambda d: d.update({"lockfile-version": 0}), "lockfile-version 0 is not supported"),
        (lambda d: d.pop("packages"), "no packages list"),
        (lambda d: d["packages"][1].pop("system"), "packages[1] lacks install_id, system or outputs"),
        (lambda d: d["packages"][2]["outputs"].update(bin="/usr/bin"), "output bin is not a store path"),
        (lambda d: d["packages"][0]["outputs"].update(out="/nix/store/x/bin"), "output out is not a store path"),
    ],
)
def test_what_is_not_a_flox_lock_is_named(mutate, said):
    doc = json.loads(json.dumps(LOCK))
    mutate(doc)
    with pytest.raises(LockError, match=said.replace("[", r"\[").replace("]", r"\]")):
        parse_lock(json.dumps(doc))
    with pytest.raises(LockError, match="not JSON"):
        parse_lock("{")


def test_nix_system_from_uname():
    assert nix_system("x86_64", "Linux") == "x86_64-linux"
    assert nix_system("aarch64\n", "Linux\n") == "aarch64-linux"
    assert nix_system("arm64", "Darwin") == "aarch64-darwin"


# ------------------------------------------------------------------------ a worker's lock against the pinned one
def _with(path: str, index: int = 2, output: str = "bin") -> dict:
    """LOCK with one locked output's store path replaced (what a worker that realized something else holds)."""
    doc = json.loads(json.dumps(LOCK))
    doc["packages"][index]["outputs"][output] = path
    return doc


OTHER_CURL = "/nix/store/0000000000000000000000000000000a-curl-8.6.0-bin"


def test_a_worker_with_one_store_path_different_is_named_with_both_paths():
    from pytest_slurmflox.model.floxlock import cohort_lock_problems

    pinned = parse_lock(json.dumps(LOCK))
    locks = {"worker1": pinned, "worker2": parse_lock(json.dumps(_with(OTHER_CURL))), "worker3": pinned}
    systems = dict.fromkeys(locks, "x86_64-linux")
    assert cohort_lock_problems(pinned, locks, systems) == [
        f"worker2: curl.bin is {OTHER_CURL} there, the pinned generation locks "
        "/nix/store/1033k8sfipzk1ly7igmawdra7lg348wb-curl-8.7.1-bin"
    ]
    # the same wrong lock on every worker: "one lock across the cohort" holds, the pinned comparison does not
    same = dict.fromkeys(locks, locks["worker2"])
    assert [p.split(":")[0] for p in cohort_lock_problems(pinned, same, systems)] == ["worker1", "worker2", "worker3"]


def test_missing_or_extra_outputs_and_other_systems():
    from pytest_slurmflox.model.floxlock import lock_problems

    pinned = parse_lock(json.dumps(LOCK))
    fewer = json.loads(json.dumps(LOCK))
    del fewer["packages"][2]["outputs"]["bin"]
    assert lock_problems(pinned, parse_lock(json.dumps(fewer)), "x86_64-linux") == [
        "curl.bin is not locked there, the pinned generation locks "
        "/nix/store/1033k8sfipzk1ly7igmawdra7lg348wb-curl-8.7.1-bin"
    ]
    assert lock_problems(parse_lock(json.dumps(fewer)), pinned, "x86_64-linux")[0].endswith("locks nothing")
    # another system's paths differ by design: only the worker's own system is compared
    assert lock_problems(pinned, parse_lock(json.dumps(_with(OTHER_CURL))), "aarch64-linux") == []


def test_the_pinned_lock_comes_from_the_declared_file_or_is_not_run_naming_the_key(tmp_path, monkeypatch):
    from pytest_slurmflox.model.floxlock import lock_file, pinned_lock, pull_command

    declared = tmp_path / "hpc-17.lock"
    declared.write_text(json.dumps(LOCK))
    lock, source = pinned_lock(declared, "myorg/hpc", 17)
    assert lock == parse_lock(json.dumps(LOCK)) and source == f"flox.lock_file {declared}"
    declared.write_text("not a lock")
    with pytest.raises(LockError, match="is not the pinned generation's lock"):
        pinned_lock(declared, "myorg/hpc", 17)
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))  # no flox CLI on this machine
    assert pinned_lock(None, "myorg/hpc", 17) == (
        None,
        "the target file does not declare flox.lock_file and no flox CLI on this machine can pull it",
    )
    assert pull_command("myorg/hpc", 17, tmp_path) == [
        "flox", "pull", "--copy", "--dir", str(tmp_path), "--generation", "17", "myorg/hpc",
    ]  # fmt: skip
    assert lock_file({"lock_file": "hpc-17.lock"}, tmp_path) == tmp_path / "hpc-17.lock"
    for bad in ({}, {"lock_file": ""}, "hpc.lock"):
        with pytest.raises(ValueError, match=r"flox\.lock_file"):
            lock_file(bad, tmp_path)


def test_the_target_declares_the_lock_file_and_writes_it_back(tmp_path):
    from pytest_slurmflox.model.target import TargetError, parse_target, target_document

    login = {"host": "127.0.0.1", "port": 22, "user": "u", "key": "/dev/null"}
    spec = parse_target({"login": login, "flox": {"lock_file": "hpc-17.lock"}}, path=tmp_path / "target.yaml")
    assert spec.flox_lock == tmp_path / "hpc-17.lock"
    assert parse_target(target_document(spec)).flox_lock == spec.flox_lock
    with pytest.raises(TargetError, match=r"flox\.lock_file"):
        parse_target({"login": login, "flox": {"lock_file": 3}})
