"""TB's shared-storage shell (suites/_tb_storage.py): trial lines to rates, the timed trials, the barrier, and a
read past the reader's page cache that says how it read."""

from __future__ import annotations

import subprocess
import time

from pytest_slurmflox.suites._tb_storage import READ_METHODS, STORAGE_MIB, reading, storage_samples


def test_storage_lines_become_the_best_rate_of_each_worker_from_its_own_pass_count():
    """Every trial, a write's as a read's, says how many times it went through the 32 MiB file in its time."""
    second = 1_000_000_000
    lines = {
        "w1": [f"storage_write 0 {second} 3", f"storage_write 0 {second} 2", f"storage_read 0 {second} 40"],
        "w2": ["storage_read 5 6", "storage_write 0 x 1", f"storage_write 0 {second // 2}", "prolog says hi"],
    }
    lines["w1"].append(f"storage_read 0 {second} 80")
    lines["w2"].append(f"storage_read 0 {second} 20")
    got = {(s.metric, s.subject): round(s.value, 1) for s in storage_samples(lines)}
    mb = STORAGE_MIB * 1.048576
    assert got == {
        ("storage_write", "w1"): round(3 * mb, 1),  # the faster of its two trials
        ("storage_read", "w1"): round(80 * mb, 1),
        ("storage_read", "w2"): round(20 * mb, 1),  # lines without their pass count, or not numbers, are not read
    }


def test_storage_shell_times_trials_and_waits_for_every_worker_at_a_barrier(tmp_path):
    """The shell the storage check sends, run in bash: :data:`TRIALS` trials, each at least :data:`TRIAL_MS` of
    wall time, each ending in its metric line; a barrier holds each worker until every worker's mark is there (a
    name with a space included), the first one as long as the last one comes later."""
    from pytest_slurmflox.suites._tb_programs import TRIAL_MS, TRIALS
    from pytest_slurmflox.suites._tb_storage import barrier, timed

    from pytest_slurmflox.base.run import quoted

    said = subprocess.run(["bash", "-c", timed("true", 2, "storage_write")], capture_output=True, text=True).stdout
    trials = [line.split() for line in said.splitlines()]
    assert len(trials) == TRIALS and all(t[0] == "storage_write" and int(t[3]) % 2 == 0 for t in trials), said
    assert all(int(t[2]) - int(t[1]) >= TRIAL_MS * 1_000_000 for t in trials), said

    phase = quoted("%s/run-mark", tmp_path / "shared home") + "-write"
    (tmp_path / "shared home").mkdir()
    script = barrier(phase, ["w1", "w 2"]) + "; date +%s%N"
    first = subprocess.Popen(
        ["bash", "-c", script], env={"PATH": "/usr/bin:/bin", "SLURMD_NODENAME": "w1"}, stdout=subprocess.PIPE
    )
    time.sleep(0.5)
    second = subprocess.run(
        ["bash", "-c", script], env={"PATH": "/usr/bin:/bin", "SLURMD_NODENAME": "w 2"}, capture_output=True
    )
    first_left, second_left = int(first.communicate(timeout=10)[0]), int(second.stdout)
    assert abs(first_left - second_left) < 300_000_000, (first_left, second_left)  # w1 waited for w 2
    assert sorted(m.name for m in (tmp_path / "shared home").iterdir()) == ["run-mark-write-w 2", "run-mark-write-w1"]


def test_a_read_bypasses_the_readers_cache_and_each_trial_says_how(tmp_path):
    """Run in bash on a real file: every trial line names its method (O_DIRECT here where the filesystem allows it,
    else the file's pages dropped before each pass), and the line becomes a sample whose evidence says it."""
    data = tmp_path / "shared file.dat"
    data.write_bytes(b"\0" * (1 << 20) * 4)
    from pytest_slurmflox.base.run import quoted

    said = subprocess.run(["bash", "-c", reading(quoted("%s", data), "storage_read")], capture_output=True, text=True)
    lines = said.stdout.splitlines()
    assert len(lines) == 3 and all(line.split()[4] in READ_METHODS for line in lines), said
    (sample,) = storage_samples({"w1": lines})
    assert sample.how in READ_METHODS.values() and sample.as_dict()["method"].endswith(sample.how)


def test_a_trial_line_without_a_known_method_word_is_not_read_as_one():
    second = 1_000_000_000
    got = storage_samples({"w1": [f"storage_read 0 {second} 2 direct", f"storage_read 0 {second} 9 cached"]})
    assert [(s.value, s.how) for s in got] == [(2 * STORAGE_MIB * 1.048576, READ_METHODS["direct"])]
