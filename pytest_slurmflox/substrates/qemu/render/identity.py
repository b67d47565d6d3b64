"""The acceptance identity for the login endpoint: the login image's own account databases with the TEST_*
user appended (test scaffolding only; rendered into a Secret by :mod:`.values`)."""

from __future__ import annotations

from dataclasses import dataclass

from ....model.settings import Settings


@dataclass(frozen=True)
class IdentityFiles:
    """Complete /etc/passwd, /etc/group and /etc/shadow for the login endpoint (test scaffolding only)."""

    passwd: str
    group: str
    shadow: str


def _merge_entries(base: str, entries: list[str], what: str, unique_fields: tuple[int, ...]) -> str:
    """Append ``entries`` to a colon-separated database, refusing a clash with a different existing entry.

    An identical entry already present is kept once, so building from an already-extended base is idempotent.
    """
    lines = [line for line in base.splitlines() if line.strip()]
    for entry in entries:
        if entry in lines:
            continue
        fields = entry.split(":")
        for other in lines:
            other_fields = other.split(":")
            for index in unique_fields:
                if index < len(other_fields) and other_fields[index] == fields[index]:
                    raise ValueError(
                        f"{what}: the test identity entry {entry!r} clashes with the existing entry {other!r}"
                    )
        lines.append(entry)
    return "\n".join(lines) + "\n"


def test_identity_files(settings: Settings, base_passwd: str, base_group: str, base_shadow: str) -> IdentityFiles:
    """The login image's own account databases with the TEST_* user and its supplementary group appended.

    The account has no password (``*``): the acceptance suite logs in with the cluster SSH key. Its home lies on
    the shared home (WORKER_HOME_PATH, or /home when there is none) so a job's files are visible on the workers.
    """
    s = settings
    home_root = s.worker_home_path.rstrip("/") or "/home"
    passwd = _merge_entries(
        base_passwd,
        [f"{s.test_user}:x:{s.test_uid}:{s.test_gid}:slurmflox acceptance user:{home_root}/{s.test_user}:/bin/bash"],
        "passwd",
        (0, 2),
    )
    group = _merge_entries(
        base_group,
        [f"{s.test_user}:x:{s.test_gid}:", f"{s.test_supp_group}:x:{s.test_supp_gid}:{s.test_user}"],
        "group",
        (0, 2),
    )
    shadow = _merge_entries(base_shadow, [f"{s.test_user}:*::0:99999:7:::"], "shadow", (0,))
    return IdentityFiles(passwd=passwd, group=group, shadow=shadow)


test_identity_files.__test__ = False  # type: ignore[attr-defined]  # not a pytest test despite its name
