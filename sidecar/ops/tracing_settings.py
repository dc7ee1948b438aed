"""Whether the environment asks for traces, told without loading OpenTelemetry.

The sidecar traces only when the standard ``OTEL_*`` variables ask for it; no
``ACTONCE_*`` setting is involved. With none of them set, :mod:`sidecar.ops.tracing`
(and the OpenTelemetry SDK with it) is never imported.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

# The variables that ask for traces; any other OTEL_* variable only shapes them.
ASKING = (
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    "OTEL_TRACES_EXPORTER",
)
# What `actonce serve --help` and docs/traces.md list: the variables read, by the SDK's own
# reading of the environment, once traces are asked for.
READ = (
    *ASKING,
    "OTEL_SERVICE_NAME",
    "OTEL_RESOURCE_ATTRIBUTES",
    "OTEL_TRACES_SAMPLER",
    "OTEL_TRACES_SAMPLER_ARG",
    "OTEL_EXPORTER_OTLP_PROTOCOL",
    "OTEL_EXPORTER_OTLP_HEADERS",
    "OTEL_EXPORTER_OTLP_INSECURE",
    "OTEL_EXPORTER_OTLP_CERTIFICATE",
    "OTEL_EXPORTER_OTLP_TIMEOUT",
    "OTEL_EXPORTER_OTLP_COMPRESSION",
    "OTEL_BSP_SCHEDULE_DELAY",
    "OTEL_BSP_MAX_QUEUE_SIZE",
    "OTEL_BSP_MAX_EXPORT_BATCH_SIZE",
    "OTEL_PROPAGATORS",
    "OTEL_SDK_DISABLED",
)


class TracingSettingError(ValueError):
    """An OTEL_* variable asks for something this sidecar cannot do."""


def requested(environ: Mapping[str, str] = os.environ) -> bool:
    """True when the environment asks for traces: an OTLP endpoint, or a traces exporter
    other than ``none``; ``OTEL_SDK_DISABLED=true`` keeps them off whatever else is set."""
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    exporter = environ.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    if exporter == "none":
        return False
    return any(environ.get(name, "").strip() for name in ASKING)


def exporter(environ: Mapping[str, str] = os.environ) -> str:
    """The traces exporter asked for, ``otlp`` (over gRPC) or ``console``; raises
    TracingSettingError for one this sidecar does not offer, so that start-up stops
    with one clear line."""
    name = environ.get("OTEL_TRACES_EXPORTER", "").strip().lower() or "otlp"
    if name not in ("otlp", "console"):
        raise TracingSettingError(
            f"OTEL_TRACES_EXPORTER={name!r} is not offered: use otlp, console or none"
        )
    protocol = (
        environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
        or environ.get("OTEL_EXPORTER_OTLP_PROTOCOL")
        or "grpc"
    ).strip()
    if name == "otlp" and protocol != "grpc":
        raise TracingSettingError(
            f"OTEL_EXPORTER_OTLP_PROTOCOL={protocol!r} is not offered: traces leave over grpc"
        )
    return name


def check(environ: Mapping[str, str] = os.environ) -> None:
    """Stop start-up (TracingSettingError) when traces are asked for in a way not offered."""
    if requested(environ):
        exporter(environ)


EPILOG = (
    "OpenTelemetry traces are off unless the environment asks for them: "
    "OTEL_EXPORTER_OTLP_ENDPOINT (or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, or "
    "OTEL_TRACES_EXPORTER=otlp|console) turns them on; OTEL_SDK_DISABLED=true or "
    "OTEL_TRACES_EXPORTER=none keeps them off. Spans leave as OTLP over gRPC. Also read, "
    "as the OpenTelemetry SDK reads them: "
    + ", ".join(name for name in READ if name not in ASKING and name != "OTEL_SDK_DISABLED")
    + "."
)
