"""Versions a node reports in its NodeInfo (and `mgrpo-node --version` prints)."""

from __future__ import annotations

import platform
from importlib import metadata

from protocols import SCHEMA_VERSION

__all__ = ["package_versions"]

_PACKAGES = ("mgrpo-actors", "nats-py", "pykka", "msgpack", "torch", "transformers", "deepspeed")


def package_versions() -> dict[str, str]:
    versions = {"python": platform.python_version(), "schema": str(SCHEMA_VERSION)}
    for name in _PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = "not installed"
    return versions
