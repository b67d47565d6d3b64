"""A site's own checks, written with the documented fixtures (docs/site-checks.md): copy this file next to your
target file, edit the lists, and run it with the groups (``pytest -m acceptance --slurmflox-target=F . --pyargs
pytest_slurmflox.suites``) or alone (``pytest --pyargs pytest_slurmflox.examples --slurmflox-target=F``).

Where the expectations come from: the lists below, which are the site's (what its users are promised), never a
worker's own answer.
"""

from __future__ import annotations

import pytest

pytestmark = [pytest.mark.acceptance, pytest.mark.site]

#: Packages every worker must have installed (the site's list: edit it).
WORKER_PACKAGES = ("bash",)
#: Commands users run at the login endpoint.
LOGIN_COMMANDS = ("sbatch", "squeue")


def test_every_worker_has_the_sites_packages(slurmflox_workers):
    """Every worker has each package installed, asked of all workers at once (a few Slurm steps, however many
    workers): a worker without one FAILS naming it."""
    facts = slurmflox_workers.gather(
        {name: (lambda host, name=name: host.package(name).is_installed) for name in WORKER_PACKAGES}
    )
    missing = [f"{node}: {name} is not installed" for name, on in facts.items() for node, ok in sorted(on.items())
               if not ok]  # fmt: skip
    assert not missing, f"every worker has {', '.join(WORKER_PACKAGES)}: " + "; ".join(missing)


def test_the_login_endpoint_has_the_users_commands(slurmflox_login):
    absent = [name for name in LOGIN_COMMANDS if not slurmflox_login.exists(name)]
    assert not absent, f"the login endpoint has {', '.join(LOGIN_COMMANDS)}: missing {', '.join(absent)}"
