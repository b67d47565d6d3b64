"""Integration: a site's noise never changes a verdict (issue 17).

One local cluster, provisioned quiet and run through the default acceptance; then converged with
``--slurmflox-local-site-noise`` (a site TaskProlog whose ``print`` lines come before ours, a Prolog and Epilog, a
login banner, a ``.bashrc`` that echoes, some of their lines shaped like our own output) and run again. Every
check must reach the same verdict on both, and the noise must really be there (a task's stdout and a login
command's stdout carry it), or the comparison would prove nothing.
"""

from __future__ import annotations

import pytest
from acceptance_helpers import cluster_of, destroy, private_deployment, run_pytest

from pytest_slurmflox.substrates.local import sitenoise

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    home, workdir, common = private_deployment(tmp_path_factory, "sitenoise")
    try:
        quiet = run_pytest(home, "--slurmflox-up=local", "-m", "acceptance", *common)
        noisy = run_pytest(home, "--slurmflox-up=local", "--slurmflox-local-site-noise", "-m", "acceptance", *common)
        yield home, workdir, quiet, noisy
    finally:
        print(destroy(home, common)[-2000:])


def _login(workdir):
    sub = cluster_of(workdir)
    return sub.node_runner("login", sub.settings.test_user)


def test_the_noise_is_really_there(runs):
    _, workdir, _, _ = runs
    login = _login(workdir)
    task = login.run("bash -lc 'srun -N1 -n1 true; srun -N1 -n1 echo ours'", timeout=120)
    assert task.ok and "site: welcome to the cluster" in task.stdout and "ours" in task.stdout, task.describe()
    assert (workdir / "local" / "conf" / "site" / "task-prolog.sh").exists()
    bashrc = login.run(f"cat /home/{login.user}/.bashrc")
    assert bashrc.ok and bashrc.stdout == sitenoise.bashrc(), bashrc.describe()


def test_same_verdicts_with_site_noise_as_without(runs):
    _, _, quiet, noisy = runs
    print(quiet.output[-3000:])
    print(noisy.output[-3000:])
    assert quiet.cases and quiet.outcomes("failure") == [] and quiet.outcomes("error") == [], quiet.output[-6000:]
    verdicts = {name: outcome for name, (outcome, _) in quiet.cases.items()}
    noisy_verdicts = {name: outcome for name, (outcome, _) in noisy.cases.items()}
    differ = {n: (verdicts.get(n), noisy_verdicts.get(n)) for n in set(verdicts) | set(noisy_verdicts)}
    differ = {n: v for n, v in differ.items() if v[0] != v[1]}
    assert not differ, (differ, noisy.output[-6000:])
    assert noisy.rc == quiet.rc == 0, noisy.output[-4000:]
