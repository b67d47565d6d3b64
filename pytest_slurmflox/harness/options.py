"""The option table and its one precedence.

Every option is a CLI flag, an environment variable (``SLURMFLOX_*``, never a bare name) and an ini key, with one
precedence: CLI flag > environment variable > ini key > default. Runtime *settings* (WORKER_*, NODES, ...; in the
environment SLURMFLOX_WORKER_*, SLURMFLOX_NODES, ...) follow the same
order with one more layer, the persisted ``worker-revision.env`` between environment and ini (see settings.py);
:func:`resolve_settings` applies it once per invocation and the result travels down from there.

What the plugin knows during a run is the session state (:mod:`~pytest_slurmflox.reporting.sessionstate`), not this
table.
"""

from __future__ import annotations

import os
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from ..cluster.submit import is_run_id
from ..model.groups import DESTRUCTIVE_GROUPS
from ..model.quarantine import DEFAULT_SHARE
from ..model.settings import KEYS, KEYS_BY_NAME, Resolved, SubstrateOptions, resolve
from ..model.workdir import Workdir, WorkerRevisionFile
from ..reporting.signing import Signer

SUBSTRATE_CHOICES = ("local", "qemu")


@dataclass(frozen=True)
class Option:
    """One plugin option: its flag (without the leading dashes), help, kind (str | bool | up) and default."""

    name: str
    help: str
    kind: str = "str"
    default: Any = None

    @property
    def dest(self) -> str:
        return self.name.replace("-", "_")

    @property
    def env(self) -> str:
        return self.dest.upper()

    @property
    def ini(self) -> str:
        return self.dest


