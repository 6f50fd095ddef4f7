"""The config reference from one source: each config dataclass field's docstring (the string literal right after
it, read with `ast`) and the defaults `NodeConfig()` gives. Rendered as deploy/configs/default.yaml (every key with
its default, its doc as a comment above it) and docs/reference/config.md (one table per section).

    python -m mgrpo_actors.config.reference            # print the default.yaml it would write
    python -m mgrpo_actors.config.reference --write    # rewrite both files (`make config-docs`)
    python -m mgrpo_actors.config.reference --check    # exit 1 naming each file that drifted
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import inspect
import re
import sys
import textwrap
import types
import typing
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any, Literal

import yaml

from mgrpo_actors.config.node import NodeConfig

__all__ = [
    "MARKDOWN_PATH",
    "REPO",
    "YAML_PATH",
    "Section",
    "config_classes",
    "drifted",
    "field_docs",
    "main",
    "render_markdown",
    "render_yaml",
    "sections",
]

REPO = Path(__file__).resolve().parents[2]
YAML_PATH = Path("deploy/configs/default.yaml")
MARKDOWN_PATH = Path("docs/reference/config.md")
COMMAND = "make config-docs"
WIDTH = 116  # comment lines of default.yaml wrap at this column


@dataclasses.dataclass(frozen=True)
class Section:
    """One config section: its dotted path, its dataclass, and its default instance(s): one, one per twin key
    (fields of one class under one parent, e.g. agents.main and agents.sub), or none when the default is None."""

    path: str
    cls: type
    values: tuple[Any, ...]
    keys: tuple[str, ...] = ()


@cache
def field_docs(cls: type) -> dict[str, str]:
    """Each field's docstring (whitespace folded to single spaces), read from the source of `cls`."""
    body = ast.parse(textwrap.dedent(inspect.getsource(cls))).body[0].body  # type: ignore[attr-defined]
    docs = {}
    for stmt, after in zip(body, body[1:]):
        if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and _is_string(after):
            docs[stmt.target.id] = " ".join(inspect.cleandoc(after.value.value).split())  # type: ignore[attr-defined]
    return docs


def _is_string(stmt: ast.stmt) -> bool:
    return isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant) and isinstance(stmt.value.value, str)


@cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _section_class(annotation: Any) -> type | None:
    """The dataclass a field holds (also under `X | None`), or None for a plain value."""
    if dataclasses.is_dataclass(annotation):
        return annotation  # type: ignore[return-value]
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        found = [a for a in typing.get_args(annotation) if dataclasses.is_dataclass(a)]
        return found[0] if len(found) == 1 else None
    return None


def _held(cls: type, name: str) -> type | None:
    return _section_class(_hints(cls)[name])


def _fields(cls: type) -> tuple[dataclasses.Field, ...]:
    return dataclasses.fields(cls)  # type: ignore[arg-type]


def _twins(cls: type) -> dict[str, tuple[str, ...]]:
    """Field name -> every field of `cls` holding the same dataclass, for classes held by two or more."""
    by_class: dict[type, list[str]] = {}
    for f in _fields(cls):
        held = _held(cls, f.name)
        if held is not None:
            by_class.setdefault(held, []).append(f.name)
    return {name: tuple(names) for names in by_class.values() if len(names) > 1 for name in names}


def _placeholder(keys: tuple[str, ...]) -> str:
    return "<agent>" if set(keys) == {"main", "sub"} else "<key>"


def sections(cls: type = NodeConfig, values: tuple[Any, ...] | None = None, path: str = "") -> Iterator[Section]:
    """Every section under `cls` (default instances: `values`, else `cls()`), depth first in field order; twins
    once, as `<parent>.<agent>`."""
    values = (cls(),) if values is None else values
    twins, done = _twins(cls), set()
    for f in _fields(cls):
        held = _held(cls, f.name)
        if held is None or f.name in done:
            continue
        keys = twins.get(f.name, (f.name,))
        done.update(keys)
        key = _placeholder(keys) if len(keys) > 1 else f.name
        found = tuple(v for parent in values for k in keys if (v := getattr(parent, k)) is not None)
        child = f"{path}.{key}" if path else key
        yield Section(child, held, found, keys if len(keys) > 1 else ())
        yield from sections(held, found, child)  # found is () under a default of None: class defaults then


