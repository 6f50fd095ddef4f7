"""The flags every command that builds a node config shares: `--config`, `--set`, and the agents'
model shortcuts `--main` / `--sub`, which stand for `--set agents.<side>.model=SPEC`."""

from __future__ import annotations

import argparse
from typing import Any

__all__ = ["add_config_arguments", "model_overrides"]


def add_config_arguments(p: argparse.ArgumentParser, config_help: str, main_help: str, sub_help: str, set_help: str = "override a config key") -> None:
    """--config FILE, --set KEY=VALUE (repeatable, into `args.overrides`), --main SPEC, --sub SPEC."""
    p.add_argument("--config", metavar="FILE", help=config_help)
    p.add_argument("--set", action="append", default=[], dest="overrides", metavar="KEY=VALUE", help=set_help)
    p.add_argument("--main", metavar="SPEC", help=main_help)
    p.add_argument("--sub", metavar="SPEC", help=sub_help)


def model_overrides(args: Any) -> list[str]:
    """`agents.<side>.model=SPEC` for each of --main / --sub given (after --set, so they win)."""
    return [f"agents.{side}.model={spec}" for side, spec in (("main", args.main), ("sub", args.sub)) if spec is not None]