OPTIONS: tuple[Option, ...] = (
    Option(
        "slurmflox-up",
        "provision (or converge) a substrate, then run the selected tests: local (default) or qemu",
        kind="up",
    ),
    Option("slurmflox-status", "report the recorded deployment's state and exit", kind="bool"),
    Option(
        "slurmflox-check-target",
        "the doctor: read this target file against the schema, ask its cluster what it has (read-only, nothing "
        "submitted), print per group whether it will run and why, and exit (0: a sign-off is reachable, 1: not, "
        "4: a bad file)",
    ),
    Option(
        "slurmflox-init-target",
        "write a starter target file here from what the login of --slurmflox-init-login reports (read-only, "
        "nothing submitted): the login and what the cluster reported filled in; your expectations and every other "
        "key commented with what it means; "
        "never over an existing file (exit 4), an unreachable login is one line (exit 1)",
    ),
    Option(
        "slurmflox-init-login",
        "the login --slurmflox-init-target connects to: [user@]host[:port], the host looked up in ~/.ssh/config "
        "(HostName, User, IdentityFile, ...) as a target file's login.host is",
    ),
    Option("slurmflox-down", "stop the recorded deployment, keeping its state, and exit", kind="bool"),
    Option("slurmflox-destroy", "remove the recorded deployment's nodes and state (caches kept) and exit", kind="bool"),
    Option(
        "slurmflox-strip-secrets", "remove keys, kubeconfig, seeds and disks from the work dir and exit", kind="bool"
    ),
    Option("slurmflox-target", "target file (YAML) of an existing cluster; nothing is provisioned"),
    Option("slurmflox-groups", "comma-separated acceptance groups to run, e.g. T3,T5,TP,TI"),
    Option(
        "slurmflox-destructive",
        f"allow the destructive, opt-in groups ({', '.join(sorted(DESTRUCTIVE_GROUPS))}) without naming them",
        kind="bool",
    ),
    Option(
        "slurmflox-signoff",
        "sign-off mode: the run fails unless every check of every required group PASSes "
        "(a FAIL, SKIP, NOT RUN or deselected check blocks it)",
        kind="bool",
    ),
    Option(
        "slurmflox-sign",
        "sign the run's sign-off: an SSH private key file, or agent: for the ssh-agent's first key; the run's folder "
        "gets manifest.json (the sha256 of every file, the target file, the plugin version, the verdict line) and "
        "its ssh-keygen -Y signature manifest.json.sig (namespace slurmflox-signoff)",
    ),
    Option(
        "slurmflox-verify",
        "verify a signed run's folder (reports/<run id>) against --slurmflox-allowed-signers and exit: says who "
        "signed which verdict and when (0), or each changed, missing or added file, or the unknown key (1)",
    ),
    Option(
        "slurmflox-allowed-signers",
        "the allowed_signers file (ssh-keygen(1): a principal and its public key per line) --slurmflox-verify trusts",
    ),
    Option("slurmflox-workloads", "directory of customer sbatch scripts to run as group TW"),
    Option("slurmflox-reports", "directory for reports/<run-id>/ (HTML, JUnit XML, evidence.json)", default="reports"),
    Option(
        "slurmflox-run-id",
        "run id used in job names and the report directory: 1-64 of A-Z a-z 0-9 . _ -, no '..' (default: generated)",
    ),
    Option("slurmflox-keep", "keep the run's files under the user's home ($HOME/slurmflox-runs/<run id>)", kind="bool"),
    Option(
        "slurmflox-busy-timeout",
        "seconds a step that needs every worker waits for workers other users' jobs hold, then NOT RUN naming them "
        "(default: the target file's slurm.busy_timeout, else 600)",
    ),
    Option(
        "slurmflox-outlier-throughput",
        "group TB: a worker (or pair) below this share of the median of the other workers' (pairs') throughput is "
        "an outlier, whether or not the target declares a reference",
        default="0.7",
    ),
    Option(
        "slurmflox-outlier-latency",
        "group TB: a worker (or pair) above this multiple of the median of the other workers' (pairs') latency is "
        "an outlier, whether or not the target declares a reference",
        default="1.5",
    ),
    Option(
        "slurmflox-compare",
        "group TB: an earlier run's evidence.json (or its report directory); each metric is shown against it, and "
        "one that regressed beyond a saved baseline's first band (half a throughput, twice a latency) is said as FAIL",
    ),
    Option(
        "slurmflox-save-baseline",
        "group TB: write this run's metrics to this file as a target file's expect.performance block (a file that "
        "exists is left as it is)",
    ),
    Option(
        "slurmflox-quarantine",
        "at the run's end, drain (Slurm DRAIN, reason 'slurmflox <run id>: <group> <check>: ...') each worker a FAIL "
        "of a per-worker requirement named, through the target's admin endpoint; never more than "
        "--slurmflox-quarantine-share of the cohort (then nothing is drained, and the run says why)",
        kind="bool",
    ),
    Option(
        "slurmflox-quarantine-share",
        "the share of the cohort one run may quarantine, in (0, 1]: rounded down, at least one worker, never all",
        default=str(DEFAULT_SHARE),
    ),
    Option(
        "slurmflox-retest",
        "re-test these workers (worker2,worker7) or every worker this tool drained (quarantined) in a reservation of "
        "the run's own; each resumes only when every check PASSes on it, one drained by someone else never",
    ),
    Option(
        "slurmflox-workers",
        "pytest-xdist workers of an acceptance run without -n: auto (2 when pytest-xdist is installed) or a number; "
        "0 runs the checks one after another",
        default="auto",
    ),
    # substrate knobs: how this host runs a substrate, not what the cluster is (so not settings)
    Option(
        "slurmflox-qemu-image", "qemu substrate: a local base image (with optional .boot.json) instead of BASE_IMAGE"
    ),
    Option("slurmflox-qemu-accel", "qemu substrate: accelerator auto (KVM, else TCG), kvm or tcg", default="auto"),
    Option(
        "slurmflox-qemu-restrict", "qemu substrate: isolate guests (only the port forwards reach them)", kind="bool"
    ),
    Option("slurmflox-local-cache", "local substrate: node image cache directory (default /var/cache/slurmflox)"),
    Option(
        "slurmflox-local-site-noise",
        "local substrate: add a site's noise (a TaskProlog that prints, Prolog/Epilog, login banner, echoing .bashrc)",
        kind="bool",
    ),
)
OPTIONS_BY_DEST = {option.dest: option for option in OPTIONS}


def truthy(value: str) -> bool:
    return value.strip().lower() in ("1", "true", "yes", "on")


def _from_text(option: Option, text: str) -> Any:
    if option.kind == "bool":
        return truthy(text)
    if option.kind == "up":  # a substrate, or a switch (1/0): anything else is kept for checked_up to refuse
        off = text.strip().lower() in ("", "0", "false", "no", "off")
        return text if text in SUBSTRATE_CHOICES else ("local" if truthy(text) else None if off else text)
    return text


def get_option(config: pytest.Config, dest: str) -> Any:
    """CLI > env > ini > default for one plugin option."""
    option = OPTIONS_BY_DEST[dest]
    cli = config.getoption(dest)
    if cli not in (None, False):
        return cli
    env = os.environ.get(option.env)
    if env not in (None, ""):
        return _from_text(option, str(env))
    ini = config.getini(option.ini)
    if ini not in (None, ""):
        return _from_text(option, str(ini))
    return option.default if option.kind != "bool" else False


