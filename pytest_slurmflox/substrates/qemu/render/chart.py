"""Render a Helm chart directory offline and hand back the Kubernetes objects it would create.

Why: no helm binary is packaged here, and an assertion on a values dict proves nothing about where Kubernetes
reads a field. helm-python-sdk bundles Helm's own Go SDK, so rendering through it runs the chart's real
templates. The package is imported lazily: the plugin must import (and unrelated tests run) without it, and a
missing package should say what to install rather than fail with an ImportError deep in a stack.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml

#: Environment variable naming a directory that holds Slinky charts (searched for */helm/slurm/Chart.yaml).
CHARTS_ENV = "SLURMFLOX_SLINKY_CHARTS"


def default_charts_root() -> Path:
    """$SLURMFLOX_SLINKY_CHARTS, else the shared reference copy beside the checkout (``../shared/reference/slinky``)."""
    configured = os.environ.get(CHARTS_ENV)
    if configured:
        return Path(configured)
    return Path(__file__).resolve().parents[5] / "shared" / "reference" / "slinky"


class ChartUnavailable(RuntimeError):
    """Rendering is impossible here: helm-python-sdk is missing or the chart directory does not exist."""


def _helm() -> Any:
    try:
        import helm_python
    except ImportError as exc:
        raise ChartUnavailable(
            "rendering a Helm chart needs the PyPI package helm-python-sdk "
            "(pip install 'pytest-slurmflox[test]' or pip install helm-python-sdk)"
        ) from exc
    return helm_python


def render_manifests(
    chart_dir: str | os.PathLike[str],
    values: Mapping[str, Any],
    *,
    release: str = "slurm",
    namespace: str = "slurm",
) -> dict[str, str]:
    """Template path -> rendered manifest text, as ``helm template`` would produce it (no cluster contacted)."""
    path = Path(chart_dir)
    if not (path / "Chart.yaml").is_file():
        raise ChartUnavailable(f"no Helm chart at {path} (Chart.yaml missing)")
    helm = _helm()
    with helm.Chart.load(str(path)) as chart:
        rendered: dict[str, str] = chart.render(dict(values), name=release, namespace=namespace)
    return rendered


def parse_manifests(manifests: Mapping[str, str]) -> list[dict[str, Any]]:
    """Every Kubernetes object in rendered manifests, in template-path order; NOTES and empty documents skipped."""
    objects: list[dict[str, Any]] = []
    for template in sorted(manifests):
        if not template.endswith((".yaml", ".yml", ".json")):
            continue
        for doc in yaml.safe_load_all(manifests[template]):
            if isinstance(doc, dict) and doc.get("kind"):
                objects.append(doc)
    return objects


def render_chart(
    chart_dir: str | os.PathLike[str],
    values: Mapping[str, Any],
    *,
    release: str = "slurm",
    namespace: str = "slurm",
) -> list[dict[str, Any]]:
    """Render ``chart_dir`` with ``values`` and return the parsed objects (what ``kubectl apply`` would get)."""
    return parse_manifests(render_manifests(chart_dir, values, release=release, namespace=namespace))


def chart_version(chart_dir: str | os.PathLike[str]) -> str:
    """The ``version`` field of a chart directory's Chart.yaml."""
    meta = yaml.safe_load((Path(chart_dir) / "Chart.yaml").read_text(encoding="utf-8"))
    return str(meta["version"])


def find_slurm_charts(root: str | os.PathLike[str]) -> dict[str, Path]:
    """Chart version -> directory for every Slinky ``slurm`` chart below ``root`` (e.g. helm/slurm, v1.2.1/...)."""
    found: dict[str, Path] = {}
    base = Path(root)
    if not base.is_dir():
        return found
    for chart_yaml in sorted(base.glob("**/helm/slurm/Chart.yaml")):
        meta = yaml.safe_load(chart_yaml.read_text(encoding="utf-8"))
        if isinstance(meta, dict) and meta.get("name") == "slurm":
            found[str(meta["version"])] = chart_yaml.parent
    return found


def select(objects: Iterable[Mapping[str, Any]], kind: str, name: str | None = None) -> list[dict[str, Any]]:
    """Objects of one kind (and, if given, one metadata.name)."""
    return [
        dict(obj)
        for obj in objects
        if obj.get("kind") == kind and (name is None or obj.get("metadata", {}).get("name") == name)
    ]


def one(objects: Iterable[Mapping[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    """Exactly one object of a kind (and name), or a clear error listing what was there."""
    matches = select(objects, kind, name)
    if len(matches) != 1:
        raise LookupError(f"expected exactly one {kind} {name or ''}, found {len(matches)}")
    return matches[0]
