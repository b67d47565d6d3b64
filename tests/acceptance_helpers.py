"""Running pytest-slurmflox the way a user does (a pytest subprocess), and reading what it reported."""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import socket
import subprocess
import sys
import threading
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Iterator

    from pytest_slurmflox.substrates.local import LocalSubstrate
    from pytest_slurmflox.substrates.local.cluster import LocalCluster

#: The groups the default acceptance must PASS on a local cluster (trixie's run,
#: tests/integration/test_acceptance_local.py, and bookworm's, tests/integration/test_bookworm_local.py, assert the
#: same list).
LOCAL_MUST_PASS = (
    "test_t03_task_profile",
    "test_t05_interactive",
    "test_t06_mpi",
    "test_t07_policy",
    "test_t08_resources",
    "test_t09_storage_login",
    "test_ti_identity",
    "test_tp_provenance",
    "test_tf_failure_isolation",
    "test_t11_revision",
    "test_td_directory",
    "test_ta_accounting",
    "test_tr_rest",
)
#: The only capabilities a local cluster lacks: checks needing them SKIP naming them, NOT APPLICABLE (profile local;
#: ``declared-revision``: a substrate's target has no hand-written revision to check).
LOCAL_MISSING_CAPABILITIES = ("kubernetes", "flox-shim", "declared-revision")
#: The groups whose sign-off verdict is PASS on a local cluster: T2, T4 and T10 with their Kubernetes checks NOT
#: APPLICABLE (profile local, pytest_slurmflox/reporting/profiles.py); T1 is NOT APPLICABLE as a whole.
LOCAL_PASS_GROUPS = frozenset(
    {"T2", "T3", "T4", "T5", "T6", "T7", "T8", "T9", "T10", "T11", "TP", "TI", "TF", "TD", "TA", "TR"}
)
#: The worker TaskProlog of a local node (a bind mount over it is a mutation that a restore undoes).
TASK_PROLOG = "/etc/slurm/flox-task-prolog/task-prolog.sh"


def evidence_of(output: str) -> dict:
    """The evidence.json of the run whose terminal ``output`` this is (its ``slurmflox: artifacts in DIR`` line)."""
    import json

    found = re.search(r"slurmflox: artifacts in (\S+): ", output)
    assert found, output[-3000:]
    return json.loads((Path(found.group(1)) / "evidence.json").read_text())


def group_verdicts(output: str) -> dict[str, str]:
    """The sign-off summary's verdict per group (``*T3    PASS  pass 4 ...``), from a run's terminal output."""
    found = re.findall(r"^[* ]?(T[0-9A-Z]+)\s+(PASS|FAIL|SKIP|NOT RUN|NOT APPLICABLE)\s+pass\b", output, re.M)
    return dict(found)


def task_prolog_exporting(*lines: str) -> tuple[str, str]:
    """(break, restore) root commands for a node: its TaskProlog also prints ``lines`` (``export NAME=value``, so
    each task of that worker gets them), through a bind-mounted copy; the restore unmounts it."""
    extra = 'printf "%s\\n" ' + " ".join(f'"{line}"' for line in lines) + "; exit 0"
    breaks = (
        f"cp {TASK_PROLOG} /tmp/.sfx-task-prolog.sh && sed -i 's|^exit 0$|{extra}|' /tmp/.sfx-task-prolog.sh && "
        f"grep -qF -- {shlex.quote(lines[0])} /tmp/.sfx-task-prolog.sh && "
        f"mount --bind /tmp/.sfx-task-prolog.sh {TASK_PROLOG}"
    )
    return breaks, f"umount {TASK_PROLOG}"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass
class Run:
    rc: int
    output: str
    cases: dict[str, tuple[str, str]]  #: test id -> (outcome, message)

    def outcomes(self, outcome: str) -> list[str]:
        return sorted(k for k, (o, _) in self.cases.items() if o == outcome)

    def messages(self, outcome: str = "failure") -> str:
        """The JUnit messages (message attribute and text) of every case with ``outcome``, one string to search."""
        return "\n".join(m for o, m in self.cases.values() if o == outcome)

    def in_module(self, module: str, outcome: str = "passed") -> list[str]:
        """The cases of one suite module (``test_t05_interactive``) with ``outcome``."""
        return [name for name in self.outcomes(outcome) if name.startswith(module + "::")]


#: What an integration module's ``deployment`` fixture yields: home dir, work dir, the options that keep the
#: deployment private (``private_deployment``), and the run that brought it up.
Deployment = tuple[Path, Path, tuple[str, ...], Run]


