"""Is the mirror's suite current? Its Release file's ``Valid-Until``, read before the node image is built.

Why: a mirror can be a snapshot (a copy frozen at a date). Debian signs each suite's Release file with a
``Valid-Until`` date (sid and experimental: a week after ``Date``; stable suites carry none), and apt refuses a
Release file past it (``E: Release file for ... is expired``), so an image build from such a mirror stopped
half a second in, naming neither the mirror nor a way out. Measured on this host's mirror: sid's InRelease is
``Date: Fri, 30 Oct 2026``, ``Valid-Until: Fri, 06 Nov 2026``; trixie's has no Valid-Until.

Contract: an expired Release file stops ``up`` before anything starts, in one line naming the suite, the mirror,
the date and the setting that accepts it (LOCAL_ACCEPT_EXPIRED_RELEASE: flag, env, ini key like every setting).
With the setting, the image is built with ``[check-valid-until=no]`` on its source lines, and the image record
says the Release file was accepted expired (:meth:`ReleaseCheck.record`). A Release file that is not expired
changes nothing: the sources and the recipe key stay as they were.
"""

from __future__ import annotations

import datetime as dt
import urllib.error
import urllib.request
from dataclasses import dataclass
from email.utils import parsedate_to_datetime

from ...model.settings import SettingsError

#: The setting that accepts an expired Release file, in each of its spellings (settings.py's rules).
SETTING_KEY = "LOCAL_ACCEPT_EXPIRED_RELEASE"
SETTING_SPELLINGS = (
    "--slurmflox-local-accept-expired-release=1",
    "env SLURMFLOX_LOCAL_ACCEPT_EXPIRED_RELEASE=1",
    "ini slurmflox_local_accept_expired_release = 1",
)


def valid_until(release_text: str) -> dt.datetime | None:
    """The ``Valid-Until`` of a Release or InRelease file (aware, UTC), or None when it has none (a stable
    suite) or the field cannot be read as an RFC 2822 date (apt then does not judge it either)."""
    for line in release_text.splitlines():
        if line.startswith("-----BEGIN PGP SIGNATURE"):
            break
        name, sep, value = line.partition(":")
        if sep and name == "Valid-Until":
            try:
                when = parsedate_to_datetime(value.strip())
            except (TypeError, ValueError):
                return None
            return when if when.tzinfo else when.replace(tzinfo=dt.timezone.utc)
    return None


@dataclass(frozen=True)
class ReleaseCheck:
    """What the mirror's Release file for one suite says, judged at ``now``."""

    suite: str
    mirror: str
    valid_until: dt.datetime | None
    now: dt.datetime

    @property
    def expired(self) -> bool:
        return self.valid_until is not None and self.valid_until < self.now

    def refusal(self) -> str:
        """The one line an ``up`` stops with when the Release file is expired and not accepted."""
        assert self.valid_until is not None
        days = (self.now - self.valid_until).days
        return (
            f"the {self.suite} Release file of mirror {self.mirror} expired on "
            f"{self.valid_until:%Y-%m-%d %H:%M} UTC ({days} days ago; the mirror is a snapshot?), and apt refuses "
            f"it; nothing was started. To build from it on purpose, accept it with {SETTING_KEY} "
            f"({'; '.join(SETTING_SPELLINGS)})"
        )

    def record(self, accepted: bool) -> dict[str, object]:
        """The image record's ``release`` entry: the date apt judged, and whether it was accepted expired."""
        return {
            "valid_until": self.valid_until.isoformat() if self.valid_until else None,
            "expired_accepted": bool(accepted and self.expired),
        }


def fetch_release(mirror: str, suite: str, timeout: float = 30.0) -> str:
    """The suite's InRelease (or Release) from ``mirror`` (http(s) or file URL). Raises OSError when neither
    can be read: the build would fail on the same mirror, and the caller names it."""
    last: Exception | None = None
    for name in ("InRelease", "Release"):
        url = f"{mirror.rstrip('/')}/dists/{suite}/{name}"
        try:
            with urllib.request.urlopen(url, timeout=timeout) as response:
                return response.read().decode("utf-8", errors="replace")
        except (urllib.error.URLError, OSError) as exc:
            last = exc
    raise OSError(f"cannot read the {suite} Release file from {mirror}: {last}")


def check_release(mirror: str, suite: str, now: dt.datetime | None = None) -> ReleaseCheck:
    """Read and judge the suite's Release file on ``mirror`` (network: the host's Debian mirror only)."""
    when = now or dt.datetime.now(dt.timezone.utc)
    return ReleaseCheck(suite, mirror, valid_until(fetch_release(mirror, suite)), when)


def judged(mirror: str, suite: str, *, accept_expired: bool, cached: bool) -> dict[str, object] | None:
    """The image record's ``release`` entry for a build of ``suite`` from ``mirror``; None when the image is
    cached (no build, the mirror is not asked) or the Release file cannot be read (the build names that).
    Raises SettingsError (``LOCAL_SUITE='sid' is refused: ...`` :meth:`ReleaseCheck.refusal`) for an expired
    Release file not accepted."""
    if cached:
        return None
    try:
        check = check_release(mirror, suite)
    except OSError:
        return None
    if check.expired and not accept_expired:
        raise SettingsError("LOCAL_SUITE", suite, check.refusal())
    return check.record(accept_expired)
