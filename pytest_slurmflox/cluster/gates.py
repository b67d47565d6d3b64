"""The one capability gate: what a check does when the target lacks a capability it needs.

Why one gate with one rule: a capability the target does not have at all (no kubeconfig, no admin login, no
accounting) is a SKIP naming it, since there is nothing to judge; a capability the target file *declares* but that
does not answer is a FAIL with the error, since the owner said the cluster has it. The plugin's fixtures (``slurm``,
``admin``, ``kube``, ``submit``) and the suites gate through :func:`require`, so a declared admin login that does
not answer FAILs the same way whether a check asks the fixture or the target.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

#: Capabilities the target file declares by naming them; declared but not answering is a FAIL, not a SKIP.
DECLARED_BY: dict[str, Callable[[Any], bool]] = {
    "kubernetes": lambda spec: spec.kubernetes is not None,
    "flox-shim": lambda spec: spec.kubernetes is not None,
    "admin": lambda spec: spec.admin is not None,
    "slurm": lambda spec: True,  # every target names a login endpoint with Slurm behind it
    "directory": lambda spec: spec.directory is not None,
    "accounting": lambda spec: spec.accounting is not None,
    "rest": lambda spec: spec.rest is not None,
}


def require(target: Any, capability: str) -> None:
    """SKIP, naming the missing capability, when the target does not have it at all; FAIL, with the error, when
    the target file declares it (a kubeconfig, an admin login, a login endpoint) but it does not answer."""
    why = target.why_missing(capability)
    if not why:
        return
    declared = DECLARED_BY.get(capability)
    if declared is not None and declared(target.spec):
        pytest.fail(
            f"requirement not met: declared capability {capability} answers\n"
            f"target {target.spec.name!r} declares {capability}, but: {why}",
            pytrace=False,
        )
    pytest.skip(f"missing capability {capability}: {why}")
