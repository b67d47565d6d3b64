"""Runners as one family: arguments are quoted, the environment is one exported prefix, a missing node is an exit
status, and every runner reports through the same observer."""

from __future__ import annotations

import time
from pathlib import Path
from types import SimpleNamespace

from hostile import HOSTILE
from hypothesis import HealthCheck, given, settings

from pytest_slurmflox.base.run import Invocation, LocalRunner, Result, Runner, command_line, with_env
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
    from pytest_slurmflox.cluster.slurm import JOB_FORMAT, SlurmClient

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


def test_an_invocation_is_the_line_the_script_and_the_start():
    """Every runner starts a command the same way: args quoted onto the line (the evidence), the env exports
    in front of it only in the script ``bash -c`` runs."""
    before = time.monotonic()
    call = Invocation.start("printf %s", ["a b", "$(id)"], {"K": "v w"})
    assert call.line == "printf %s 'a b' '$(id)'"
    assert call.script == "export K='v w'; printf %s 'a b' '$(id)'"
    assert call.argv == ["bash", "-c", call.script]
    assert before <= call.t0 <= time.monotonic()
    seen: list[Result] = []
    result = call.result(seen.append, "here", "me", 3, "out", "err")
    assert seen == [result]
    assert (result.command, result.where, result.user, result.exit_status) == (call.line, "here", "me", 3)
    assert (result.stdout, result.stderr) == ("out", "err") and result.duration >= 0


def test_the_pod_runner_starts_its_command_as_the_local_runner_does(monkeypatch):
    """The pod runner runs the invocation's ``bash -c`` argv and records its line: what the local runner runs and
    records for the same call. The API server's exec stream is a stand-in here (no cluster in the unit layer)
    that records what it was asked and closes with exit 0."""
    import kubernetes.stream

    from pytest_slurmflox.cluster.kube import PodRunner

    asked: dict = {}

    class Closed:
        returncode = 0

        def is_open(self) -> bool:
            return False

        def close(self) -> None:
            pass

    def stream(_func, pod, namespace, **kwargs):
        asked.update(kwargs, pod=pod, namespace=namespace)
        return Closed()

    monkeypatch.setattr(kubernetes.stream, "stream", stream)
    kube = SimpleNamespace(core=SimpleNamespace(connect_get_namespaced_pod_exec=None), namespace="slurm")
    pod = PodRunner(kube, "worker-0", "slurmd").run("printf %s", "a b", env={"K": "v"})  # type: ignore[arg-type]
    call = Invocation.start("printf %s", ["a b"], {"K": "v"})
    assert asked["command"] == call.argv and (asked["pod"], asked["namespace"]) == ("worker-0", "slurm")
    local = LocalRunner().run("printf %s", "a b", env={"K": "v"})
    assert pod.command == local.command == call.line
    assert (pod.exit_status, pod.where, pod.user) == (0, "pod/worker-0:slurmd", "root")


def test_every_runner_is_a_runner_and_closes():
    """``Runner`` is runtime-checkable and declares ``close``: each runner has it, and closing one that holds
    nothing (or was never connected) is harmless, twice."""
    from pytest_slurmflox.base.run import SSHRunner
    from pytest_slurmflox.cluster.kube import PodRunner

    runners = [
        LocalRunner(),
        NamespaceRunner(node="worker9", pid_of=lambda: None),
        SSHRunner(host="127.0.0.1", port=22, user="nobody", key_file=None),
        PodRunner(SimpleNamespace(), "worker-0", "slurmd"),  # type: ignore[arg-type]
    ]
    for runner in runners:
        assert isinstance(runner, Runner), type(runner).__name__
        runner.close()
        runner.close()
    assert not isinstance(SimpleNamespace(run=print, where="x", user="y"), Runner)  # no close: not a Runner
