"""Pure parsing of what Slurm prints (no cluster needed)."""

from __future__ import annotations

from pytest_slurmflox.cluster.slurm import JobState, launch_error_hint


def test_a_launch_error_shown_as_a_signal_is_named():
    """slurmctld shows a batch launch failure's code 4021 as RaisedSignal:53 (4021 & 0x7f): the message says so."""
    failed = JobState("42", "FAILED", "RaisedSignal:53(Real-time_signal_19)", "worker2")
    assert "4021 ESLURMD_IO_ERROR" in str(failed) and "worker2" in str(failed)
    assert launch_error_hint("RaisedSignal:9(Killed)") == ""  # a real signal stays a signal
    assert launch_error_hint("NonZeroExitCode") == ""
    assert str(JobState("1", "COMPLETED", "None", "w1")).endswith("nodes='w1')")
