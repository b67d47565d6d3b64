"""A test-only pytest plugin (``-p upfault``): makes ``--slurmflox-up`` fail at one stage, after it did its work.

``SLURMFLOX_TEST_FAIL_AT=<module>:<Class.method or function>`` names the stage; ``SLURMFLOX_TEST_FAIL_WITH`` is
``unavailable`` (the substrate's own refusal) or ``bug`` (any other exception: the path that once ended in an
INTERNALERROR traceback). Production code carries no fault hook; this wraps the real method from outside.
"""

from __future__ import annotations

import functools
import importlib
import os
from typing import Any


def _fault(message: str) -> Exception:
    if os.environ.get("SLURMFLOX_TEST_FAIL_WITH") == "unavailable":
        from pytest_slurmflox.substrates import SubstrateUnavailable

        return SubstrateUnavailable(message)
    return OSError(message)


def pytest_configure(config: Any) -> None:
    where = os.environ.get("SLURMFLOX_TEST_FAIL_AT")
    if not where:
        return
    module_name, _, qualname = where.partition(":")
    owner: Any = importlib.import_module(module_name)
    *path, name = qualname.split(".")
    for part in path:
        owner = getattr(owner, part)
    real = getattr(owner, name)

    @functools.wraps(real)
    def failing(*args: Any, **kwargs: Any) -> Any:
        real(*args, **kwargs)
        raise _fault(f"injected failure after {qualname}")

    setattr(owner, name, failing)