def config_classes(root: type = NodeConfig) -> list[type]:
    """Every config dataclass reachable from `root` (itself included), each once."""
    return list(dict.fromkeys([root, *(section.cls for section in sections(root))]))


def _flow(value: Any) -> str:
    """`value` as one line of YAML (flow style, quoted where YAML would misread it)."""
    text = yaml.safe_dump(value, default_flow_style=True, sort_keys=False, width=1 << 30, allow_unicode=True)
    return text.removesuffix("\n").removesuffix("\n...")


def _config_spelling(doc: str) -> str:
    return re.sub(r"\bNone\b", "null", doc)  # the docs are Python's; config files spell it null


def _comment(text: str, pad: str, hang: str = "") -> list[str]:
    width = max(40, WIDTH - len(pad) - 2)
    return [
        f"{pad}# {line}"
        for line in textwrap.wrap(_config_spelling(text), width, subsequent_indent=hang, break_on_hyphens=False)
    ]


def _class_default(f: dataclasses.Field) -> Any:
    return f.default if f.default_factory is dataclasses.MISSING else f.default_factory()


def _none_section(cls: type, pad: str) -> list[str]:
    """The keys of a section that defaults to null, listed in comments."""
    lines = _comment(f"null, or a mapping of these keys ({cls.__name__}):", pad)
    for f in _fields(cls):
        default = _class_default(f)
        given = "(required)" if default is dataclasses.MISSING else _flow(default)
        lines += _comment(f"  {f.name}: {given} — {field_docs(cls)[f.name]}", pad, hang="      ")
    return lines


def _yaml_lines(obj: Any, pad: str = "", documented: bool = True) -> list[str]:
    """The YAML of config instance `obj`: each field's doc as a comment above it (`documented`). Of twin
    blocks (agents.main and agents.sub, learners.main and learners.sub) the first carries the docs and the
    others only their values: each block is written in full, so editing one never edits another."""
    cls, lines = type(obj), []
    twins = _twins(cls)
    for f in _fields(cls):
        value, held = getattr(obj, f.name), _held(cls, f.name)
        keys = twins.get(f.name, ())
        first = keys[0] if keys else f.name
        if not pad and lines:
            lines.append("")
        if documented:
            lines += _comment(field_docs(cls)[f.name], pad)
        if held is not None and value is None:
            lines += [*(_none_section(held, pad) if documented else []), f"{pad}{f.name}: null"]
        elif held is not None:
            lines.append(f"{pad}{f.name}:")
            twin = f.name != first
            if twin and documented:
                lines += _comment(
                    f"the same keys as {first} (documented there), with {f.name}'s own values", pad + "  "
                )
            lines += _yaml_lines(value, pad + "  ", documented=documented and not twin)
        else:
            lines.append(f"{pad}{f.name}: {_flow(value)}")
    return lines


def render_yaml(config: NodeConfig | None = None) -> str:
    """deploy/configs/default.yaml: the whole default config, each key's doc above it."""
    header = (
        "Default config of every mgrpo-node: every key, its default and what it is (`mgrpo-node --print-config` "
        "prints a resolved config; docs/reference/config.md has the same as tables). Generated from the config "
        f"dataclasses' field docstrings by `{COMMAND}` (python -m mgrpo_actors.config.reference --write): "
        "edit those, not this file."
    )
    return "\n".join([*_comment(header, ""), "", *_yaml_lines(config or NodeConfig())]) + "\n"


def _type_name(annotation: Any) -> str:
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is Literal:
        return " | ".join(str(a) for a in args)
    if origin in (typing.Union, types.UnionType):
        return " | ".join(_type_name(a) for a in args)
    if origin is not None:
        return f"{origin.__name__}[{', '.join(_type_name(a) for a in args)}]"
    if annotation is type(None):
        return "null"
    return "any" if annotation is Any else annotation.__name__


def _md_text(text: str) -> str:
    """`text` for a table cell: pipes escaped, and `<...>` escaped outside code spans (HTML to Markdown)."""
    parts = text.split("`")
    parts[::2] = [part.replace("<", "&lt;") for part in parts[::2]]
    return "`".join(parts).replace("|", "\\|")


def _code(text: str) -> str:
    return f"`{text}`".replace("|", "\\|")


