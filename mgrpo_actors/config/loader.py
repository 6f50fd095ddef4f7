"""Build typed config dataclasses from YAML and `--set` overrides, rejecting anything unknown.

Errors name the full dotted key and say what was expected, e.g.
`unknown config key 'nats.urll' (valid keys under 'nats': url, connect_timeout_s, ...)`.
"""

from __future__ import annotations

import dataclasses
import re
import types
import typing
from pathlib import Path
from typing import Any, Literal, TypeVar

import yaml

from mgrpo_actors.config.paths import not_a_regular_file

__all__ = ["ENTRIES_START_FROM", "ConfigError", "apply_overrides", "from_dict", "load_config", "to_dict"]

T = TypeVar("T")

# A number in exponent form without a dot ("1e-5") is a string to YAML 1.1 (PyYAML), so `lr: 1e-5` in a file
# or `--set learners.main.lr=1e-5` would be refused as "not a number": such strings are read as the number.
_EXPONENT_NUMBER = re.compile(r"[-+]?(\d+\.?\d*|\.\d+)[eE][-+]?\d+")


class ConfigError(ValueError):
    """A config file or override is wrong; the message names the key."""


# Field metadata: each entry of a `dict[str, <section>]` field starts from the value of this sibling field, and the
# entry's keys replace that value's (agents.subs.<type> starts from agents.sub).
ENTRIES_START_FROM = "entries_start_from"


def _coerce(path: str, annotation: Any, value: Any, default: Any = None, entry_base: Any = None) -> Any:
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if dataclasses.is_dataclass(annotation):
        if not isinstance(value, dict):
            raise ConfigError(f"config key '{path}' must be a mapping, got {value!r}")
        # A section given in part keeps its own defaults for the rest (which may differ from the class's).
        return from_dict(annotation, value, path, base=default if isinstance(default, annotation) else None)
    if annotation is Any:
        return value
    if origin is Literal:
        if value not in args:
            raise ConfigError(f"config key '{path}' is {value!r}; expected one of {', '.join(map(repr, args))}")
        return value
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        inner = [a for a in args if a is not type(None)]
        errors = []
        for candidate in inner:
            try:
                return _coerce(path, candidate, value)
            except ConfigError as exc:
                errors.append(str(exc))
        raise ConfigError(errors[0] if len(errors) == 1 else f"config key '{path}' is {value!r}; expected {annotation}")
    if origin in (list, tuple):
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"config key '{path}' must be a list, got {value!r}")
        item = args[0] if args else Any
        items = [_coerce(f"{path}[{i}]", item, v) for i, v in enumerate(value)]
        return tuple(items) if origin is tuple else items
    if origin is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"config key '{path}' must be a mapping, got {value!r}")
        item = args[1] if args else Any
        return {str(k): _coerce(f"{path}.{k}", item, v, entry_base) for k, v in value.items()}
    if annotation is float:
        if isinstance(value, str) and _EXPONENT_NUMBER.fullmatch(value.strip()):
            return float(value)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"config key '{path}' must be a number, got {value!r}")
        return float(value)
    if annotation is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"config key '{path}' must be an integer, got {value!r}")
        return value
    if annotation is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"config key '{path}' must be true or false, got {value!r}")
        return value
    if annotation is str:
        if not isinstance(value, str):
            raise ConfigError(f"config key '{path}' must be a string, got {value!r}")
        return value
    raise ConfigError(f"config key '{path}' has a type this loader does not know: {annotation}")


def _default_of(f: dataclasses.Field) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return None


