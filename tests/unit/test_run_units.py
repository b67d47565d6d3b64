"""Runners as one family: arguments are quoted, the environment is one exported prefix, a missing node is an exit
status, and every runner reports through the same observer."""

from __future__ import annotations

import time
from pathlib import Path

from hostile import HOSTILE
from hypothesis import HealthCheck, given, settings

from pytest_slurmflox.run import LocalRunner, Result, command_line, with_env
from pytest_slurmflox.substrates.local.nsrunner import NamespaceRunner


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(value=HOSTILE)
def test_run_quotes_its_arguments(tmp_path: Path, value: str):
    """A hostile value passed as an argument arrives byte for byte and runs nothing."""
    marker = tmp_path / "executed"
    text = value.replace("{marker}", str(marker))
    result = LocalRunner().run("printf %s", text).check()
    assert result.stdout == text
    assert not marker.exists()
    assert result.command == command_line("printf %s", [text])


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(value=HOSTILE)
def test_the_env_prefix_exports_values_verbatim(tmp_path: Path, value: str):
    marker = tmp_path / "executed"
    text = value.replace("{marker}", str(marker))
    result = LocalRunner().run('printf %s "$SFX_VALUE"', env={"SFX_VALUE": text}).check()
    assert result.stdout == text and not marker.exists()


def test_env_is_not_recorded_as_the_command():
    """The evidence shows the command; values passed through env (possibly secrets) are not part of it."""
    seen: list[Result] = []
    LocalRunner(observer=seen.append).run("true", env={"TOKEN": "s3cr3t-value"})
    assert [r.command for r in seen] == ["true"]
    assert "export TOKEN=s3cr3t-value;" in with_env("true", {"TOKEN": "s3cr3t-value"})


def test_a_stopped_node_is_exit_255_through_the_observer():
    seen: list[Result] = []
    runner = NamespaceRunner(node="worker9", pid_of=lambda: None, observer=seen.append)
    result = runner.run("hostname")
    assert (result.exit_status, result.where, result.user) == (255, "local:worker9", "root")
    assert "not running" in result.stderr and seen == [result]


def test_the_namespace_runner_is_the_local_runner_with_a_prefix():
    runner = NamespaceRunner(node="login", pid_of=lambda: 4242, user="slurmtest")
    prefix = runner.argv_prefix()
    assert isinstance(runner, LocalRunner)
    assert prefix[:3] == ["nsenter", "-t", "4242"]
    assert prefix[prefix.index("env") : prefix.index("env") + 2] == ["env", "-i"]
    assert "--reuid=slurmtest" in prefix and "USER=slurmtest" in prefix
    root = NamespaceRunner(node="login", pid_of=lambda: 4242).argv_prefix()
    assert not any(part.startswith("--reuid") for part in root)


def test_slurm_client_arguments_reach_the_command_as_single_words(tmp_path: Path, monkeypatch):
    """Format strings with shell syntax (``%i|%T``) and hostile reasons arrive as single argv words: a stand-in
    ``squeue``/``scontrol`` on PATH records its argv, one word per line."""
    from pytest_slurmflox.slurm import JOB_FORMAT, SlurmClient

    log = tmp_path / "argv"
    for tool in ("squeue", "scontrol"):
        script = tmp_path / tool
        script.write_text(f'#!/bin/bash\nprintf "%s\\n" "$0" "$@" >> {log}\necho "5|COMPLETED|None|worker1"\n')
        script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:/usr/bin:/bin")
    runner = LocalRunner()
    client = SlurmClient(user=runner, admin=runner)
    assert client.jobs(["5"])["5"].state == "COMPLETED"
    client.drain(["worker1"], reason="maintenance; $(touch x) `id`")
    words = log.read_text().splitlines()
    assert words[:7] == [str(tmp_path / "squeue"), "-h", "-t", "all", "-o", JOB_FORMAT, "-j"]
    assert "reason=maintenance; $(touch x) `id`" in words
    assert not (tmp_path / "x").exists()


def test_a_result_records_when_its_command_started():
    """The evidence's and the timeline's ``started`` is the command's start on the wall clock, not its end (a 0.5 s
    command used to look as if it began when it had finished)."""
    before = time.time()
    result = LocalRunner().run("sleep 0.5").check()
    assert before - 0.05 <= result.started <= before + 0.2
    assert result.duration >= 0.5