def _default_cell(section: Section, f: dataclasses.Field, child: str | None) -> str:
    if child is not None:
        value = getattr(section.values[0], f.name) if section.values else None
        return f"`null`: see `{child}`" if value is None else f"see `{child}`"
    if not section.values:
        default = _class_default(f)
        return "required" if default is dataclasses.MISSING else _code(_flow(default))
    shown = [_flow(getattr(v, f.name)) for v in section.values]
    if len(set(shown)) == 1 or not section.keys:
        return _code(shown[0])
    return ", ".join(f"{key}: {_code(one)}" for key, one in zip(section.keys, shown))


def _intro(section: Section) -> str:
    module = inspect.getmodule(section.cls).__name__.replace(".", "/")  # type: ignore[union-attr]
    text = f"`{section.cls.__name__}` ({module}.py): {' '.join(inspect.cleandoc(section.cls.__doc__ or '').split())}"
    if section.keys:
        parent = section.path.rpartition(".")[0]
        named = " and ".join(f"`{parent}.{key}`" for key in section.keys)
        text += f" {named} each are one, with these fields."
    elif not section.values:
        text += " Null by default; give it as a mapping of these keys to use it."
    return _md_text(text)


def _md_section(section: Section) -> list[str]:
    cls, level = section.cls, "#" * (section.path.count(".") + 2)
    lines = [f"{level} `{section.path}`", "", _intro(section), "", "| key | type | default | what it is |"]
    lines.append("|---|---|---|---|")
    twins = _twins(cls)
    for f in _fields(cls):
        held = _held(cls, f.name)
        keys = twins.get(f.name, ())
        child = None if held is None else f"{section.path}.{_placeholder(keys) if keys else f.name}"
        cells = [_code(f.name), _code(_type_name(_hints(cls)[f.name])), _default_cell(section, f, child)]
        lines.append(f"| {' | '.join(cells)} | {_md_text(_config_spelling(field_docs(cls)[f.name]))} |")
    return [*lines, ""]


def render_markdown(config: NodeConfig | None = None) -> str:
    """docs/reference/config.md: one table per config section (key, type, default, what it is)."""
    lines = [
        "# Config reference",
        "",
        f"<!-- Generated by `{COMMAND}` (python -m mgrpo_actors.config.reference --write) from the field docstrings"
        " of the config dataclasses: edit those, not this file. -->",
        "",
        "Every key of a node's config (`mgrpo-node --config FILE`, `--set key.path=value`): its type, its default"
        " and what it is. Defaults name their source where they have one: paper (arXiv 2511.13288), reference code"
        " (the authors' implementation, as docs/method.md summarises it) or [ours]. deploy/configs/default.yaml"
        " holds the same defaults as a config file.",
        "",
    ]
    for section in sections(NodeConfig, (config or NodeConfig(),)):
        lines += _md_section(section)
    return "\n".join(lines).rstrip("\n") + "\n"


def _outputs(root: Path) -> dict[Path, str]:
    return {root / YAML_PATH: render_yaml(), root / MARKDOWN_PATH: render_markdown()}


def drifted(root: Path = REPO) -> list[Path]:
    """The generated files under `root` that are missing or differ from what the dataclasses render."""
    return [path for path, text in _outputs(root).items() if not path.is_file() or path.read_text("utf-8") != text]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m mgrpo_actors.config.reference", description=f"Render {YAML_PATH} and {MARKDOWN_PATH}."
    )
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--write", action="store_true", help=f"rewrite {YAML_PATH} and {MARKDOWN_PATH}")
    mode.add_argument("--check", action="store_true", help="exit 1 if either file differs from what is rendered")
    parser.add_argument("--root", type=Path, default=REPO, help="the repository the files are under")
    args = parser.parse_args(argv)
    if args.write:
        for path, text in _outputs(args.root).items():
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
            print(f"wrote {path}")
        return 0
    if args.check:
        stale = drifted(args.root)
        for path in stale:
            print(
                f"{path.relative_to(args.root)} is out of date with the config dataclasses: run `{COMMAND}`",
                file=sys.stderr,
            )
        return 1 if stale else 0
    sys.stdout.write(render_yaml())
    return 0


if __name__ == "__main__":
    sys.exit(main())