def from_dict(cls: type[T], data: dict[str, Any] | None, path: str = "", base: T | None = None) -> T:
    """Instantiate config dataclass `cls` from a (possibly partial) mapping; unset fields keep the
    defaults (those of `base` when given, else the class's)."""
    data = data or {}
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}  # type: ignore[arg-type]
    values: dict[str, Any] = {}

    def current(key: str) -> Any:  # the value `key` has once `data` is applied
        if key in values:
            return values[key]
        return getattr(base, key) if base is not None else _default_of(fields[key])

    # Fields whose entries start from a sibling's value come after every other, so that value is the final one.
    for key, value in sorted(
        data.items(), key=lambda item: item[0] in fields and _starts_from(fields[item[0]]) is not None
    ):
        full = f"{path}.{key}" if path else str(key)
        if key not in fields:
            where = f"under '{path}'" if path else "at the top level"
            raise ConfigError(f"unknown config key '{full}' (valid keys {where}: {', '.join(fields)})")
        default = getattr(base, key) if base is not None else _default_of(fields[key])
        sibling = _starts_from(fields[key])
        values[key] = _coerce(full, hints[key], value, default, current(sibling) if sibling else None)
    try:
        return dataclasses.replace(base, **values) if base is not None else cls(**values)
    except ConfigError:
        raise
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"config section '{path or cls.__name__}': {exc}") from None


def _starts_from(f: dataclasses.Field) -> str | None:
    return f.metadata.get(ENTRIES_START_FROM)


def to_dict(config: Any) -> dict[str, Any]:
    """The plain-mapping form of a config (for logging and for `mgrpo-node --print-config`)."""
    return dataclasses.asdict(config)


def apply_overrides(data: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """Apply `a.b=v` overrides to a mapping; `v` is parsed as YAML (so `3`, `true`, `[1, 2]` are typed)."""
    for item in overrides:
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"override {item!r} must look like key.path=value")
        try:
            value = yaml.safe_load(raw) if raw.strip() else ""
        except yaml.YAMLError as exc:
            raise ConfigError(f"override {item!r}: value is not valid YAML: {exc}") from None
        node = data
        parts = key.strip().split(".")
        for i, part in enumerate(parts[:-1]):
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                raise ConfigError(f"override {item!r}: '{'.'.join(parts[: i + 1])}' is not a section")
            # A copy: YAML aliases (default.yaml's `sub: *agent`) share one mapping; setting main's key must leave
            # sub's.
            node[part] = node = dict(child)
        node[parts[-1]] = value
    return data


def _read_yaml(path: str | Path) -> dict[str, Any]:
    p = Path(path)
    problem = not_a_regular_file(p)
    if problem == "does not exist":
        raise ConfigError(f"config file {str(p)!r} does not exist")
    if problem is not None:  # a directory, /dev/null, a FIFO: it exists, yet holds no config
        raise ConfigError(f"config path {str(p)!r} {problem}: give a YAML file")
    try:
        loaded = yaml.safe_load(p.read_text(encoding="utf-8"))
    except UnicodeDecodeError as exc:
        raise ConfigError(f"config file {str(p)!r} is not UTF-8 text (byte {exc.start}: {exc.reason})") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"config file {str(p)!r} is not valid YAML: {exc}") from None
    if loaded is not None and not isinstance(loaded, dict):
        raise ConfigError(f"config file {str(p)!r} must hold a mapping at the top level")
    return loaded or {}


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """`over` on top of `base`: mappings merge key by key, anything else is replaced."""
    merged = dict(base)
    for key, value in over.items():
        merged[key] = (
            _merge(merged[key], value) if isinstance(value, dict) and isinstance(merged.get(key), dict) else value
        )
    return merged


def load_config(
    cls: type[T],
    path: str | Path | list[str | Path] | None = None,
    overrides: list[str] | None = None,
    section: str = "",
) -> T:
    """Load `cls` from YAML files (optional; several are merged in order, the later winning key by
    key: e.g. a run's config, then a node's rendered `nats` section) plus overrides; with `section`,
    from that top-level section only (e.g. "nats" for a command that only connects)."""
    data: dict[str, Any] = {}
    for one in [path] if isinstance(path, (str, Path)) else list(path or []):
        data = _merge(data, _read_yaml(one))
    apply_overrides(data, overrides or [])
    if section:
        data = data.get(section) or {}
        if not isinstance(data, dict):
            raise ConfigError(f"config section {section!r} must be a mapping")
    return from_dict(cls, data, path=section)
