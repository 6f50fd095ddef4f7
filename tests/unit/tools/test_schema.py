"""The small JSON-schema validator tool arguments go through."""

from __future__ import annotations

import pytest

from mgrpo_actors.tools.schema import SchemaError, check_schema, validate

SCHEMA = {
    "type": "object",
    "properties": {
        "query": {"type": "string", "minLength": 1, "maxLength": 5},
        "k": {"type": "integer", "minimum": 1, "maximum": 3},
        "weight": {"type": "number", "minimum": 0},
        "mode": {"type": "string", "enum": ["fast", "slow"]},
        "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 2},
        "flag": {"type": "boolean"},
    },
    "required": ["query"],
    "additionalProperties": False,
}


def test_valid_arguments_pass() -> None:
    assert validate({"query": "abc", "k": 2, "weight": 0.5, "mode": "fast", "tags": ["x"], "flag": True}, SCHEMA) == []


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({}, "arguments: missing required field 'query'"),
        ({"query": 3}, "arguments.query: expected string, got integer 3"),
        ({"query": ""}, "arguments.query: must have at least 1 characters"),
        ({"query": "toolong"}, "arguments.query: must have at most 5 characters, got 7"),
        ({"query": "a", "k": True}, "arguments.k: expected integer, got boolean True"),
        ({"query": "a", "k": 2.0}, "arguments.k: expected integer, got number 2.0"),
        ({"query": "a", "k": 10**30}, "arguments.k: must be <= 3"),
        ({"query": "a", "k": 0}, "arguments.k: must be >= 1, got 0"),
        ({"query": "a", "weight": float("nan")}, "arguments.weight: expected number"),
        ({"query": "a", "mode": "medium"}, "arguments.mode: must be one of ['fast', 'slow']"),
        ({"query": "a", "tags": ["x", 1]}, "arguments.tags[1]: expected string"),
        ({"query": "a", "tags": ["x", "y", "z"]}, "arguments.tags: must have at most 2 items"),
        ({"query": "a", "extra": 1}, "arguments: unexpected fields ['extra']"),
        ([], "arguments: expected object, got array"),
        (None, "arguments: expected object, got null"),
    ],
)
def test_invalid_arguments_are_named(arguments: object, message: str) -> None:
    errors = validate(arguments, SCHEMA)
    assert any(message in e for e in errors), errors


def test_every_error_is_reported() -> None:
    errors = validate({"k": "x", "mode": 1, "other": 0}, SCHEMA)
    assert len(errors) == 4  # missing query, unexpected field, k and mode wrong


@pytest.mark.parametrize(
    ("schema", "message"),
    [
        ({"type": "object", "patternProperties": {}}, "unsupported keywords ['patternProperties']"),
        ({"type": "tuple"}, "'type' must be one of"),
        ({"type": "object", "properties": {"a": {"type": "strin"}}}, "schema.properties.a"),
        ({"type": "object", "properties": {}, "required": ["a"]}, "required fields ['a'] are not in 'properties'"),
        ("object", "must be an object"),
    ],
)
def test_unsupported_schemas_are_rejected(schema: object, message: str) -> None:
    with pytest.raises(SchemaError, match=message.replace("[", r"\[").replace("]", r"\]")):
        check_schema(schema)
