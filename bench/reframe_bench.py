"""Side by side with ReFrame: six equivalent checks, the same live cluster, each whole command timed.

Ours: ``pytest --pyargs pytest_slurmflox.suites -m acceptance -k <the six checks> -n 2 --slurmflox-target=<file>``,
from the project installed as a customer installs it (``bench/.venv-ours``: this checkout, not editable, runtime
dependencies only), run outside the checkout.
ReFrame's: ``reframe -c bench/reframe/checks.py -r --exec-policy=async`` with its ``slurm`` scheduler
(bench/reframe/settings.py), installed from PyPI into the benchmark's own venv (``bench/.venv-reframe``, from the
``bench`` extra of pyproject.toml, the single source of dependencies; never the project's runtime dependencies).

How ReFrame reaches the cluster: it runs on this host, and its PATH starts with wrappers for ``sbatch``, ``sacct``,
``squeue``, ``scancel`` and ``scontrol`` that run the real command on the login node as the target's user, over
one multiplexed OpenSSH connection (``ControlMaster``: ours keeps one paramiko connection too), in the working
directory that is the same directory there: ReFrame's prefix lives in the cluster's shared home, whose host path
(``<workdir>/local/home``) the wrapper maps to the nodes' ``/home``. ReFrame's ``SLURM_TIME_FORMAT`` goes along.
ReFrame runs as root here (OpenSSH's client refuses a uid without a passwd entry on this host, and the test user
exists only in the cluster's directory) with umask 0, from a copy of ``bench/reframe`` whose ``src`` is mode 0777
(ReFrame copies its mode onto a stage directory), so the user's jobs can write where ReFrame stages them.

Why a script and not a timed test: wall time on a shared 2-core machine is a measurement, not a pass/fail fact.
The two sides alternate run by run (neither always runs on a warmer cluster), after one uncounted warm-up run
each; both run with Python's default bytecode caching (``PYTHONDONTWRITEBYTECODE`` removed from their environment:
a shell that sets it makes every run of ours recompile the plugin and its suites, while pip compiled ReFrame's
files when it installed them). Every counted run of either side must pass all its checks, else the run is reported
and the benchmark exits non-zero.

    .venv/bin/python bench/reframe_bench.py --runs 5 --target /path/to/workdir/target.yaml
"""

from __future__ import annotations

import argparse
import functools
import os
import secrets
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import tomllib
import yaml

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
VENV = HERE / ".venv-reframe"
#: Our side as a customer has it: the project installed (not editable) with its runtime dependencies only.
OURS_VENV = HERE / ".venv-ours"
#: The pytest checks the ReFrame file mirrors (bench/reframe/checks.py names each in its docstring).
OURS = (
    "test_srun_spans_two_workers",
    "test_job_array_runs_every_task",
    "test_afterok_runs_after_success_and_never_after_failure",
    "test_mpi_ranks_on_every_worker",
    "test_write_on_one_worker_read_on_another_and_at_login",
    "test_scancel_ends_a_running_job",
)
REFRAME = "ReFrame 4.10.4 (async policy)"
#: The Slurm commands ReFrame's slurm scheduler runs (submission, polling, cancellation, node queries).
FORWARDED = ("sbatch", "sacct", "squeue", "scancel", "scontrol")

WRAPPER = """#!/bin/bash
# bench/reframe_bench.py: run {command} on the cluster's login node, in the same (shared-home) directory.
hh={host_home}
nh={node_home}
here=$(pwd -P)
go=cd
case "$here" in "$hh" | "$hh"/*) go="cd $(printf '%q' "$nh${{here#"$hh"}}")" ;; esac
args=""
for a in "$@"; do args="$args $(printf '%q' "${{a//"$hh"/"$nh"}}")"; done
exec ssh {ssh} "$go && SLURM_TIME_FORMAT=$(printf '%q' "${{SLURM_TIME_FORMAT:-standard}}") {command}$args"
"""


@dataclass(frozen=True)
class Cluster:
    """What both sides need of the target file."""

    target: Path
    host_home: Path  #: the shared home as this host sees it
    node_home: str  #: the same directory as the nodes see it
    partition: str
    workers: int
    ssh: tuple[str, ...]  #: ``ssh`` options and destination for the login node
    checks: Path  #: the copy of bench/reframe ReFrame runs from


