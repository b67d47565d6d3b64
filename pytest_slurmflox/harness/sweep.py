"""Leave nothing behind on the cluster: at session end cancel every unfinished job of the run and remove
the run's files from the user's home (unless --slurmflox-keep).

One place for it, called by whichever process ends the run: the ``target`` fixture's teardown in a serial session
(it holds the connection), or the pytest-xdist controller once every worker has finished (workers share the run id,
so no single worker may remove what the others still use; the controller never opened the target, so it opens the
login endpoint just for this).
"""

from __future__ import annotations

from ..base.run import Runner, quoted
from ..cluster.slurm import SlurmClient
from ..cluster.submit import RUNS_DIR, is_run_id
from ..model.target import TargetSpec


def sweep_run(login: Runner, slurm: SlurmClient | None, run_id: str, *, keep: bool) -> None:
    """Cancel the run's unfinished jobs (by the run's name prefix, whichever check left them) and, unless ``keep``,
    remove its files. Never raises: teardown must go on; what could not be done is said. A run id that is not one
    (options.py refuses it at parse time; this is the last line before ``rm -rf``) sweeps nothing."""
    if not is_run_id(run_id):
        print(f"slurmflox: not sweeping {run_id!r}: not a run id; nothing cancelled, nothing removed")
        return
    if slurm is not None:
        try:
            slurm.cancel_named(f"sfx-{run_id}-")
        except Exception as exc:
            print(f"slurmflox: could not cancel the jobs of run {run_id}: {exc}")
    if keep:
        return
    try:
        login.run(quoted(f"rm -rf -- {RUNS_DIR}/%s; rmdir -- {RUNS_DIR} 2>/dev/null; true", run_id), timeout=60)
    except Exception as exc:
        print(f"slurmflox: could not remove the files of run {run_id}: {exc}")


def sweep_after_workers(spec: TargetSpec, run_id: str, *, keep: bool) -> None:
    """The xdist controller's sweep: open the login endpoint the target names, sweep, close."""
    from .connection import login_runner

    login = login_runner(spec.login, None)
    try:
        sweep_run(login, SlurmClient(user=login, partition=spec.partition), run_id, keep=keep)
    finally:
        login.close()
