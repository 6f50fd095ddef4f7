"""The tool registry: tools by name, built from config by import path, called without ever raising.

A config lists entries such as
    {name: search, factory: "mgrpo_actors.tools.search:SearchTool", args: {pages: data/web/pages.jsonl}}
and `ToolRegistry.from_config` imports each factory and calls it with its args; that is how a user
adds a tool (a real web search, say) without touching this package. Objects a config cannot spell (a
model's generate function) come in through `extra_args`. Config mistakes raise ToolConfigError when the
registry is built; a bad *call* is always an error ToolOutput.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import structlog

from mgrpo_actors import plugins
from mgrpo_actors.tools.base import Tool, ToolOutput
from mgrpo_actors.tools.schema import SchemaError, check_schema, validate

__all__ = ["ToolConfigError", "ToolRegistry", "ToolSpec", "import_object", "schemas_for_prompt"]

log = structlog.get_logger(__name__)


class ToolConfigError(ValueError):
    """A tool entry of the config cannot be turned into a tool."""


@dataclass(frozen=True)
class ToolSpec:
    """One tool entry of a config."""

    name: str  # the name agents call it by
    factory: str  # "package.module:attribute", a class or function returning a Tool
    args: dict[str, Any] = field(default_factory=dict)  # keyword arguments for the factory

    @classmethod
    def from_mapping(cls, entry: Mapping[str, Any]) -> ToolSpec:
        unknown = sorted(set(entry) - {"name", "factory", "args"})
        if unknown:
            raise ToolConfigError(f"tool entry {dict(entry)!r}: unknown keys {unknown}; expected name, factory, args")
        name, factory, args = entry.get("name"), entry.get("factory"), entry.get("args", {})
        if not isinstance(name, str) or not name:
            raise ToolConfigError(f"tool entry {dict(entry)!r}: 'name' must be a non-empty string")
        if not isinstance(factory, str) or ":" not in factory:
            expected = "'package.module:attribute'"
            raise ToolConfigError(f"tool {name!r}: 'factory' must look like {expected}, got {factory!r}")
        if not isinstance(args, Mapping):
            raise ToolConfigError(f"tool {name!r}: 'args' must be a mapping, got {type(args).__name__}")
        return cls(name=name, factory=factory, args=dict(args))


def import_object(path: str) -> Any:
    """The object at "package.module:attribute"."""
    try:
        return plugins.import_object(path)
    except plugins.PluginError as exc:
        raise ToolConfigError(str(exc)) from exc


class ToolRegistry:
    """Tools by name; `call` turns every failure into an error ToolOutput."""

    def __init__(self) -> None:
        self._tools: dict[str, Tool] = {}

    def register(self, tool: Tool, name: str | None = None) -> None:
        """Add `tool` under `name` (default: tool.name); names are unique."""
        name = name or getattr(tool, "name", "")
        if not name:
            raise ToolConfigError(f"tool {tool!r} has no name")
        if name in self._tools:
            raise ToolConfigError(f"tool {name!r} is registered twice")
        if not isinstance(tool, Tool):
            raise ToolConfigError(f"tool {name!r}: {type(tool).__name__} lacks name/description/parameters/__call__")
        try:
            check_schema(tool.parameters, f"tool {name!r} parameters")
        except SchemaError as exc:
            raise ToolConfigError(str(exc)) from exc
        self._tools[name] = tool

    @classmethod
    def from_config(
        cls, entries: Iterable[Mapping[str, Any] | ToolSpec], extra_args: Mapping[str, Mapping[str, Any]] | None = None
    ) -> ToolRegistry:
        """Build every entry's tool; extra_args[name] adds keyword arguments a config cannot hold."""
        registry = cls()
        extra_args = dict(extra_args or {})
        for entry in entries:
            spec = entry if isinstance(entry, ToolSpec) else ToolSpec.from_mapping(entry)
            factory = import_object(spec.factory)
            try:
                tool = factory(**spec.args, **extra_args.pop(spec.name, {}))
            except Exception as exc:
                failure = f"{type(exc).__name__}: {exc}"
                raise ToolConfigError(f"tool {spec.name!r}: {spec.factory}(...) failed: {failure}") from exc
            registry.register(tool, spec.name)
        if extra_args:
            unused = sorted(extra_args)
            raise ToolConfigError(f"extra_args for tools not in the config: {unused}; known: {registry.names}")
        log.info("tools registered", tools=registry.names)
        return registry

    @property
    def names(self) -> list[str]:
        return list(self._tools)

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def get(self, name: str) -> Tool:
        if name not in self._tools:
            raise KeyError(f"unknown tool {name!r}; known tools: {', '.join(self.names) or 'none'}")
        return self._tools[name]

    def subset(self, names: Iterable[str]) -> ToolRegistry:
        """A registry with only `names` (e.g. the sub-agent's search and visit)."""
        registry = ToolRegistry()
        for name in names:
            registry.register(self.get(name), name)
        return registry

    def call(self, name: Any, arguments: Any) -> ToolOutput:
        """Call tool `name` with `arguments` (a dict, or a JSON object as text); never raises."""
        try:
            return self._call(name, arguments)
        except Exception as exc:  # a broken third-party tool must not end the rollout
            log.warning("tool call raised", tool=repr(name)[:100], error=repr(exc))
            return ToolOutput.failure(f"tool {name!r} failed: {type(exc).__name__}: {exc}")

    def _call(self, name: Any, arguments: Any) -> ToolOutput:
        if not isinstance(name, str) or name not in self._tools:
            known = ", ".join(self.names) or "none"
            return ToolOutput.failure(f"unknown tool {repr(name)[:100]}; known tools: {known}")
        if isinstance(arguments, str):
            try:
                arguments = json.loads(arguments)
            except (ValueError, RecursionError) as exc:
                return ToolOutput.failure(f"arguments for {name} are not valid JSON: {exc}")
        if not isinstance(arguments, dict):
            return ToolOutput.failure(f"arguments for {name} must be a JSON object, got {type(arguments).__name__}")
        tool = self._tools[name]
        errors = validate(arguments, tool.parameters)
        if errors:
            return ToolOutput.failure(f"invalid arguments for {name}: " + "; ".join(errors))
        result = tool(arguments)
        if not isinstance(result, ToolOutput):
            return ToolOutput.failure(f"tool {name} returned {type(result).__name__}, not a ToolOutput")
        return result

    def schemas(self) -> list[dict[str, Any]]:
        """{name, description, parameters} of every tool, in registration order."""
        return [
            {"name": name, "description": tool.description, "parameters": tool.parameters}
            for name, tool in self._tools.items()
        ]


def schemas_for_prompt(registry: ToolRegistry) -> str:
    """The tools block of a system prompt: one JSON schema per line inside <tools>...</tools>."""
    lines = [json.dumps(schema, ensure_ascii=False) for schema in registry.schemas()]
    return "# Tools\n\nYou may call one of these tools per turn:\n<tools>\n" + "\n".join(lines) + "\n</tools>"
