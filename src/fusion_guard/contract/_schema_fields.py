"""A tool's input schema flattened into the fields the contract diff compares.

Properties are walked through ``$ref``/``$defs``, nullable ``anyOf`` members and array ``items``
(written ``items[]``), so ``items[].sku`` names the ``sku`` of each element of ``items``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["LOWER_BOUNDS", "ROOT_FIELD", "UPPER_BOUNDS", "Field", "fields"]

ROOT_FIELD = "(root)"  # the arguments object itself (additionalProperties at the top level)


def _canonical(value: object) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False)


LOWER_BOUNDS = ("minimum", "exclusiveMinimum", "minLength", "minItems", "minProperties")
UPPER_BOUNDS = ("maximum", "exclusiveMaximum", "maxLength", "maxItems", "maxProperties")
_MAX_DEPTH = 16


@dataclass(frozen=True, slots=True)
class Field:
    """What the diff compares for one field (a flattened schema node)."""

    required: bool
    types: frozenset[str]
    enum: frozenset[str] | None  # canonical JSON of each option
    facets: Mapping[str, Any]  # bounds, multipleOf, pattern, format, closed
    default: tuple[Any, ...]  # () when there is no default, else (value,)
    description: str


def _resolve(
    node: object, defs: Mapping[str, Any], seen: frozenset[str]
) -> tuple[dict[str, Any], frozenset[str]]:
    """Follow ``$ref`` into ``$defs``; a cycle stops at the node that closes it."""
    while isinstance(node, Mapping) and isinstance(node.get("$ref"), str):
        ref = node["$ref"]
        name = ref.rsplit("/", 1)[-1]
        if ref in seen or name not in defs:
            break
        seen = seen | {ref}
        extra = {k: v for k, v in node.items() if k != "$ref"}
        node = {**defs[name], **extra}
    return (dict(node) if isinstance(node, Mapping) else {}), seen


def _members(node: Mapping[str, Any]) -> list[Any]:
    return list(node.get("anyOf") or node.get("oneOf") or [])


_JSON_TYPES = {
    str: "string",
    int: "integer",
    float: "number",
    bool: "boolean",
    type(None): "null",
    list: "array",
}


def _types(
    node: Mapping[str, Any], defs: Mapping[str, Any], seen: frozenset[str]
) -> frozenset[str]:
    declared = node.get("type")
    if isinstance(declared, str):
        return frozenset({declared})
    if isinstance(declared, list):
        return frozenset(str(t) for t in declared)
    members = _members(node)
    if members:
        return frozenset().union(*(_types(_resolve(m, defs, seen)[0], defs, seen) for m in members))
    if "properties" in node:
        return frozenset({"object"})
    if "const" in node:
        return frozenset({_JSON_TYPES.get(type(node["const"]), "object")})
    return frozenset()


def _main_member(
    node: dict[str, Any], defs: Mapping[str, Any], seen: frozenset[str]
) -> tuple[dict[str, Any], frozenset[str]]:
    """For ``anyOf: [X, {"type": "null"}]`` (an Optional), X merged with the outer keywords."""
    members = [_resolve(m, defs, seen) for m in _members(node)]
    real = [(m, s) for m, s in members if m.get("type") != "null"]
    if len(real) != 1:
        return node, seen
    inner, inner_seen = real[0]
    outer = {k: v for k, v in node.items() if k not in ("anyOf", "oneOf")}
    return {**inner, **outer}, inner_seen


def _enum(node: Mapping[str, Any]) -> frozenset[str] | None:
    if "const" in node:
        return frozenset({_canonical(node["const"])})
    options = node.get("enum")
    return None if not isinstance(options, list) else frozenset(_canonical(o) for o in options)


def _field(node: dict[str, Any], required: bool, types: frozenset[str]) -> Field:
    facets = {
        k: node[k]
        for k in (*LOWER_BOUNDS, *UPPER_BOUNDS, "multipleOf", "pattern", "format")
        if k in node
    }
    if node.get("additionalProperties") is False:
        facets["closed"] = True
    default = (node["default"],) if "default" in node else ()
    description = node.get("description")
    return Field(
        required,
        types,
        _enum(node),
        facets,
        default,
        description if isinstance(description, str) else "",
    )


def _walk(
    node: object,
    path: str,
    required: bool,
    defs: Mapping[str, Any],
    seen: frozenset[str],
    depth: int,
) -> Iterator[tuple[str, Field]]:
    resolved, seen = _resolve(node, defs, seen)
    types = _types(resolved, defs, seen)
    resolved, seen = _main_member(resolved, defs, seen)
    yield path or ROOT_FIELD, _field(resolved, required, types)
    if depth >= _MAX_DEPTH:
        return
    needed = set(resolved.get("required") or ())
    for name, child in (resolved.get("properties") or {}).items():
        child_path = f"{path}.{name}" if path else str(name)
        yield from _walk(child, child_path, name in needed, defs, seen, depth + 1)
    items = resolved.get("items")
    if isinstance(items, Mapping):
        yield from _walk(items, f"{path}[]", True, defs, seen, depth + 1)


def fields(schema: Mapping[str, Any]) -> dict[str, Field]:
    defs = schema.get("$defs") or schema.get("definitions") or {}
    return dict(_walk(schema, "", True, defs, frozenset(), 0))
