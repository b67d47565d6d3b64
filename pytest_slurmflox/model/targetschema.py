"""The target file's schema (``schemas/target.json``, published as docs/target-schema.md): what each refusal says.

Contract: :func:`check` passes a document that has only keys the schema names, each of its type, enumerations
among their choices and every required key present; otherwise it raises :class:`SchemaError` with one line naming
the path of each problem (up to :data:`SHOWN`): an unknown key with the nearest known one (``acounting`` -> did you
mean ``accounting``?), else the keys known there; a wrong type with the value and the type expected; a value
outside an enumeration with its choices; a missing key by its path. Nothing is read as "not declared" that was
merely misspelled. The schema is the one list of keys: the parser (target.py) reads no key it does not name, and
a substrate's written target validates against it like a customer's.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

SCHEMA_FILE = Path(__file__).parents[1] / "schemas" / "target.json"
SHOWN = 3  #: problems named in the one line (the rest are counted)
#: JSON Schema type names as a YAML author reads them.
TYPE_WORDS = {
    "object": "a mapping",
    "array": "a list",
    "string": "text",
    "integer": "a whole number",
    "number": "a number",
    "boolean": "true or false",
    "null": "empty",
}


class SchemaError(ValueError):
    """The document does not follow the target file's schema; the message names each problem's path."""


def schema() -> dict[str, Any]:
    """The shipped schema."""
    return json.loads(SCHEMA_FILE.read_text())


def check(doc: Any) -> None:
    """Raise :class:`SchemaError` (one line) unless ``doc`` follows the schema."""
    found = problems(doc)
    if found:
        more = f" (and {len(found) - SHOWN} more)" if len(found) > SHOWN else ""
        raise SchemaError("; ".join(found[:SHOWN]) + more)


def read_document(path: Path) -> Any:
    """The YAML document in ``path``; :class:`SchemaError` in one line when the file is missing, unreadable or
    not YAML (the line and column of the first problem)."""
    import yaml

    try:
        text = path.read_text()
    except FileNotFoundError:
        raise SchemaError("does not exist") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise SchemaError(f"cannot be read: {getattr(exc, 'strerror', None) or exc}") from None
    try:
        _refuse_duplicated_keys(yaml.compose(text, Loader=yaml.SafeLoader))
        return yaml.safe_load(text)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
        raise SchemaError(f"is not valid YAML: {where}{exc.problem or exc.context}") from None
    except yaml.YAMLError as exc:
        raise SchemaError(f"is not valid YAML: {' '.join(str(exc).split())}") from None


def _refuse_duplicated_keys(root: Any) -> None:
    """:class:`SchemaError` naming the first key a mapping gives twice, by its path and both lines: YAML loaders
    keep the last one silently, so the first would be read as never written (a second ``login:`` map without its
    ``user`` would be refused as "login.user is required", far from the mistake)."""
    import yaml

    pending: list[tuple[Any, str]] = [(root, "")] if root is not None else []
    seen: set[int] = set()
    while pending:
        node, where = pending.pop()
        if id(node) in seen:  # an alias names a node already walked
            continue
        seen.add(id(node))
        if isinstance(node, yaml.SequenceNode):
            pending.extend((item, f"{where}[{n}]") for n, item in enumerate(node.value))
        if not isinstance(node, yaml.MappingNode):
            continue
        lines: dict[str, int] = {}
        for key, value in node.value:
            name = str(key.value) if isinstance(key, yaml.ScalarNode) else repr(key.value)
            path = _join(where, name)
            if name in lines:
                line = key.start_mark.line + 1
                raise SchemaError(f"{path} is given twice (line {lines[name]} and line {line}); give it once")
            lines[name] = key.start_mark.line + 1
            pending.append((value, path))


def problems(doc: Any) -> list[str]:
    """Every schema problem of ``doc``, one phrase each: unknown keys first, then missing keys, then values."""
    import jsonschema

    validator = jsonschema.Draft202012Validator(schema())
    found: list[tuple[int, str, str]] = []
    for error in validator.iter_errors(doc):
        for rank, path, text in _phrases(error):
            found.append((rank, path, text))
    return list(dict.fromkeys(text for _, _, text in sorted(found)))


def _path(parts: Iterable[Any]) -> str:
    out = ""
    for part in parts:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _join(parent: str, key: str) -> str:
    return f"{parent}.{key}" if parent else key


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _phrases(error: Any) -> list[tuple[int, str, str]]:
    """(rank, path, phrase) for one jsonschema error; rank orders unknown, missing, then wrong values."""
    path = _path(error.absolute_path)
    kind, value, rule = error.validator, error.instance, error.validator_value
    if kind == "additionalProperties":
        known = sorted(error.schema.get("properties", {}))
        return [(0, path, text) for text in _unknown(path, [str(k) for k in value if k not in known], known)]
    if kind == "required":
        return [(1, _join(path, k), f"{_join(path, k)} is required") for k in rule if k not in value]
    if kind == "dependentRequired":
        pairs = [(k, need) for k, needs in rule.items() if k in value for need in needs if need not in value]
        return [(1, _join(path, n), f"{_join(path, n)} is required with {_join(path, k)}") for k, n in pairs]
    where = path or "the target file"
    if kind == "type":
        return [(2, path, _wrong_type(where, value, rule, error.schema.get("items")))]
    if kind == "enum":
        choices = ", ".join(str(c) for c in rule)
        close = difflib.get_close_matches(str(value), [str(c) for c in rule], n=1)
        hint = f" (did you mean {close[0]}?)" if close else ""
        return [(2, path, f"{where}: {_show(value)} is not one of {choices}{hint}")]
    if kind == "const":
        return [(2, path, f"{where}: {_show(value)} is not supported (expected {_show(rule)})")]
    if kind == "minLength":
        return [(1, path, f"{where} is empty (expected text)")]
    if kind in ("minimum", "maximum"):
        bound = "at least" if kind == "minimum" else "at most"
        return [(2, path, f"{where}: {_show(value)} must be {bound} {rule}")]
    return [(2, path, f"{where}: {error.message}")]


def _unknown(parent: str, keys: list[str], known: list[str]) -> list[str]:
    """One phrase per misspelled key (the nearest known one), one for the keys like none (the known ones)."""
    out, strangers = [], []
    for key in keys:
        close = difflib.get_close_matches(key, known, n=1, cutoff=0.6)
        if close:
            out.append(f"{_join(parent, key)} is not a known key (did you mean {_join(parent, close[0])}?)")
        else:
            strangers.append(_join(parent, key))
    if strangers:
        what = (
            f"{strangers[0]} is not a known key"
            if len(strangers) == 1
            else f"{', '.join(strangers)} are not known keys"
        )
        out.append(f"{what} (known{' in ' + parent if parent else ''}: {', '.join(known)})")
    return out


def _wrong_type(where: str, value: Any, expected: Any, items: Mapping[str, Any] | None) -> str:
    wanted = [expected] if isinstance(expected, str) else [t for t in expected if t != "null"] or list(expected)
    words = " or ".join(TYPE_WORDS.get(t, t) for t in wanted)
    if items and "type" in items:
        words += f" of {TYPE_WORDS[items['type']]}"
    if value is None:
        return f"{where} is empty (expected {words})"
    quote = " (quote it)" if wanted == ["string"] and not isinstance(value, Mapping | list) else ""
    return f"{where}: {_show(value)} is {_kind(value)}, expected {words}{quote}"


def _kind(value: Any) -> str:
    """What a YAML value is, in :data:`TYPE_WORDS`' words (a date, YAML's own, by its Python name)."""
    for python, word in ((bool, "boolean"), (int, "integer"), (float, "number"), (str, "string")):
        if isinstance(value, python):
            return TYPE_WORDS[word]
    if isinstance(value, Mapping):
        return TYPE_WORDS["object"]
    return TYPE_WORDS["array"] if isinstance(value, list) else f"a {type(value).__name__}"


# ------------------------------------------------------------------------------------------ the published page
def leaf_paths(node: Mapping[str, Any] | None = None, prefix: str = "") -> list[tuple[str, Mapping[str, Any]]]:
    """Every key the schema names, as ``(dotted path, its schema)``, in the schema's order (sections too)."""
    node = schema() if node is None else node
    out: list[tuple[str, Mapping[str, Any]]] = []
    for key, sub in node.get("properties", {}).items():
        path = _join(prefix, key)
        out.append((path, sub))
        out.extend(leaf_paths(sub, path))
    return out


