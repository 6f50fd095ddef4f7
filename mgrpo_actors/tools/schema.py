"""A small validator for the subset of JSON Schema that tool arguments use.

Supported keywords: type (object, string, integer, number, boolean, array, null), properties,
required, additionalProperties (bool), enum, minLength, maxLength, minimum, maximum, items, minItems,
maxItems; description, title and default are documentation. `check_schema` rejects anything else when
a tool is built, so a user's tool cannot silently rely on a keyword this validator ignores.
"""

from __future__ import annotations

import math
from typing import Any

__all__ = ["SchemaError", "check_schema", "validate"]

_TYPES = ("object", "string", "integer", "number", "boolean", "array", "null")
_KEYWORDS = {
    "type",
    "properties",
    "required",
    "additionalProperties",
    "enum",
    "minLength",
    "maxLength",
    "minimum",
    "maximum",
    "items",
    "minItems",
    "maxItems",
    "description",
    "title",
    "default",
}


class SchemaError(ValueError):
    """A tool's schema uses something this validator does not support."""


def check_schema(schema: Any, path: str = "schema") -> None:
    """Raise SchemaError naming the first unsupported or malformed part of `schema`."""
    if not isinstance(schema, dict):
        raise SchemaError(f"{path}: must be an object, got {type(schema).__name__}")
    unknown = sorted(set(schema) - _KEYWORDS)
    if unknown:
        raise SchemaError(f"{path}: unsupported keywords {unknown}; supported: {sorted(_KEYWORDS)}")
    if schema.get("type") not in _TYPES:
        raise SchemaError(f"{path}: 'type' must be one of {list(_TYPES)}, got {schema.get('type')!r}")
    for name, sub in schema.get("properties", {}).items():
        check_schema(sub, f"{path}.properties.{name}")
    if "items" in schema:
        check_schema(schema["items"], f"{path}.items")
    missing = [r for r in schema.get("required", []) if r not in schema.get("properties", {})]
    if missing:
        raise SchemaError(f"{path}: required fields {missing} are not in 'properties'")


def _type_ok(value: Any, type_: str) -> bool:
    # bool is a subclass of int in Python; JSON keeps them apart, and so do we.
    if type_ == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if type_ == "number":
        return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    expected = {"object": dict, "string": str, "boolean": bool, "array": list, "null": type(None)}
    return isinstance(value, expected[type_])


def _json_type(value: Any) -> str:
    names = {bool: "boolean", int: "integer", float: "number", str: "string", list: "array", dict: "object"}
    return "null" if value is None else names.get(type(value), type(value).__name__)


def _preview(value: Any, limit: int = 40) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _bounds(value: Any, schema: dict[str, Any], path: str) -> list[str]:
    errors = []
    if isinstance(value, str):
        if len(value) < schema.get("minLength", 0):
            errors.append(f"{path}: must have at least {schema['minLength']} characters")
        if "maxLength" in schema and len(value) > schema["maxLength"]:
            errors.append(f"{path}: must have at most {schema['maxLength']} characters, got {len(value)}")
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if "minimum" in schema and value < schema["minimum"]:
            errors.append(f"{path}: must be >= {schema['minimum']}, got {_preview(value)}")
        if "maximum" in schema and value > schema["maximum"]:
            errors.append(f"{path}: must be <= {schema['maximum']}, got {_preview(value)}")
    if isinstance(value, list):
        if len(value) < schema.get("minItems", 0):
            errors.append(f"{path}: must have at least {schema['minItems']} items")
        if "maxItems" in schema and len(value) > schema["maxItems"]:
            errors.append(f"{path}: must have at most {schema['maxItems']} items, got {len(value)}")
    return errors


def _object(value: dict[str, Any], schema: dict[str, Any], path: str) -> list[str]:
    properties = schema.get("properties", {})
    errors = [f"{path}: missing required field {name!r}" for name in schema.get("required", []) if name not in value]
    if schema.get("additionalProperties", True) is False:
        extra = [k for k in value if k not in properties]
        if extra:
            errors.append(f"{path}: unexpected fields {extra}; allowed: {sorted(properties)}")
    for name, sub in properties.items():
        if name in value:
            errors += validate(value[name], sub, f"{path}.{name}")
    return errors


def validate(value: Any, schema: dict[str, Any], path: str = "arguments") -> list[str]:
    """Every way `value` breaks `schema`, each naming where (e.g. "arguments.k: must be <= 20"); [] if valid."""
    type_ = schema.get("type")
    if type_ is not None and not _type_ok(value, type_):
        return [f"{path}: expected {type_}, got {_json_type(value)} {_preview(value)}"]
    if "enum" in schema and value not in schema["enum"]:
        return [f"{path}: must be one of {schema['enum']}, got {_preview(value)}"]
    errors = _bounds(value, schema, path)
    if isinstance(value, dict):
        errors += _object(value, schema, path)
    if isinstance(value, list) and "items" in schema:
        for i, item in enumerate(value):
            errors += validate(item, schema["items"], f"{path}[{i}]")
    return errors
