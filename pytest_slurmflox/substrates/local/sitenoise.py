"""A site's noise, on request (``--slurmflox-local-site-noise``): what a customer's cluster prints around our commands.

Real sites have a TaskProlog that prints to every task's stdout (``print ...``), a Prolog and Epilog, a login
banner and a ``.bashrc`` that echoes. None of it may change a verdict, so the project's own tests run the
acceptance against a local cluster that has all of them and expect the same verdicts as on a quiet one. Lines that
look like our own output (``node|text``, ``task=N``) are printed on purpose.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from ...base.run import quoted
from .slurmconf import TASK_PROLOG

#: Inside a node, where the cluster's conf dir (``<workdir>/local/conf``) is mounted.
SITE_DIR = "/etc/slurm/site"
NOISE = ("site: welcome to the cluster", "node1|task=0", "task=9", "uid=0(root) gid=0(root) groups=0(root)")


@dataclass(frozen=True)
class SiteNoise:
    """Paths in the node of the site's scripts; empty when the cluster is quiet."""

    task_prolog: str = TASK_PROLOG
    prolog: str = ""
    epilog: str = ""
    banner: str = ""


QUIET = SiteNoise()
NOISY = SiteNoise(
    task_prolog=f"{SITE_DIR}/task-prolog.sh",
    prolog=f"{SITE_DIR}/prolog.sh",
    epilog=f"{SITE_DIR}/epilog.sh",
    banner=f"{SITE_DIR}/banner",
)


def _echoes(prefix: str) -> str:
    return "".join(quoted("echo %s\n", prefix + line) for line in NOISE)


def files() -> dict[str, tuple[str, int]]:
    """The site's files, relative to the conf dir: name -> (text, mode). The site TaskProlog prints its lines
    first, then hands over to ours (exec, its arguments forwarded: T3 runs it with a profile directory), the way a
    site chains the contract's prolog after its own."""
    return {
        "site/task-prolog.sh": ("#!/bin/sh\n" + _echoes("print ") + f'exec {TASK_PROLOG} "$@"\n', 0o755),
        "site/prolog.sh": ("#!/bin/sh\n" + _echoes("") + "exit 0\n", 0o755),
        "site/epilog.sh": ("#!/bin/sh\n" + _echoes("") + "exit 0\n", 0o755),
        "site/banner": ("\n".join(NOISE) + "\n", 0o644),
    }


def bashrc() -> str:
    """A ``.bashrc`` that echoes before anything else, even in non-interactive shells (sshd runs the user's shell
    with ``-c``, and bash reads ``.bashrc`` then)."""
    return "# site .bashrc (slurmflox site noise)\n" + _echoes("")


def write_bashrc(home: Path, user: str, uid: int, gid: int) -> None:
    """Put the echoing ``.bashrc`` into the user's shared home (created owned by the user, as the login node
    would)."""
    user_home = home / user
    if not user_home.exists():
        user_home.mkdir(mode=0o755)
        os.chown(user_home, uid, gid)
    path = user_home / ".bashrc"
    if not path.exists() or path.read_text() != bashrc():
        path.write_text(bashrc())
        os.chown(path, uid, gid)
