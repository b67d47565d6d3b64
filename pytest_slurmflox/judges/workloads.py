"""Workload corpus: a customer's own sbatch scripts, each with optional expectations, as acceptance checks (TW).

The reference names running the customer's real scripts as the acceptance criterion that matters most, so a
directory of scripts is turned into one check per script. Each script may have a sidecar ``<script>.yaml``::

    exit_code: 0            # expected exit status of the batch script (default 0)
    output_pattern: "^ok$"  # regular expression that must match somewhere in the job output (multi-line)
    nodes: 2                # the job must have been allocated exactly this many nodes
    time_bound: 300         # seconds from submission to the job's end; longer is a failure

A script is any regular file in the directory whose first line is a shebang or that carries an ``#SBATCH``
directive; sidecars, hidden files and anything else are ignored. The corpus is validated up front, so a typo in a
sidecar is a usage error before anything is submitted, not a failed check.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import yaml

#: Sidecar keys and what they mean (shown in errors).
SIDECAR_KEYS = {
    "exit_code": "expected exit status of the script (integer 0-255, default 0)",
    "output_pattern": "regular expression that must match the job output",
    "nodes": "exact number of nodes the job must be allocated",
    "time_bound": "seconds from submission to the end of the job",
}
#: How long a workload without a time bound may take before the check gives up.
DEFAULT_WAIT = 600.0


class WorkloadError(ValueError):
    """The workload directory or one of its sidecars is unusable; the message names the file and key."""


@dataclass(frozen=True)
class Workload:
    """One customer script and what it is expected to do."""

    path: Path
    exit_code: int = 0
    output_pattern: str | None = None
    nodes: int | None = None
    time_bound: float | None = None

    @property
    def id(self) -> str:
        return self.path.name

    @property
    def script(self) -> str:
        return self.path.read_text()

    @property
    def wait_timeout(self) -> float:
        """How long to wait for the job: its bound plus scheduling slack, or the default."""
        return self.time_bound + 30.0 if self.time_bound is not None else DEFAULT_WAIT

    def expectations(self) -> str:
        parts = [f"exit code {self.exit_code}"]
        if self.output_pattern is not None:
            parts.append(f"output matches /{self.output_pattern}/")
        if self.nodes is not None:
            parts.append(f"{self.nodes} node(s)")
        if self.time_bound is not None:
            parts.append(f"done within {self.time_bound:g}s")
        return ", ".join(parts)


def _is_script(path: Path) -> bool:
    if not path.is_file() or path.name.startswith(".") or path.suffix in (".yaml", ".yml"):
        return False
    try:
        head = path.read_bytes()[:4096].decode(errors="replace")
    except OSError:
        return False
    return head.startswith("#!") or "#SBATCH" in head


def _int(value: object, where: str, lo: int, hi: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise WorkloadError(f"{where} must be an integer {lo}-{hi}, got {value!r}")
    return value


def parse_sidecar(path: Path) -> dict[str, object]:
    """Read and validate one sidecar; unknown keys and wrong types are errors naming file and key."""
    try:
        doc = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        raise WorkloadError(f"{path}: not valid YAML: {exc}") from None
    if doc is None:
        return {}
    if not isinstance(doc, dict):
        raise WorkloadError(f"{path}: must be a mapping of {', '.join(SIDECAR_KEYS)}")
    unknown = sorted(set(map(str, doc)) - set(SIDECAR_KEYS))
    if unknown:
        raise WorkloadError(f"{path}: unknown key {unknown[0]!r}; known: {', '.join(SIDECAR_KEYS)}")
    out: dict[str, object] = {}
    if "exit_code" in doc:
        out["exit_code"] = _int(doc["exit_code"], f"{path}: exit_code", 0, 255)
    if "output_pattern" in doc:
        pattern = doc["output_pattern"]
        if not isinstance(pattern, str):
            raise WorkloadError(f"{path}: output_pattern must be a string")
        try:
            re.compile(pattern)
        except re.error as exc:
            raise WorkloadError(f"{path}: output_pattern is not a valid regular expression: {exc}") from None
        out["output_pattern"] = pattern
    if "nodes" in doc:
        out["nodes"] = _int(doc["nodes"], f"{path}: nodes", 1, 100000)
    if "time_bound" in doc:
        bound = doc["time_bound"]
        if isinstance(bound, bool) or not isinstance(bound, (int, float)) or bound <= 0:
            raise WorkloadError(f"{path}: time_bound must be a positive number of seconds, got {bound!r}")
        out["time_bound"] = float(bound)
    return out


def load_corpus(directory: Path) -> list[Workload]:
    """Every script in ``directory`` (sorted by name) with its sidecar expectations."""
    if not directory.is_dir():
        raise WorkloadError(f"workload directory {directory} does not exist or is not a directory")
    scripts = sorted(p for p in directory.iterdir() if _is_script(p))
    if not scripts:
        raise WorkloadError(f"workload directory {directory} holds no sbatch script (shebang or #SBATCH line)")
    corpus = []
    for script in scripts:
        candidates = (script.with_name(script.name + ".yaml"), script.with_name(script.name + ".yml"))
        sidecar = next((candidate for candidate in candidates if candidate.exists()), None)
        values = parse_sidecar(sidecar) if sidecar else {}
        corpus.append(Workload(path=script.resolve(), **values))  # type: ignore[arg-type]
    return corpus


def job_nodes(num_nodes: str) -> int | None:
    """``NumNodes`` from ``scontrol show job`` (``2`` or ``1-2``) as the allocated count, if it is one number."""
    match = re.fullmatch(r"(\d+)(?:-\d+)?", num_nodes.strip())
    return int(match.group(1)) if match else None


def exit_status(exit_code_field: str) -> tuple[int, int]:
    """``ExitCode=rc:signal`` from ``scontrol show job`` as (rc, signal)."""
    rc, _, sig = exit_code_field.partition(":")
    try:
        return int(rc), int(sig or 0)
    except ValueError:
        raise ValueError(f"unparseable ExitCode {exit_code_field!r}") from None
