"""Validate Kubernetes objects against a CustomResourceDefinition's openAPI v3 schema with jsonschema.

Why: the API server validates custom resources against exactly this schema, so a rendered (or live) NodeSet or
LoginSet that passes here is one the server would accept structurally. openAPI v3 differs from JSON Schema in
one way that matters for these CRDs: ``nullable: true``. It is translated into ``"null"`` being an allowed
type. The ``x-kubernetes-*`` extensions are ignored by jsonschema; CEL rules (x-kubernetes-validations) are not
evaluated here.
"""

from __future__ import annotations

import copy
import os
from pathlib import Path
from typing import Any

import yaml


def load_crd(path: str | os.PathLike[str]) -> dict[str, Any]:
    """One CRD document from a YAML file."""
    doc = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    if not isinstance(doc, dict) or doc.get("kind") != "CustomResourceDefinition":
        raise ValueError(f"{path} is not a CustomResourceDefinition")
    return doc


def _nullable_to_jsonschema(node: Any) -> Any:
    if isinstance(node, dict):
        out = {key: _nullable_to_jsonschema(value) for key, value in node.items()}
        if out.pop("nullable", False) and "type" in out:
            kinds = out["type"] if isinstance(out["type"], list) else [out["type"]]
            out["type"] = [*kinds, "null"]
        return out
    if isinstance(node, list):
        return [_nullable_to_jsonschema(item) for item in node]
    return node


def openapi_schema(crd: dict[str, Any], version: str | None = None) -> dict[str, Any]:
    """The JSON Schema for one served version of ``crd`` (the storage version when ``version`` is None)."""
    versions = crd["spec"]["versions"]
    chosen = next(
        (v for v in versions if (v["name"] == version if version else v.get("storage"))),
        None,
    )
    if chosen is None:
        raise LookupError(f"CRD {crd['metadata']['name']} has no version {version!r}")
    return _nullable_to_jsonschema(copy.deepcopy(chosen["schema"]["openAPIV3Schema"]))


def validate_object(obj: dict[str, Any], crd: dict[str, Any]) -> None:
    """Raise ``jsonschema.ValidationError`` if ``obj`` does not fit the CRD's schema for its apiVersion."""
    import jsonschema

    group = crd["spec"]["group"]
    api_group, _, version = str(obj.get("apiVersion", "")).partition("/")
    kind = crd["spec"]["names"]["kind"]
    if api_group != group or obj.get("kind") != kind:
        raise ValueError(f"object {obj.get('apiVersion')}/{obj.get('kind')} is not a {group} {kind}")
    jsonschema.validate(obj, openapi_schema(crd, version), cls=jsonschema.Draft7Validator)
