"""Every mistake in a target file or an option is refused before a run starts (issue 39): one line, exit 4, nothing
written (no report directory, no ``.pytest_cache``), no connection to the declared login.

Each row of the issue's table is run as a customer runs the suites (``pytest --pyargs pytest_slurmflox.suites
--slurmflox-target=F``), in a pytest subprocess from a directory outside the checkout, with xdist as the plugin
sets it up for such a run. The login the files declare is a listening socket of this test: nothing may connect.
Every key of the schema misspelled once is refused naming it (in process: the refusal is the same code path).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from targetdocs import EVERY_KEY

from pytest_slurmflox.model import targetschema

GOOD = "version: 1\nname: site\nsubstrate: existing\nslurm: {partition: all}\n{login}"


@pytest.fixture
def login() -> Iterator[socket.socket]:
    """A listening socket standing in for the declared login: a refused run never connects to it."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        listener.setblocking(False)
        yield listener


def _login_line(listener: socket.socket, **extra: str) -> str:
    fields = {"host": "127.0.0.1", "port": str(listener.getsockname()[1]), "user": "alice", "key": "id", **extra}
    return "login: {" + ", ".join(f"{k}: {v}" for k, v in fields.items()) + "}\n"


def _customer_run(where: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURMFLOX_", "WORKER_", "PYTEST_"))}
    env["WORKDIR"] = str(where / "operator")
    return subprocess.run(
        [sys.executable, "-m", "pytest", "--pyargs", "pytest_slurmflox.suites", *args],
        cwd=where,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _refused(where: Path, listener: socket.socket | None, *args: str) -> str:
    """Run; assert exit 4, at most 3 lines, nothing written, no connection; return the ERROR line."""
    before = set(where.iterdir())
    proc = _customer_run(where, *args)
    lines = [line for line in (proc.stdout + proc.stderr).splitlines() if line.strip()]
    assert proc.returncode == pytest.ExitCode.USAGE_ERROR, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert 1 <= len(lines) <= 3, lines
    assert set(where.iterdir()) == before, "a refused run wrote " + str(set(where.iterdir()) - before)
    if listener is not None:
        with pytest.raises(BlockingIOError):
            listener.accept()
    errors = [line for line in lines if line.startswith("ERROR: ")]
    assert len(errors) == 1, lines
    return errors[0]


#: (row, the file after ``version: 1`` with ``{login}`` the declared login, what the one line says)
ROWS = [
    ("missing", None, "does not exist"),
    ("yaml", "{login}login: {host: h, user: u, key: k\n", "is not valid YAML: line 4, column 1: expected ',' or '}'"),
    ("logn", "logn: {host: h, user: u, key: k}\n", "logn is not a known key (did you mean login?); login is required"),
    ("port", "login: {host: 127.0.0.1, port: one, user: a, key: k}\n", "login.port: 'one' is text, expected a whole"),
    ("uid", '{login}identity: {user: a, uid: "twelve", gid: 1}\n', "identity.uid: 'twelve' is text, expected a whole"),
    ("replicas", "{login}expect: {replicas: two}\n", "expect.replicas: 'two' is text, expected a whole number"),
    ("acounting", "{login}acounting: {account: hpc}\n", "acounting is not a known key (did you mean accounting?)"),
    (
        "partiton",
        "{login}slurm: {partiton: gpu}\n",
        "slurm.partiton is not a known key (did you mean slurm.partition?)",
    ),
    ("identiy", "{login}identiy: {user: a, uid: 1, gid: 1}\n", "identiy is not a known key (did you mean identity?)"),
    ("substrate", "{login}substrate: exsting\n", "substrate: 'exsting' is not one of local, qemu, existing"),
    # a YAML loader keeps the last of two keys: the first login (with its user) would be read as never written
    ("twice", "{login}slurm: {partition: all}\nlogin: {host: h2}\n", "login is given twice (line 2 and line 4)"),
    ("twice-nested", "{login}slurm:\n  partition: all\n  partition: gpu\n", "slurm.partition is given twice (line 4"),
]


@pytest.mark.parametrize(("name", "mistake", "said"), ROWS, ids=[row[0] for row in ROWS])
def test_each_mistake_in_a_target_file_is_one_line_exit_4_nothing_written(tmp_path, login, name, mistake, said):
    target = tmp_path / f"{name}.yaml"
    if mistake is not None:
        target.write_text("version: 1\n" + mistake.replace("{login}", _login_line(login)))
    line = _refused(tmp_path, login, f"--slurmflox-target={target}")
    assert line.startswith(f"ERROR: slurmflox: target file {target}: ") and said in line, line
    assert line.endswith("nothing was run"), line


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (("--slurmflox-groups=T3,T99",), "--slurmflox-groups: unknown group(s) T99; known: T1,"),
        (("--slurmflox-groups=T3,T99", "-n", "2"), "--slurmflox-groups: unknown group(s) T99"),
        (("--slurmflox-groups=T11R",), "destructive group(s) T11R against an existing cluster need"),
        (("--slurmflox-run-id=../x",), "--slurmflox-run-id '../x': a run id is 1-64 of"),
        (("--slurmflox-up=foo",), "--slurmflox-up 'foo': not a substrate (choose local or qemu); nothing was run"),
    ],
)
def test_a_bad_option_is_one_line_exit_4_nothing_written_under_xdist_too(tmp_path, login, args, said):
    target = tmp_path / "site.yaml"
    target.write_text(GOOD.replace("{login}", _login_line(login)))
    line = _refused(tmp_path, login, f"--slurmflox-target={target}", *args)
    assert said in line, line


