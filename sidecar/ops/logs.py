"""structlog set-up: JSON lines in production, the console renderer in a terminal.

Every call binds run, attempt, RPC and derived id into contextvars (see
sidecar.fronts.grpc.interceptors and sidecar.core.actions); ``merge_contextvars`` comes first
so each line carries them. Lines carry digests, never payloads.

The libraries' own logging (uvicorn's above all: "Exception in ASGI application" and its
traceback) goes through the same renderer, so that a JSON log never holds a line that is
not JSON; a traceback is one field of one line.
"""

from __future__ import annotations

import logging
import sys

import structlog


def configure(level: str = "info", fmt: str = "auto") -> None:
    """Configure structlog once for the process. ``fmt``: json, console or auto."""
    use_console = fmt == "console" or (fmt == "auto" and sys.stderr.isatty())
    renderer: structlog.typing.Processor = (
        structlog.dev.ConsoleRenderer() if use_console else structlog.processors.JSONRenderer()
    )
    stamp = structlog.processors.TimeStamper(fmt="iso", utc=True)
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            stamp,
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(
            logging.getLevelNamesMapping()[level.upper()]
        ),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=True,
    )
    _route_standard_logging(level, renderer, stamp)


def _route_standard_logging(
    level: str, renderer: structlog.typing.Processor, stamp: structlog.typing.Processor
) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            foreign_pre_chain=[
                structlog.contextvars.merge_contextvars,
                structlog.processors.add_log_level,
                structlog.stdlib.add_logger_name,
                stamp,
            ],
            processors=[
                structlog.stdlib.ProcessorFormatter.remove_processors_meta,
                structlog.processors.format_exc_info,
                renderer,
            ],
        )
    )
    root = logging.getLogger()
    root.handlers = [handler]
    # Warnings and worse, as before they were routed here: the libraries' info lines
    # (uvicorn's start-up, the MCP SDK's every request) are theirs, not the sidecar's.
    root.setLevel(max(logging.WARNING, logging.getLevelNamesMapping()[level.upper()]))
