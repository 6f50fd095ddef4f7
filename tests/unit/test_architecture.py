"""The layering (docs/architecture.md, the layout), checked on the source: actors -> mgrpo_actors ->
protocols; mgrpo_actors in packages by stage of a training step, with no `pipeline/` layer between the
role shells and the logic; actors/ only the composition root and one module per role; no import
circles inside a package, no module over 400 lines (imports under TYPE_CHECKING count too: a circle of
type-only imports is still a circle a reader has to untangle)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.helpers import REPO

PACKAGES = ("protocols", "mgrpo_actors", "actors")


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for package in PACKAGES for p in (REPO / package).rglob("*.py")}


def _imports(path: Path, modules: dict[str, Path]) -> set[str]:
    """Our modules that `path` imports (a `from pkg import name` counts `pkg.name` if that is a module)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return {name for name in found if name in modules}


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    return {name: _imports(path, modules) for name, path in modules.items()}


def test_dependencies_point_one_way():
    rank = {"protocols": 0, "mgrpo_actors": 1, "actors": 2}
    upward = [
        f"{module} imports {target}"
        for module, targets in _graph().items()
        for target in targets
        if rank[target.split(".")[0]] > rank[module.split(".")[0]]
    ]
    assert not upward, upward


def _cycle_from(start: str, graph: dict[str, set[str]]) -> list[str] | None:
    """A cycle through `start` among modules that are not packages' __init__ re-exports."""
    stack = [(start, [start])]
    seen = set()
    while stack:
        node, path = stack.pop()
        for nxt in graph.get(node, ()):
            if nxt == start:
                return [*path, start]
            if nxt not in seen:
                seen.add(nxt)
                stack.append((nxt, [*path, nxt]))
    return None


def _packages() -> list[str]:
    return sorted(name for name, path in _modules().items() if path.name == "__init__.py")


@pytest.mark.parametrize("package", _packages())
def test_no_import_circles(package):
    packages = set(_packages())
    graph = {m: {t for t in targets if t not in packages} for m, targets in _graph().items() if m not in packages}
    cycles = [c for m in graph if m.startswith(f"{package}.") and (c := _cycle_from(m, graph))]
    assert not cycles, cycles[0]


# The stages of a training step, each a package of mgrpo_actors holding its logic and its bus glue.
STAGES = ("controller", "rollout", "alignment", "learner", "weights", "monitoring")


def test_packages_by_stage_and_no_pipeline_layer():
    packages = set(_packages())
    assert "mgrpo_actors.pipeline" not in packages
    assert {f"mgrpo_actors.{stage}" for stage in STAGES} <= packages


# actors/: the composition root (the node, its role table, the `mgrpo` entry, the node's own ping
# answerer), the role modules named in the role table, and the two bases their shells share.
COMPOSITION_ROOT = {"actors", "actors.cli", "actors.node", "actors.node_checks", "actors.node_info", "actors.roles"}
ROLE_BASES = {"actors.agent", "actors.aligner"}


def test_actors_holds_only_the_composition_root_and_the_roles():
    from actors.roles import ROLES

    role_modules = {spec.start.partition(":")[0] for spec in ROLES.values()}
    actors_modules = {name for name in _modules() if name.split(".")[0] == "actors"}
    assert actors_modules - COMPOSITION_ROOT - ROLE_BASES - role_modules == set()


def test_no_module_over_400_lines():
    long = {name: n for name, path in _modules().items() if (n := len(path.read_text().splitlines())) > 400}
    assert not long, long


def test_every_built_role_names_an_importable_start_function():
    import importlib

    from actors.roles import ROLES, START_ORDER

    assert set(START_ORDER) == set(ROLES)
    for spec in ROLES.values():
        if spec.start is not None:
            module, _, function = spec.start.partition(":")
            assert callable(getattr(importlib.import_module(module), function)), spec.start