def cluster(target: Path, scratch: Path) -> Cluster:
    """The cluster of ``target``; ``scratch`` gets the SSH control socket and the copy of bench/reframe."""
    doc = yaml.safe_load(target.read_text())
    login = doc["login"]
    ssh = (
        "-o", "BatchMode=yes", "-o", f"UserKnownHostsFile={login['known_hosts']}", "-o", "StrictHostKeyChecking=yes",
        "-o", "ControlMaster=auto", "-o", f"ControlPath={scratch / 'ssh-control'}", "-o", "ControlPersist=600",
        "-i", login["key"], "-p", str(login["port"]), f"{login['user']}@{login['host']}",
    )  # fmt: skip
    checks = scratch / "reframe"
    shutil.copytree(HERE / "reframe", checks, ignore=shutil.ignore_patterns("__pycache__"))
    (checks / "src").chmod(0o777)
    return Cluster(
        target=target,
        host_home=Path(doc["workdir"]) / "local" / "home",
        node_home=doc["expect"]["settings"]["WORKER_HOME_PATH"],
        partition=doc["slurm"]["partition"],
        workers=int(doc["expect"]["replicas"]),
        ssh=ssh,
        checks=checks,
    )


def reframe_venv() -> Path:
    """The benchmark's own venv with the ``bench`` extra's packages (ReFrame), made once."""
    reframe = VENV / "bin" / "reframe"
    if not reframe.exists():
        wanted = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["bench"]
        subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True)
        subprocess.run([str(VENV / "bin" / "pip"), "install", "-q", *wanted], check=True)
    return reframe


def ours_venv() -> Path:
    """The benchmark's venv for our side: this checkout installed as a customer installs the wheel, with the runtime
    dependencies only. The project's own venv also holds the test extras, whose pytest plugins load in every process
    (hypothesis's alone cost 0.25 s of each process's start, measured with ``python -X importtime``); a customer's
    never does. Reinstalled (our package only) each time, so it runs the code being measured."""
    python = OURS_VENV / "bin" / "python"
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(OURS_VENV)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q", str(ROOT)], check=True)
    reinstall = [str(python), "-m", "pip", "install", "-q", "--no-deps", "--force-reinstall", str(ROOT)]
    subprocess.run(reinstall, check=True)
    return python


def wrappers(where: Path, c: Cluster) -> Path:
    """``<where>/bin`` with one forwarding wrapper per Slurm command ReFrame runs."""
    bin_dir = where / "bin"
    bin_dir.mkdir(parents=True, exist_ok=True)
    ssh = " ".join(shlex.quote(part) for part in c.ssh)
    for command in FORWARDED:
        path = bin_dir / command
        home, node = shlex.quote(str(c.host_home)), shlex.quote(c.node_home)
        path.write_text(WRAPPER.format(command=command, host_home=home, node_home=node, ssh=ssh))
        path.chmod(0o755)
    return bin_dir


@dataclass(frozen=True)
class Run:
    wall: float
    ok: bool
    load: float  #: 1-minute load average when the run ended
    tail: str  #: the end of its output, shown when it failed


def environment(**extra: str) -> dict[str, str]:
    """This process's environment for a side, with Python's default bytecode caching."""
    return {**{k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}, **extra}


def timed(argv: list[str], env: dict[str, str], cwd: Path | None = None) -> Run:
    began = time.monotonic()
    done = subprocess.run(argv, capture_output=True, text=True, env=env, check=False, cwd=cwd)
    wall = time.monotonic() - began
    return Run(wall, done.returncode == 0, os.getloadavg()[0], (done.stdout + done.stderr)[-2500:])


def ours(c: Cluster, python: Path, workers: int) -> Run:
    """The customer's command from the installed package, run outside the checkout (so the checkout's
    ``pytest_slurmflox`` is not the one imported; the run's reports go to the scratch directory)."""
    argv = [str(python), "-m", "pytest", "-p", "no:cacheprovider", "--pyargs"]
    argv += ["pytest_slurmflox.suites", "-m", "acceptance", "-k", " or ".join(OURS), "-n", str(workers)]
    return timed([*argv, f"--slurmflox-target={c.target}"], environment(), cwd=c.checks.parent)


