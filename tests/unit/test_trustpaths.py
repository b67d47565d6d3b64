"""T10's trust check (pytest_slurmflox/judges/trustpaths.py): its probe run with bash on real files of this host, a
task profile behind a symlink, a TaskProlog named by a slurm.conf and a realized runtime, all root's; then one
entry at a time made changeable by someone else (a group-writable profile directory, a file owned by a user, an
ACL entry that grants write), each named with its path, owner and mode."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from pytest_slurmflox.judges.trustpaths import Entry, parse, probe_script, trust_problems


def _tree(tmp_path: Path) -> tuple[Path, Path, Path]:
    root = tmp_path / "w"
    gen = root / "run" / "flox-task-profile" / "rev1"
    gen.mkdir(parents=True)
    (gen / "realized-path").write_text(str(root / "store" / "env-1") + "\n")
    (gen / "revision").write_text("sha256:0\n")
    (root / "run" / "flox-task-profile" / "current").symlink_to(gen)
    (root / "store" / "env-1" / "bin").mkdir(parents=True)
    prolog = root / "etc" / "task-prolog.sh"
    prolog.parent.mkdir()
    prolog.write_text("#!/bin/sh\n")
    prolog.chmod(0o755)
    (root / "etc" / "slurm.conf").write_text(f"TaskProlog={prolog}\n")
    for path in [root, *root.rglob("*")]:
        if not path.is_symlink():
            path.chmod(0o755 if path.is_dir() or path == prolog else 0o644)
    return root, root / "run" / "flox-task-profile" / "current", prolog


def _probe(root: Path, profile: Path) -> list[str]:
    script = probe_script({"task profile": str(profile), "TaskProlog": "", "realized runtime": ""}, str(profile))
    env = {"SLURM_CONF": str(root / "etc" / "slurm.conf"), "PATH": os.environ["PATH"]}
    res = subprocess.run(["/bin/bash", "-c", script], env=env, capture_output=True, text=True, check=False)
    assert res.returncode == 0, res.stderr
    return res.stdout.splitlines()


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root: the tree is root's")
def test_a_root_tree_passes_and_each_entry_another_may_change_is_named(tmp_path):
    root, profile, prolog = _tree(tmp_path)
    lines = _probe(root, profile)
    entries, _, missing = parse(lines)
    walked = {(e.label, e.path) for e in entries}
    assert ("task profile", str(profile)) in walked and ("task profile", str(profile.resolve())) in walked
    assert ("task profile", str(profile.resolve() / "revision")) in walked  # the profile's files
    assert ("TaskProlog", str(prolog)) in walked and ("realized runtime", str(root / "store" / "env-1")) in walked
    assert ("task profile", "/") in walked and not missing
    assert trust_problems(lines) is None, trust_problems(lines)
    profile.resolve().chmod(0o775)  # a group-writable profile directory
    said = trust_problems(_probe(root, profile))
    assert said == f"task profile {profile.resolve()} (directory, uid 0, mode 0775): mode 0775: writable by its group"
    profile.resolve().chmod(0o755)
    os.chown(prolog, 1000, 1000)  # a TaskProlog its user could rewrite
    said = trust_problems(_probe(root, profile))
    assert said == f"TaskProlog {prolog} (regular file, uid 1000, mode 0755): owned by uid 1000, not root"


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root: the tree is root's")
def test_a_relative_task_prolog_is_walked_where_slurmd_runs_it_beside_slurm_conf(tmp_path):
    """Slurm 25.11+ (configless): ``TaskProlog=task-prolog.sh`` is the file beside the slurm.conf slurmd read."""
    root, profile, prolog = _tree(tmp_path)
    (root / "etc" / "slurm.conf").write_text("TaskProlog=task-prolog.sh\n")
    entries, _, missing = parse(_probe(root, profile))
    assert ("TaskProlog", str(prolog)) in {(e.label, e.path) for e in entries} and not missing


def test_an_acl_entry_that_grants_write_is_named():
    """What the probe prints for ``getfacl -p -c -e`` entries that grant write (this host has no getfacl: the
    lines replayed in the probe's format, each named with who may write)."""
    lines = ["entry=task profile|/run/p|directory|0|775", "acl=task profile|/run/p|user:nobody:rwx\t"]
    said = trust_problems(
        [*lines, "entry=TaskProlog|/t|regular file|0|755", "entry=realized runtime|/r|directory|0|755"]
    )
    assert said is not None and "task profile /run/p: its ACL lets user:nobody:rwx write" in said, said


def test_a_sticky_directory_keeps_roots_entries_roots_and_nothing_shown_is_named():
    assert Entry("realized runtime", "/nix/store", "directory", 0, 0o1775).problem(frozenset({0})) is None
    assert (
        Entry("x", "/tmp/x", "directory", 0, 0o777).problem(frozenset({0}))
        == "mode 0777: writable by its group and everyone"
    )
    assert Entry("x", "/l", "symbolic link", 0, 0o777).problem(frozenset({0})) is None
    assert trust_problems(["missing=TaskProlog|(none in force)"]) == "TaskProlog (none in force) does not exist"
    assert "realized runtime: nothing on its way was shown" in (
        trust_problems(["entry=task profile|/|directory|0|755"]) or ""
    )


def test_an_absent_path_is_a_problem_only_where_the_target_declared_it():
    """A customer's cluster without the reference's profile or a TaskProlog: their absence is T3's and T2's to judge;
    T10 judges who may change what is there, and a declared path that is not there."""
    absent = ["missing=task profile|/run/flox-task-profile/current", "missing=realized runtime|(none in force)"]
    shown = ["entry=TaskProlog|/etc/slurm/prolog.sh|regular file|0|755", "entry=TaskProlog|/|directory|0|755"]
    assert trust_problems(absent + shown, required=frozenset()) is None
    said = trust_problems(absent + shown, required=frozenset({"task profile"})) or ""
    assert said == "task profile /run/flox-task-profile/current does not exist", said
