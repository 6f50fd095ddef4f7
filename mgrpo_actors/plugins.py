"""Objects named in a config by import path ("package.module:attribute"): extra tools, custom engines."""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["PluginError", "import_object"]


class PluginError(ValueError):
    """An import path names nothing importable."""


def import_object(path: str, what: str = "factory") -> Any:
    """The object at "package.module:attribute"; PluginError naming the path otherwise."""
    module_name, sep, attribute = path.partition(":")
    if not sep or not module_name or not attribute:
        raise PluginError(f"{what} {path!r} must look like 'package.module:attribute'")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise PluginError(f"cannot import module {module_name!r} of {what} {path!r}: {exc}") from exc
    try:
        return getattr(module, attribute)
    except AttributeError as exc:
        raise PluginError(f"module {module_name!r} has no attribute {attribute!r} ({what} {path!r})") from exc
