"""Logging: a stdlib record's exception reaches the JSON line as its traceback text (pykka reports a failed
on_start that way; before, the line held only the repr of an (type, value, traceback) tuple)."""

from __future__ import annotations

import io
import json
import logging

import structlog

from mgrpo_actors.log import configure_logging


def test_a_stdlib_error_with_exc_info_is_logged_with_its_traceback():
    stream = io.StringIO()
    configure_logging(run_id="r", node="n", role="main-aligner", json_output=True, stream=stream)
    try:
        try:
            raise TimeoutError("consumer info timed out")
        except TimeoutError:
            logging.getLogger("pykka").error("Unhandled exception in MainAlignerActor:", exc_info=True)
        line = json.loads(stream.getvalue().strip().splitlines()[-1])
        assert line["logger"] == "pykka" and line["role"] == "main-aligner"
        assert "Traceback (most recent call last)" in line["exception"]
        assert "TimeoutError: consumer info timed out" in line["exception"]
        assert "exc_info" not in line
    finally:
        logging.getLogger().handlers = []
        structlog.reset_defaults()