def theirs(c: Cluster, reframe: Path, bin_dir: Path, prefix: Path) -> Run:
    prefix.mkdir(parents=True)  # TMPDIR must exist, else Python's tempfile falls back to /tmp
    env = environment(
        PATH=f"{bin_dir}:{os.environ['PATH']}",
        SFX_RFM_PARTITION=c.partition,
        SFX_RFM_WORKERS=str(c.workers),
        HOME=str(prefix),  # ReFrame's own files (report, results database) stay with the run
        TMPDIR=str(prefix),  # and so does its log file
    )
    argv = [str(reframe), "-C", str(c.checks / "settings.py"), "-c", str(c.checks / "checks.py")]
    argv += ["--system=slurmflox:all", "--exec-policy=async", f"--prefix={prefix}", "--nocolor", "-r"]
    return timed(["sh", "-c", 'umask 0 && exec "$@"', "reframe", *argv], env)


def row(label: str, runs: list[Run]) -> str:
    walls = [r.wall for r in runs]
    return (
        f"| {label} | {len(runs)} | {statistics.median(walls):.1f} | {min(walls):.1f} | {max(walls):.1f} | "
        f"{sum(r.ok for r in runs)}/{len(runs)} | {min(r.load for r in runs):.1f}-{max(r.load for r in runs):.1f} |"
    )


def sides(
    c: Cluster, python: Path, workers: list[int], reframe: Path, bin_dir: Path, prefixes: Path
) -> dict[str, Callable[[str], Run]]:
    """Each side's command by its label: ours per xdist worker count, then ReFrame's (a fresh prefix per run)."""
    runs: dict[str, Callable[[str], Run]] = {
        f"pytest-slurmflox (-n {n})": functools.partial(lambda n, _run: ours(c, python, n), n) for n in workers
    }
    runs[REFRAME] = lambda run: theirs(c, reframe, bin_dir, prefixes / run)
    return runs


def measure(commands: dict[str, Callable[[str], Run]], runs: int) -> dict[str, list[Run]]:
    """One uncounted warm-up of each side, then ``runs`` rounds, the order of the sides rotating each round."""
    for label, command in commands.items():
        command(f"warm-up-{len(label)}")
    results: dict[str, list[Run]] = {label: [] for label in commands}
    labels = list(commands)
    for i in range(runs):
        for label in labels[i % len(labels) :] + labels[: i % len(labels)]:
            results[label].append(commands[label](str(i)))
            print(f"run {i} {label}: {results[label][-1].wall:.1f} s", file=sys.stderr, flush=True)
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--workers", type=int, nargs="+", default=[2], help="xdist workers of our side (-n), each")
    parser.add_argument("--target", type=Path, required=True, help="the live cluster's target file")
    args = parser.parse_args(argv)
    reframe, python = reframe_venv(), ours_venv()
    scratch = Path(tempfile.mkdtemp(prefix="sfx-rfm-bench-"))
    c = cluster(args.target.resolve(), scratch)
    prefixes = c.host_home / f"sfx-reframe-bench-{secrets.token_hex(3)}"
    try:
        results = measure(sides(c, python, args.workers, reframe, wrappers(scratch, c), prefixes), args.runs)
    finally:
        subprocess.run(["ssh", *c.ssh, "-O", "exit"], capture_output=True, check=False)
        shutil.rmtree(prefixes, ignore_errors=True)
        shutil.rmtree(scratch, ignore_errors=True)
    theirs_median = statistics.median(r.wall for r in results[REFRAME])
    print(
        "| side | runs | median s | min s | max s | runs passing every check | load (1 min) | ReFrame's median / this |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for label, runs in results.items():
        print(f"{row(label, runs)} {theirs_median / statistics.median(r.wall for r in runs):.2f}x |")
    print(f"cluster of {c.workers} workers")
    failing = [(label, r) for label, runs in results.items() for r in runs if not r.ok]
    for label, r in failing:
        print(f"--- a failing run of {label}:\n{r.tail}")
    return 1 if failing else 0


if __name__ == "__main__":
    raise SystemExit(main())
