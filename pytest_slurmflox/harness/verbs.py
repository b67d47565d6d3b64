"""The verbs that operate a recorded deployment and exit without running tests: status, down, destroy and
strip-secrets, one function each. They run before ``pytest_configure`` (like ``--help``): no stash, plain stdout.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import pytest

from ..model.settings import Settings, SettingsError, SubstrateOptions
from ..model.workdir import Workdir
from .options import get_option, resolve_settings, workdir_of

VERBS = ("slurmflox_status", "slurmflox_down", "slurmflox_destroy", "slurmflox_strip_secrets")


@dataclass(frozen=True)
class VerbContext:
    """What every verb needs: the work dir, the substrate recorded there, settings resolved once, output."""

    workdir: Workdir
    substrate_name: str
    settings: Settings
    options: SubstrateOptions
    say: Callable[[str], None]

    def substrate(self) -> object:
        from ..substrates import make_substrate

        return make_substrate(self.substrate_name, self.settings, self.workdir, self.say, self.options)


def _recorded(ctx: VerbContext) -> bool:
    """Whether a deployment is recorded in the work dir (saying so when none is)."""
    if ctx.workdir.read_deployment() is None:
        ctx.say(f"no deployment is recorded in {ctx.workdir.root}")
        return False
    return True


def status(ctx: VerbContext) -> int:
    if not _recorded(ctx):
        return pytest.ExitCode.OK
    print(ctx.substrate().status(), flush=True)  # type: ignore[attr-defined]
    return pytest.ExitCode.OK


def down(ctx: VerbContext) -> int:
    if not _recorded(ctx):
        return pytest.ExitCode.USAGE_ERROR
    ctx.substrate().down()  # type: ignore[attr-defined]
    ctx.say("down: stopped; state kept")
    return pytest.ExitCode.OK


def destroy(ctx: VerbContext) -> int:
    if not _recorded(ctx):
        return pytest.ExitCode.USAGE_ERROR
    ctx.substrate().destroy()  # type: ignore[attr-defined]
    ctx.workdir.forget_deployment()
    ctx.say("destroy: nodes and state removed; caches kept")
    return pytest.ExitCode.OK


def strip_secrets(ctx: VerbContext) -> int:
    """Refused while the deployment runs; a substrate may hold more secrets than the work dir's well-known ones."""
    removed: list[object] = []
    if ctx.workdir.read_deployment() is not None:
        substrate = ctx.substrate()
        if "running" in substrate.status().lower().split():  # type: ignore[attr-defined]
            ctx.say("error: the deployment is running; run --slurmflox-down first")
            return pytest.ExitCode.USAGE_ERROR
        own = getattr(substrate, "strip_secrets", None)
        removed += own() if own else []
    removed += ctx.workdir.strip_secrets()
    ctx.say(f"strip-secrets: removed {len(removed)} path(s): " + ", ".join(str(p) for p in removed))
    return pytest.ExitCode.OK


VERB_FUNCTIONS: dict[str, Callable[[VerbContext], int]] = {
    "slurmflox_status": status,
    "slurmflox_down": down,
    "slurmflox_destroy": destroy,
    "slurmflox_strip_secrets": strip_secrets,
}


def requested_verbs(config: pytest.Config) -> list[str]:
    return [verb for verb in VERBS if get_option(config, verb)]


def run_verbs(config: pytest.Config, verbs: list[str], options: SubstrateOptions) -> int:
    """Run ``verbs`` in table order; the first that fails ends the run with its exit status."""
    from ..substrates import SubstrateUnavailable

    started = time.monotonic()

    def say(message: str) -> None:
        print(f"[slurmflox {time.monotonic() - started:7.1f}s] {message}", flush=True)

    workdir = workdir_of(config)
    record = workdir.read_deployment()
    substrate_name = (record or {}).get("substrate") or get_option(config, "slurmflox_up") or "local"
    try:
        resolved = resolve_settings(config, workdir, substrate_name)
    except SettingsError as exc:
        say(f"error: {exc}")
        return pytest.ExitCode.USAGE_ERROR
    ctx = VerbContext(workdir, substrate_name, resolved.settings, options, say)
    for verb in verbs:
        try:
            status_code = VERB_FUNCTIONS[verb](ctx)
        except SubstrateUnavailable as exc:
            say(f"error: {exc}")
            return pytest.ExitCode.USAGE_ERROR
        if status_code != pytest.ExitCode.OK:
            return status_code
    return pytest.ExitCode.OK