class EarlyOptions:
    """The two readers :func:`get_option` uses, before pytest has parsed options into ``config.option``: the
    command line as known so far, and the ini file."""

    def __init__(self, config: pytest.Config) -> None:
        self.namespace = config.known_args_namespace
        self.getini = config.getini
        self.rootpath = config.rootpath
        self.option = self.namespace

    def getoption(self, dest: str) -> Any:
        return getattr(self.namespace, dest, None)


def add_options(parser: pytest.Parser) -> None:
    """Register every option and every setting as flag + ini key (the env var is named in the help)."""
    group = parser.getgroup("slurmflox", "slurmflox: provision and sign off Slurm-on-Kubernetes with Flox")
    for option in OPTIONS:
        text = f"{option.help} [env {option.env}, ini {option.ini}]"
        if option.kind == "bool":
            group.addoption(f"--{option.name}", action="store_true", default=None, dest=option.dest, help=text)
        elif option.kind == "up":
            group.addoption(
                f"--{option.name}",
                nargs="?",
                const="local",
                default=None,
                dest=option.dest,
                metavar="SUBSTRATE",
                help=text,
            )
        else:
            group.addoption(f"--{option.name}", default=None, dest=option.dest, help=text)
        parser.addini(option.ini, option.help, type="string", default=None)
    for spec in KEYS:
        group.addoption(
            spec.flag,
            default=None,
            dest=spec.dest,
            metavar=spec.key,
            help=f"setting {spec.key}: {spec.help} (default {spec.default!r}) [env {spec.env}, ini {spec.ini}]",
        )
        parser.addini(spec.ini, f"setting {spec.key}: {spec.help}", type="string", default=None)


# ------------------------------------------------------------------------------------------------ run id
def checked_run_id(value: str, source: str = "--slurmflox-run-id") -> str:
    """``value`` if it is a safe run id, else a one-line :class:`pytest.UsageError` (pytest exits 4, before
    anything ran on the host or on any node)."""
    if not is_run_id(value):  # the rule lives with the paths and job names it protects (submit.py)
        raise pytest.UsageError(
            f"{source} {value!r}: a run id is 1-64 of A-Z a-z 0-9 . _ - (starting with a letter or digit, "
            "no '..'); nothing was run"
        )
    return value


def checked_up(config: pytest.Config) -> None:
    """``--slurmflox-up`` (CLI > env > ini) names a substrate, or a one-line :class:`pytest.UsageError` (exit 4,
    as the run id's) lists the choices."""
    value = get_option(config, "slurmflox_up")
    if value and value not in SUBSTRATE_CHOICES:
        choices = " or ".join(SUBSTRATE_CHOICES)
        raise pytest.UsageError(f"--slurmflox-up {value!r}: not a substrate (choose {choices}); nothing was run")


def checked_workloads(config: pytest.Config) -> None:
    """``--slurmflox-workloads`` (CLI > env > ini), when given, is a corpus of customer scripts that loads, or a
    one-line :class:`pytest.UsageError` says what is wrong with it (nothing was run)."""
    from ..judges.workloads import WorkloadError, load_corpus

    workloads = get_option(config, "slurmflox_workloads")
    if workloads:
        try:
            load_corpus(Path(workloads).expanduser())
        except WorkloadError as exc:
            raise pytest.UsageError(f"--slurmflox-workloads: {exc} (nothing was run)") from None


def checked_busy_timeout(config: pytest.Config) -> None:
    """``--slurmflox-busy-timeout`` (CLI > env > ini), when given, is a number of seconds, or a one-line
    :class:`pytest.UsageError` (nothing was run)."""
    from ..model.busy import resolve_busy_timeout

    try:
        resolve_busy_timeout(get_option(config, "slurmflox_busy_timeout"), None)
    except ValueError as exc:
        raise pytest.UsageError(f"{exc} (nothing was run)") from None


def checked_quarantine_share(config: pytest.Config) -> None:
    """``--slurmflox-quarantine-share`` (CLI > env > ini > 0.25) is a share in (0, 1], or a one-line
    :class:`pytest.UsageError` (nothing was run)."""
    from ..model.quarantine import parse_share

    try:
        parse_share(str(get_option(config, "slurmflox_quarantine_share")))
    except ValueError as exc:
        raise pytest.UsageError(f"--slurmflox-quarantine-share: {exc} (nothing was run)") from None


