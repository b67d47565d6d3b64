"""A failed ``--slurmflox-up`` ends with one line: what failed, what to do, where the detail is.

A newcomer's first command once ended in a 40-line INTERNALERROR traceback (a host program was missing) and left
daemons running with no word about them. Now the whole detail (message and traceback) goes to
``<workdir>/up-error.log``, and the line names it and the verb that removes what the partial ``up`` started
(``deploy.up`` records the deployment before anything starts, so ``--slurmflox-destroy`` finds it).
"""

from __future__ import annotations

import re
import time
import traceback

from ..model.secrets import Redactor
from ..model.workdir import Workdir, atomic_write

#: What a message says -> what the user can do about it (the first match wins).
HINTS: tuple[tuple[str, str], ...] = (
    (
        r"exit 127|not found|No such file or directory: '(?P<prog>[^']+)'",
        "a host program is missing: rerun `up` (the substrate installs what it needs) or install it with apt-get",
    ),
    (r"needs root", "run as root"),
    (r"dpkg lock|Could not get lock", "another apt run holds the dpkg lock: wait for it and rerun"),
    (r"port .* (in use|taken)|Address already in use", "choose a free port (--slurmflox-login-ssh-port)"),
)


def hint_for(message: str) -> str | None:
    for pattern, hint in HINTS:
        if re.search(pattern, message):
            return hint
    return None


def failed_up_line(exc: BaseException, workdir: Workdir, *, expected: bool) -> str:
    """The one line a failed ``up`` ends with; writes the detail (redacted) to ``<workdir>/up-error.log``."""
    message = str(exc).strip() or type(exc).__name__
    redact = Redactor()
    redact.learn(workdir, None)  # the keys a partial `up` may already have made
    log = workdir.root / "up-error.log"
    detail = "".join(traceback.format_exception(exc)) if not expected else message + "\n"
    workdir.root.mkdir(parents=True, exist_ok=True)
    atomic_write(log, f"{time.strftime('%Y-%m-%d %H:%M:%S')} up failed\n{redact(detail)}")
    first = redact(message.splitlines()[0])
    if len(first) > 240:
        first = first[:237] + "..."
    kind = "" if expected else f"{type(exc).__name__}: "
    hint = hint_for(message)
    if re.search(r"\b(choose|install|run as|rerun)\b", message):  # the message already says what to do
        hint = None
    todo = f"; {hint}" if hint else ""
    return (
        f"slurmflox: up failed: {kind}{first}{todo}; detail in {log}; "
        f"`pytest --slurmflox-destroy --slurmflox-workdir={workdir.root}` removes what it started"
    )