def _type_cell(sub: Mapping[str, Any], required: bool) -> str:
    if "enum" in sub:
        kind = " \\| ".join(f"`{c}`" for c in sub["enum"])
    elif "const" in sub:
        kind = f"`{sub['const']}`"
    elif "$ref" in sub:
        kind = "text, number or true/false"
    else:
        types = [sub["type"]] if isinstance(sub["type"], str) else sub["type"]
        kind = " or ".join(TYPE_WORDS[t] for t in types if t != "null")
        if sub.get("type") == "array" or "array" in types:
            kind += f" of {TYPE_WORDS[sub['items']['type']]}"
    bounds = [f"{w} {sub[k]}" for k, w in (("minimum", ">="), ("maximum", "<=")) if k in sub]
    return kind + (f" ({', '.join(bounds)})" if bounds else "") + (", **required**" if required else "")


def markdown() -> str:
    """docs/target-schema.md: one row per key, from the schema (tests keep the page equal to this)."""
    doc = schema()
    lines = [
        "# The target file's schema",
        "",
        "Generated from `pytest_slurmflox/schemas/target.json` (the schema every target file is validated against",
        "before a run starts; `tests/unit/test_targetschema.py` keeps this page equal to it). An unknown key, a",
        "wrong type, a value outside its choices or a missing required key is refused in one line naming its path,",
        "exit status 4, nothing written.",
        "",
        "A starter file: `pytest --slurmflox-init-target=site.yaml --slurmflox-init-login=alice@login.example:22`",
        "connects to the login once, asks the cluster read-only what it has (nothing is submitted) and writes every",
        "key below in this order: what the login and the cluster gave filled in (name, login, slurm.partition, its",
        "default; slurm.version; accounting.account, the user's default account when slurmdbd answers), every other",
        "key commented, each with the text of this table. Expectations stay commented: you declare them. It never",
        "overwrites a file (exit 4); an unreachable login is one line naming `user@host:port` and the stage (exit 1).",
        "Then `pytest --slurmflox-check-target=site.yaml` (the doctor) says per group what a run would do.",
        "",
        doc["description"],
        "",
        "| key | type | what it is |",
        "|---|---|---|",
    ]
    required_at = {_join(p, r) for p, sub in [("", doc), *leaf_paths()] for r in sub.get("required", [])}
    for path, sub in leaf_paths():
        description = str(sub.get("description", "")).replace("|", "\\|")
        lines.append(f"| `{path}` | {_type_cell(sub, path in required_at)} | {description} |")
    return "\n".join(lines) + "\n"
