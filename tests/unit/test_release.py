"""A mirror snapshot, on purpose (substrates/local/release.py): an expired Release file is refused in one line
naming the suite, the mirror and the setting that accepts it; accepted, the image record says so.

The Release texts are the header fields of this host's mirror as measured (sid: ``Date: Fri, 30 Oct 2026``,
``Valid-Until: Fri, 06 Nov 2026``, refused by apt a month later; trixie: no Valid-Until), served from a file
mirror in a temp directory, the way apt reads a ``file:`` source.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest

from pytest_slurmflox.model.settings import KEYS_BY_NAME, SettingsError, resolve
from pytest_slurmflox.substrates.local import release

SID_INRELEASE = """-----BEGIN PGP SIGNED MESSAGE-----
Hash: SHA256

Origin: Debian
Label: Debian
Suite: unstable
Codename: sid
Changelogs: https://metadata.ftp-master.debian.org/changelogs/@CHANGEPATH@_changelog
Date: Fri, 30 Oct 2026 08:08:01 UTC
Valid-Until: Fri, 06 Nov 2026 08:08:01 UTC
Acquire-By-Hash: yes
Architectures: all amd64 arm64 armel armhf i386 ppc64el riscv64 s390x
Components: main contrib non-free-firmware non-free
-----BEGIN PGP SIGNATURE-----

Valid-Until: Fri, 06 Nov 2099 08:08:01 UTC
-----END PGP SIGNATURE-----
"""
TRIXIE_RELEASE = "Origin: Debian\nSuite: stable\nCodename: trixie\nDate: Sat, 21 Nov 2026 09:15:44 UTC\n"
NOW = dt.datetime(2026, 12, 6, 4, 30, tzinfo=dt.timezone.utc)


def _mirror(root: Path) -> str:
    for suite, text, name in (("sid", SID_INRELEASE, "InRelease"), ("trixie", TRIXIE_RELEASE, "Release")):
        (root / "dists" / suite).mkdir(parents=True)
        (root / "dists" / suite / name).write_text(text)
    return root.as_uri()


def test_valid_until_is_read_from_the_signed_part_only_and_a_stable_suite_has_none():
    assert release.valid_until(SID_INRELEASE) == dt.datetime(2026, 11, 6, 8, 8, 1, tzinfo=dt.timezone.utc)
    assert release.valid_until(TRIXIE_RELEASE) is None
    assert release.valid_until("Valid-Until: not a date\n") is None


def test_an_expired_release_is_refused_in_one_line_naming_suite_mirror_and_setting():
    check = release.ReleaseCheck("sid", "http://deb.debian.org/debian", release.valid_until(SID_INRELEASE), NOW)
    assert check.expired
    line = check.refusal()
    assert "\n" not in line
    for needle in (
        "sid Release file",
        "mirror http://deb.debian.org/debian",
        "expired on 2026-11-06 08:08 UTC (29 days ago",
        "nothing was started",
        "--slurmflox-local-accept-expired-release=1",
        "SLURMFLOX_LOCAL_ACCEPT_EXPIRED_RELEASE=1",
        "slurmflox_local_accept_expired_release = 1",
    ):
        assert needle in line, (needle, line)
    fresh = release.ReleaseCheck("sid", "m", release.valid_until(SID_INRELEASE), NOW.replace(month=11, day=1))
    assert not fresh.expired and not release.ReleaseCheck("trixie", "m", None, NOW).expired


def test_judged_refuses_accepts_and_records(tmp_path):
    mirror = _mirror(tmp_path)
    refused = r"^LOCAL_SUITE='sid' is refused: the sid Release file of mirror file://.* expired on 2026-11-06"
    with pytest.raises(SettingsError, match=refused):
        release.judged(mirror, "sid", accept_expired=False, cached=False)
    accepted = release.judged(mirror, "sid", accept_expired=True, cached=False)
    assert accepted == {"valid_until": "2026-11-06T08:08:01+00:00", "expired_accepted": True}
    # a current suite is recorded as such, the setting or not; a cached image asks no mirror
    assert release.judged(mirror, "trixie", accept_expired=True, cached=False) == {
        "valid_until": None,
        "expired_accepted": False,
    }
    assert release.judged(mirror, "sid", accept_expired=False, cached=True) is None
    # an unreadable Release file is the build's to name (it fails on the same mirror)
    assert release.judged(mirror, "bookworm", accept_expired=False, cached=False) is None


def test_the_setting_is_a_flag_an_env_var_and_an_ini_key_spelled_as_the_refusal_says(tmp_path):
    spec = KEYS_BY_NAME[release.SETTING_KEY]
    flag, env, ini = release.SETTING_SPELLINGS
    assert flag == f"{spec.flag}=1" and env == f"env {spec.env}=1" and ini == f"ini {spec.ini} = 1"
    workdir = {"WORKDIR": str(tmp_path)}
    assert resolve(cli=workdir, substrate="local").settings.local_accept_expired_release is False
    for sources in (
        {"cli": {**workdir, spec.key: "1"}},
        {"cli": workdir, "env": {spec.env: "yes"}},
        {"cli": workdir, "config": {spec.key: "true"}},
    ):
        assert resolve(**sources, substrate="local").settings.local_accept_expired_release is True, sources