def clean_env() -> dict[str, str]:
    """This process's environment without settings or plugin options (``SLURMFLOX_*``), so a child run sees only
    its arguments."""
    return {k: v for k, v in os.environ.items() if not k.startswith("SLURMFLOX_")}


def private_deployment(tmp_path_factory, name: str) -> tuple[Path, Path, tuple[str, ...]]:
    """A home dir, its work dir and the options that keep a test deployment private (work dir, free port)."""
    if os.geteuid() != 0:
        import pytest

        pytest.skip("needs root: the local substrate creates namespaces and overlay mounts")
    home = tmp_path_factory.mktemp(name)
    workdir = home / "operator"
    return home, workdir, (f"--slurmflox-workdir={workdir}", f"--slurmflox-login-ssh-port={free_port()}")


def destroy(home: Path, common: tuple[str, ...]) -> str:
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "--slurmflox-destroy", *common],
        cwd=home,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    return proc.stdout


def _streamed(argv: list[str], cwd: Path, env: dict[str, str], timeout: float, on_line) -> tuple[int, str]:
    """Run ``argv`` handing each line of its output (stdout and stderr together) to ``on_line`` as it comes;
    killed after ``timeout`` seconds (then exit status -9)."""
    proc = subprocess.Popen(argv, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert proc.stdout is not None
    killer = threading.Timer(timeout, proc.kill)
    killer.start()
    lines = []
    try:
        for line in proc.stdout:
            lines.append(line)
            on_line(line)
    finally:
        killer.cancel()
    return proc.wait(), "".join(lines)


def run_pytest(cwd: Path, *args: str, timeout: float = 1500, on_line=None) -> Run:
    """An acceptance run as a user starts it; ``on_line`` (optional) is handed each line of its terminal as it
    comes, while the run lasts."""
    junit = cwd / f"junit-{time.monotonic_ns()}.xml"
    env = clean_env()
    t0 = time.monotonic()
    argv = [
        sys.executable,
        "-m",
        "pytest",
        "--pyargs",
        "pytest_slurmflox.suites",
        "-p",
        "no:cacheprovider",
        "-p",
        "no:randomly",  # an acceptance run's order is the plugin's; pytest-randomly shuffles the project's tests
        "-o",
        "junit_family=xunit1",
        f"--junitxml={junit}",
        "-rs",
        *args,
    ]
    if on_line is not None:
        rc, output = _streamed(argv, cwd, env, timeout, on_line)
    else:
        proc = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False)
        rc, output = proc.returncode, proc.stdout + proc.stderr
    print(f"[pytest {' '.join(args)}] exit {rc} in {time.monotonic() - t0:.1f}s")
    cases: dict[str, tuple[str, str]] = {}
    if junit.exists():
        for case in ET.parse(junit).getroot().iter("testcase"):
            name = f"{case.get('classname', '').rsplit('.', 1)[-1]}::{case.get('name')}"
            outcome, message = "passed", ""
            for tag in ("failure", "error", "skipped"):
                el = case.find(tag)
                if el is not None:
                    outcome, message = tag, (el.get("message") or "") + (el.text or "")
            cases[name] = (outcome, message)
    return Run(rc, output, cases)


def local_substrate(workdir: Path, **cli: str) -> LocalSubstrate:
    """The local substrate of the deployment recorded in ``workdir``, with settings resolved as the plugin resolves
    them (``cli``: further CLI-level settings the deployment was made with, e.g. ``LOCAL_SUITE="bookworm"``), so a
    test reaches the very nodes a run used. Silent: its progress lines are no test's business."""
    from pytest_slurmflox.model.settings import resolve
    from pytest_slurmflox.model.workdir import Workdir
    from pytest_slurmflox.substrates.local import LocalSubstrate
    from pytest_slurmflox.substrates.local.cluster import LocalCluster

    settings = resolve(cli={"WORKDIR": str(workdir), **cli}, substrate="local").settings
    return LocalSubstrate(LocalCluster(settings, Workdir(workdir), lambda _line: None))


def cluster_of(workdir: Path, **cli: str) -> LocalCluster:
    """The node primitives (nodes, runners inside them, state) of the deployment in ``workdir``: what the local
    substrate holds (see :func:`local_substrate`)."""
    return local_substrate(workdir, **cli).cluster


