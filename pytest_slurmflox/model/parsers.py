"""Parsers of setting values: each turns the raw string from any source into the typed value, or raises
:class:`SettingsError` naming the key, the value and the rule (kept apart from the key table in settings.py)."""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable
from pathlib import Path

#: Containers that define the worker runtime and therefore may never skip Flox preparation.
PROTECTED_CONTAINERS = ("slurmd", "flox-task-profile-init")


class SettingsError(ValueError):
    """A setting was refused. The message names the key, the offending value and the rule."""

    def __init__(self, key: str, value: object, rule: str) -> None:
        self.key, self.value, self.rule = key, value, rule
        super().__init__(f"{key}={value!r} is refused: {rule}")


SHELL_NAME_PATTERN = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
DNS_LABEL_PATTERN = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?\Z")
FLOX_ENV_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}/[A-Za-z0-9][A-Za-z0-9_.-]{0,99}\Z")
IMAGE_PATTERN = re.compile(
    r"(?P<repo>[a-z0-9]+(?:[._-][a-z0-9]+)*(?::[0-9]{1,5})?(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)+"
    r"|[a-z0-9]+(?:[._-][a-z0-9]+)*)"
    r":(?P<tag>[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})@sha256:(?P<digest>[0-9a-f]{64})\Z"
)
SIZE_PATTERN = re.compile(r"[1-9][0-9]*[KMGT]?\Z")
USER_PATTERN = re.compile(r"[a-z_][a-z0-9_-]{0,31}\Z")


def whole(lo: int, hi: int) -> Callable[[str, str], int]:
    def parse(key: str, raw: str) -> int:
        text = raw
        if not re.fullmatch(r"[0-9]+", text):
            raise SettingsError(key, raw, f"must be a whole number between {lo} and {hi}")
        value = int(text)
        if not lo <= value <= hi:
            raise SettingsError(key, raw, f"must be between {lo} and {hi}")
        return value

    return parse


def boolean(key: str, raw: str) -> bool:
    text = raw.strip().lower()
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off"):
        return False
    raise SettingsError(key, raw, "must be 1 or 0")


def choice(*choices: str) -> Callable[[str, str], str]:
    def parse(key: str, raw: str) -> str:
        if raw not in choices:
            raise SettingsError(key, raw, f"must be one of {', '.join(choices)}")
        return raw

    return parse


def matching(pattern: re.Pattern[str], rule: str) -> Callable[[str, str], str]:
    def parse(key: str, raw: str) -> str:
        if not pattern.match(raw):
            raise SettingsError(key, raw, rule)
        return raw

    return parse


def path(key: str, raw: str) -> Path:
    if not raw or "\n" in raw or "\0" in raw:
        raise SettingsError(key, raw, "must be a non-empty path")
    return Path(raw).expanduser()


def cidr(key: str, raw: str) -> str:
    try:
        return str(ipaddress.ip_network(raw, strict=True))
    except ValueError as exc:
        raise SettingsError(key, raw, f"must be an IPv4/IPv6 network in CIDR form ({exc})") from None


def list_items(raw: str) -> list[str]:
    return [item for item in re.split(r"[,\s]+", raw.strip()) if item]


def skip_containers(key: str, raw: str) -> tuple[str, ...]:
    items = list_items(raw)
    for item in items:
        if item in PROTECTED_CONTAINERS:
            raise SettingsError(key, raw, f"{item!r} defines the worker runtime and may never skip Flox preparation")
        if not DNS_LABEL_PATTERN.match(item):
            raise SettingsError(key, raw, f"{item!r} is not a Kubernetes container name")
    return tuple(dict.fromkeys(items))


def env_exports(key: str, raw: str) -> tuple[str, ...]:
    items = list_items(raw)
    for item in items:
        if not SHELL_NAME_PATTERN.match(item):
            raise SettingsError(key, raw, f"{item!r} is not an ordinary shell variable name")
        if item == "PATH" or item.startswith(("SLURM_", "BASH_FUNC_")) or item in ("LD_PRELOAD", "IFS"):
            raise SettingsError(key, raw, f"{item!r} is managed by Slurm or the PATH policy and cannot be allow-listed")
    return tuple(dict.fromkeys(items))


def home_path(key: str, raw: str) -> str:
    if raw == "":
        return ""
    if not raw.startswith("/") or not re.fullmatch(r"/[A-Za-z0-9_./-]*", raw) or "/../" in raw + "/":
        raise SettingsError(key, raw, "must be empty (no shared home) or an absolute path")
    return raw.rstrip("/") or "/"


def one_line(key: str, raw: str) -> str:
    if "\n" in raw or "\0" in raw:
        raise SettingsError(key, raw, "must be a single line")
    return raw
