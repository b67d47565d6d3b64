"""The Flox lock parser T2 uses on a Flox target (pure code; the lock shape is Flox's, see floxlock.py)."""

from __future__ import annotations

import json

import pytest

from pytest_slurmflox.floxlock import LockError, nix_system, parse_lock

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
