"""Where the client finds its sidecar: the ``target`` given, else ``ACTONCE_TARGET`` (which
the deploy manifests set for the agent's container), in gRPC's form.

gRPC's form is ``HOST:PORT`` (``127.0.0.1:50051``) or a resolver's scheme
(``unix:///run/actonce.sock``, ``dns:///sidecar:50051``). A URL such as
``http://127.0.0.1:50051`` is not one: gRPC would take all of it for a host name and
answer UNAVAILABLE, which a queue retries for ever. It is refused here, at once, as a
setting that cannot work (InvalidSetting, PERMANENT), saying what to write instead.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from actonce_client.errors import InvalidSetting

TARGET_VARIABLE = "ACTONCE_TARGET"

# The name resolvers gRPC's own clients know: a target with another scheme is a URL.
GRPC_SCHEMES = frozenset(
    {"dns", "unix", "unix-abstract", "ipv4", "ipv6", "vsock", "xds", "passthrough"}
)


def resolve(target: str | None, environ: Mapping[str, str] = os.environ) -> str:
    """The target to dial: ``target`` when given, else ``ACTONCE_TARGET``; checked."""
    if target is not None:
        return checked(target, "target")
    found = environ.get(TARGET_VARIABLE, "")
    if not found:
        raise InvalidSetting(
            TARGET_VARIABLE,
            "no target was given and it is not set: give the sidecar's HOST:PORT, as "
            "its --listen says (127.0.0.1:50051 by default)",
        )
    return checked(found, TARGET_VARIABLE)


def checked(target: str, setting: str) -> str:
    """``target`` when gRPC can dial it; else InvalidSetting naming ``setting``."""
    if not target.strip():
        raise InvalidSetting(setting, "is empty: write the sidecar's HOST:PORT")
    scheme, sep, rest = target.partition("://")
    if sep and scheme.lower() not in GRPC_SCHEMES:
        hostport = rest.split("/", 1)[0] or "HOST:PORT"
        raise InvalidSetting(
            setting,
            f"{target!r} is a URL, not a gRPC target: write HOST:PORT ({hostport}), "
            "with no scheme, or unix:///path for a socket",
        )
    return target
