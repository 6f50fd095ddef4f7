"""Logging through structlog, configured once per process.

JSON lines when stderr is not a terminal, readable lines otherwise. Every line carries the run id,
the node name and the role (an actor binds its own role; process-level lines carry the node's roles).
"""

from __future__ import annotations

import logging
import sys
from typing import Any, TextIO

import structlog

__all__ = ["configure_logging", "get_logger"]

_CONTEXT: dict[str, str] = {"run_id": "", "node": "", "role": ""}
_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING, "error": logging.ERROR}


def _add_context(logger: Any, method: str, event_dict: dict[str, Any]) -> dict[str, Any]:
    for key, value in _CONTEXT.items():
        event_dict.setdefault(key, value)
    return event_dict


class _CurrentStderr:
    """Writes to whatever `sys.stderr` is when a line is written, not when logging was configured: a
    command run in-process under a test's captured stderr must not leave logging bound to a stream that
    is closed once the test ends."""

    def write(self, text: str) -> int:
        return sys.stderr.write(text)

    def flush(self) -> None:
        sys.stderr.flush()

    def isatty(self) -> bool:
        return sys.stderr.isatty()


def configure_logging(
    *,
    run_id: str = "",
    node: str = "",
    role: str = "",
    level: str = "info",
    json_output: bool | None = None,
    stream: TextIO | None = None,
) -> None:
    """Configure structlog for this process (call again to change the context, e.g. in tests)."""
    if level not in _LEVELS:
        raise ValueError(f"log level {level!r} is invalid: expected one of {', '.join(_LEVELS)}")
    stream = stream or _CurrentStderr()
    _CONTEXT.update(run_id=run_id, node=node, role=role)
    if json_output is None:
        json_output = not (hasattr(stream, "isatty") and stream.isatty())
    renderer: Any = structlog.processors.JSONRenderer() if json_output else structlog.dev.ConsoleRenderer(colors=False)
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            _add_context,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(_LEVELS[level]),
        logger_factory=structlog.PrintLoggerFactory(file=stream),
        cache_logger_on_first_use=False,
    )
    # Libraries that use stdlib logging (nats-py, transformers, asyncio) go to the same stream, in the
    # same format and with the same run/node/role fields; warnings and above only.
    handler = logging.StreamHandler(stream)
    # On the handler, not only the root logger: some libraries (bm25s) set their own loggers to DEBUG on import.
    handler.setLevel(logging.WARNING)
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            processor=renderer,
            foreign_pre_chain=[
                _add_context,
                structlog.stdlib.add_logger_name,
                structlog.processors.add_log_level,
                structlog.processors.TimeStamper(fmt="iso", utc=True),
                # A stdlib record's exc_info (pykka's "Unhandled exception in ...") as its traceback text, not the
                # repr of an (type, value, traceback) tuple.
                structlog.processors.format_exc_info,
            ],
        )
    )
    root = logging.getLogger()
    root.handlers = [handler]
    root.setLevel(logging.WARNING)


def get_logger(name: str = "mgrpo", **bound: Any) -> Any:
    """A structlog logger; `bound` values appear on every line it writes."""
    return structlog.get_logger(name).bind(**bound) if bound else structlog.get_logger(name)


def quiet_libraries() -> None:
    """Keep library chatter (weight-loading bars, DeepSpeed's info and accelerator notes) off a live view."""
    from transformers.utils import logging as transformers_logging

    transformers_logging.disable_progress_bar()
    logging.getLogger("DeepSpeed").setLevel(logging.ERROR)