def test_a_broken_recorded_target_stops_an_acceptance_run(tmp_path):
    """A bare run in a work dir whose recorded deployment's target file is gone: one line naming where it was
    recorded (a run that is not an acceptance run only shows it in its header: tests/unit/test_session.py)."""
    workdir = tmp_path / "operator"
    workdir.mkdir()
    gone = tmp_path / "gone.yaml"
    (workdir / "deployment.json").write_text(f'{{"substrate": "local", "target": "{gone}", "up_at": 0}}')
    line = _refused(tmp_path, None, "-m", "acceptance")
    assert f"target file {gone} (recorded in {workdir}/deployment.json): does not exist" in line, line


def _schema_keys() -> list[str]:
    """Every key the schema names, but one setting per settings section (the rest are the same rule)."""
    paths = [path for path, _ in targetschema.leaf_paths()]
    settings = [p for p in paths if p.startswith(("expect.settings.", "deployment.settings."))]
    return [p for p in paths if p not in settings] + ["expect.settings.WORKER_CPUS", "deployment.settings.NODES"]


def _every_key(listener_port: int) -> dict:
    """A valid target declaring every key, its login (and admin) the test's listening socket."""
    doc = yaml.safe_load(yaml.safe_dump(EVERY_KEY))
    doc["login"]["port"] = doc["admin"]["port"] = listener_port
    doc["login"]["host"] = doc["admin"]["host"] = "127.0.0.1"
    return doc


@pytest.mark.parametrize("path", _schema_keys())
def test_every_key_misspelled_once_stops_the_run_naming_it(pytester: pytest.Pytester, login, path: str):
    doc = _every_key(login.getsockname()[1])
    *parents, key = path.split(".")
    section = doc
    for part in parents:
        section = section[part]
    wrong = key[:-1] if len(key) > 3 else key + key[-1]  # ``accounting`` -> ``accountin``, ``qos`` -> ``qoss``
    section[wrong] = section.pop(key)
    target = pytester.path / "target.yaml"
    target.write_text(yaml.safe_dump(doc))
    reports = pytester.path / "reports"
    result = pytester.runpytest_inprocess(
        "-p", "no:cacheprovider", f"--slurmflox-target={target}", f"--slurmflox-reports={reports}", "-m", "T3"
    )
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    errors = [line for line in result.stderr.lines if line.startswith("ERROR:")]
    misspelled = ".".join([*parents, wrong])
    assert len(errors) == 1 and f"{misspelled} is not a known key (did you mean {path}?)" in errors[0], errors
    assert not reports.exists()
    with pytest.raises(BlockingIOError):
        login.accept()


def test_a_substrate_that_does_not_exist_is_refused_from_the_environment_too(pytester: pytest.Pytester, monkeypatch):
    """The same mistake, the same line and exit status, whichever source gives it (CLI above, environment here)."""
    monkeypatch.setenv("SLURMFLOX_UP", "foo")
    pytester.makepyfile("def test_x():\n    pass\n")
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert [line for line in result.stderr.lines if line.startswith("ERROR:")] == [
        "ERROR: --slurmflox-up 'foo': not a substrate (choose local or qemu); nothing was run"
    ]