def checked_signer(config: pytest.Config) -> Signer | None:
    """The key ``--slurmflox-sign`` names (CLI > env > ini), resolved before anything runs; a key that cannot sign
    is a one-line :class:`pytest.UsageError` (nothing was run)."""
    from ..reporting.signing import SigningError, resolve_signer

    spec = get_option(config, "slurmflox_sign")
    try:
        return resolve_signer(str(spec)) if spec else None
    except SigningError as exc:
        raise pytest.UsageError(f"slurmflox: {exc} (nothing was run)") from None


def outlier_ratios(config: pytest.Config) -> tuple[float, float]:
    """``--slurmflox-outlier-throughput`` and ``--slurmflox-outlier-latency`` (CLI > env > ini > 0.7, 1.5): the
    first a share in (0, 1], the second a multiple >= 1; anything else is a one-line :class:`pytest.UsageError`."""
    got = []
    for dest, low, high in (("slurmflox_outlier_throughput", 0.0, 1.0), ("slurmflox_outlier_latency", 1.0, None)):
        text = str(get_option(config, dest))
        try:
            value = float(text)
        except ValueError:
            value = float("nan")
        if not (value > low if high else value >= low) or (high is not None and value > high):
            flag = OPTIONS_BY_DEST[dest].name
            raise pytest.UsageError(f"--{flag}: {text!r} is not a ratio in range (nothing was run)")
        got.append(value)
    return got[0], got[1]


def run_id_of(config: pytest.Config) -> str:
    """The run id of this process: the controller's (an xdist worker, checked again: workerinput is data from
    another process), else the option (CLI > env > ini), else a fresh one."""
    worker_input = getattr(config, "workerinput", None) or {}
    if worker_input.get("slurmflox_run_id"):
        return checked_run_id(str(worker_input["slurmflox_run_id"]), "run id from the xdist controller")
    given = get_option(config, "slurmflox_run_id")
    if given:
        return checked_run_id(str(given))
    return time.strftime("%Y%m%d-%H%M%S") + "-" + uuid.uuid4().hex[:6]


# ------------------------------------------------------------------------------------------------ settings
def raw_settings(config: pytest.Config) -> tuple[dict[str, str | None], dict[str, str | None]]:
    """(cli, ini) raw setting values; None where a source does not give the key."""
    cli = {spec.key: config.getoption(spec.dest) for spec in KEYS}
    ini = {spec.key: config.getini(spec.ini) for spec in KEYS}
    return cli, ini


def workdir_of(config: pytest.Config) -> Workdir:
    """WORKDIR resolved ahead of the rest (the persisted settings live inside it), made absolute against the
    invocation directory (environment: ``SLURMFLOX_WORKDIR``)."""
    cli, ini = raw_settings(config)
    spec = KEYS_BY_NAME["WORKDIR"]
    raw = cli["WORKDIR"] or os.environ.get(spec.env) or ini["WORKDIR"] or spec.default
    path = Path(raw).expanduser()
    if not path.is_absolute():
        path = Path(config.invocation_params.dir) / path
    return Workdir(path.resolve())


def resolve_settings(config: pytest.Config, workdir: Workdir, substrate: str | None) -> Resolved:
    """The one resolution of settings in an invocation (CLI > env > persisted > ini > defaults), with WORKDIR
    the absolute work dir. Raises :class:`~pytest_slurmflox.model.settings.SettingsError`."""
    cli, ini = raw_settings(config)
    cli["WORKDIR"] = str(workdir.root)
    persisted = WorkerRevisionFile(workdir.worker_revision_env).read()
    return resolve(cli=cli, env=os.environ, persisted=persisted, config=ini, substrate=substrate)


def substrate_options(config: pytest.Config) -> SubstrateOptions:
    """The option table's substrate rows, resolved once for :func:`~pytest_slurmflox.substrates.make_substrate`."""
    image = get_option(config, "slurmflox_qemu_image")
    cache = get_option(config, "slurmflox_local_cache")
    return SubstrateOptions(
        qemu_image=Path(image).expanduser() if image else None,
        qemu_accel=str(get_option(config, "slurmflox_qemu_accel")),
        qemu_restrict=bool(get_option(config, "slurmflox_qemu_restrict")),
        local_cache=Path(cache).expanduser() if cache else None,
        local_site_noise=bool(get_option(config, "slurmflox_local_site_noise")),
    )