def node_sh(workdir: Path, node: str, command: str) -> str:
    """``command`` as root in ``node`` of the deployment in ``workdir``; it must succeed (a mutation or restore that
    did not happen would make the verdict that follows meaningless). Its stdout."""
    result = cluster_of(workdir).node_runner(node).run(command)
    assert result.ok, result.describe()
    return result.stdout


def run_checks(deployment: Deployment, *select: str) -> Run:
    """The checks ``select`` picks (``-m``/``-k``), run as a user runs them against the recorded deployment."""
    home, _, common, _ = deployment
    return run_pytest(home, *select, *common, timeout=600)


def mutated(deployment: Deployment, node_commands: dict[str, tuple[str, str]], *select: str) -> Run:
    """Per node, a (break, restore) pair of root commands: apply every break, run the selected checks, then run every
    restore whatever happened, so the next test starts from the healthy cluster."""
    _, workdir, _, _ = deployment
    try:
        for node, (breaks, _restore) in node_commands.items():
            node_sh(workdir, node, breaks)
        return run_checks(deployment, *select)
    finally:
        for node, (_breaks, restore) in node_commands.items():
            node_sh(workdir, node, restore)


def passes_again(deployment: Deployment, *select: str) -> Run:
    """The same selection after restoring: nothing fails or errors and something passes (SKIPs only for
    capabilities the target lacks), so the failure before came from the mutation and from nothing else."""
    run = run_checks(deployment, *select)
    assert run.outcomes("failure") == [] and run.outcomes("error") == [] and run.outcomes("passed"), run.output[-3000:]
    return run


@contextlib.contextmanager
def deployed(
    tmp_path_factory, name: str, *up: str, options: tuple[str, ...] = (), timeout: float = 1500
) -> Iterator[Deployment]:
    """A private local deployment for one test module: brought up the way a user does it (``--slurmflox-up=local``
    plus ``up``, e.g. ``-m T5``), with ``options`` (e.g. ``--slurmflox-local-suite=bookworm``) on every later run
    and on destroy too; destroyed afterwards whatever happened, a failed or timed-out ``up`` included."""
    home, workdir, common = private_deployment(tmp_path_factory, name)
    common = (*common, *options)
    try:
        first = run_pytest(home, "--slurmflox-up=local", *up, *common, timeout=timeout)
        yield home, workdir, common, first
    finally:
        print(destroy(home, common)[-2000:])


def assert_local_acceptance(run: Run) -> dict[str, str]:
    """A default acceptance run on a local cluster: it ran, nothing failed or errored, every group a local cluster
    can pass PASSed (``LOCAL_MUST_PASS`` modules, ``LOCAL_PASS_GROUPS`` verdicts) and every SKIP names a capability a
    local cluster lacks (``LOCAL_MISSING_CAPABILITIES``). The skipped cases and their messages."""
    print(run.output[-6000:])
    assert run.cases, run.output[-4000:]
    assert run.outcomes("failure") == [] and run.outcomes("error") == [], run.output[-8000:]
    assert run.rc == 0, run.output[-4000:]
    passed = run.outcomes("passed")
    missing = [module for module in LOCAL_MUST_PASS if not run.in_module(module)]
    assert not missing, (missing, passed)
    verdicts = group_verdicts(run.output)
    assert {g for g, v in verdicts.items() if v == "PASS"} == LOCAL_PASS_GROUPS, verdicts
    skipped = {k: m for k, (o, m) in run.cases.items() if o == "skipped"}
    # Only what needs Kubernetes or the Flox shim may skip on the local substrate.
    for name, message in skipped.items():
        assert any(f"missing capability {cap}" in message for cap in LOCAL_MISSING_CAPABILITIES), (name, message)
    print(f"PASSED {len(passed)}, SKIPPED {len(skipped)}: " + ", ".join(sorted(skipped)))
    return skipped


def slurm_2205_config(workdir: Path, **cli: str) -> dict[str, str]:
    """The controller of the deployment in ``workdir`` runs Slurm 22.05 (Debian's build says "slurm-wlm 22.05.8",
    upstream "slurm 22.05.8"); its ``scontrol show config`` as KEY -> value."""
    ctl = cluster_of(workdir, **cli).node_runner("ctl")
    version = ctl.run("sinfo --version")
    assert version.ok and re.fullmatch(r"slurm(-wlm)? 22\.05\.\d+\s*", version.stdout), version.describe()
    config = ctl.run("scontrol show config")
    assert config.ok, config.describe()
    return dict(re.findall(r"^(\w+)\s+=\s+(.*?)\s*$", config.stdout, re.M))
