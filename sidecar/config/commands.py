"""The settings of the commands besides ``serve``: the reference store, its conformance
check, the audit commands, the console and the injection webhook. Each reuses ``serve``'s
setting where it reads the same thing (the ledger, the log, a store's TLS), so that one
environment serves both."""

from __future__ import annotations

from pathlib import Path

from sidecar.config import values
from sidecar.config.serve import Config
from sidecar.config.setting import Setting, settings_of
from sidecar.ops.http_guard import parse_allowed_hosts, parse_allowed_origins

SERVE: dict[str, Setting] = {setting.flag: setting for setting in settings_of(Config)}

AUDIT: dict[str, Setting] = {
    "--audit-db": Setting(
        "--audit-db",
        "ACTONCE_AUDIT_DB",
        Path,
        "the ledger's SQLite file (default .actonce/audit.db)",
    ),
    "--audit-dsn": SERVE["--audit-dsn"],
    "--audit-dsn-file": SERVE["--audit-dsn-file"],
    # Held by operators only, never by a sidecar: its decisions are what a sidecar obeys.
    "--operator-key": Setting(
        "--operator-key",
        "ACTONCE_OPERATOR_KEY",
        values.readable_file,
        "file holding an operator's key (32+ bytes, mode 600) that a SQLite ledger's "
        "decisions are signed with (resolve, the console) and checked against (verify)",
    ),
}

_LOG = {"--log-level": SERVE["--log-level"], "--log-format": SERVE["--log-format"]}

CONSOLE: dict[str, Setting] = {
    "--listen": Setting(
        "--listen",
        "ACTONCE_CONSOLE_LISTEN",
        values.host_port,
        "HOST:PORT the console serves on",
        "127.0.0.1:8080",
    ),
    **AUDIT,
    "--token-file": Setting(
        "--token-file",
        "ACTONCE_CONSOLE_TOKEN_FILE",
        values.readable_file,
        "file holding the operator's token: resolving needs it, and with it the console "
        "may serve beyond loopback",
    ),
    "--allowed-hosts": Setting(
        "--allowed-hosts",
        "ACTONCE_CONSOLE_ALLOWED_HOSTS",
        parse_allowed_hosts,
        "NAME or NAME:PORT that browsers may name in Host, besides the loopback names; "
        "needed to serve beyond loopback; repeatable",
        (),
        repeatable=True,
    ),
    "--allowed-origins": Setting(
        "--allowed-origins",
        "ACTONCE_CONSOLE_ALLOWED_ORIGINS",
        parse_allowed_origins,
        "SCHEME://NAME[:PORT] of pages that may send requests, besides loopback pages and "
        "the allowed hosts' own (behind a proxy that rewrites Host, say); repeatable",
        (),
        repeatable=True,
    ),
    "--operator-header": Setting(
        "--operator-header",
        "ACTONCE_CONSOLE_OPERATOR_HEADER",
        values.header_name,
        "header in which a sign-in proxy names the signed-in operator (e.g. "
        "X-Forwarded-Email): a decision records that name, and resolving needs it; trusted "
        "only when set, and the proxy must strip it from clients' requests",
    ),
    "--api-token-file": Setting(
        "--api-token-file",
        "ACTONCE_API_TOKEN_FILE",
        values.readable_file,
        "file holding the API token: every request needs it (as 'authorization: Bearer "
        "TOKEN', or signed in), on top of the rules above; read again when it changes",
    ),
    "--trace-url-template": Setting(
        "--trace-url-template",
        "ACTONCE_CONSOLE_TRACE_URL_TEMPLATE",
        values.trace_url_template,
        "URL of a trace in your trace viewer, with {trace_id} where its id goes (e.g. "
        "http://jaeger:16686/trace/{trace_id}): each traced event links to it",
    ),
    **_LOG,
}

STORE: dict[str, Setting] = {
    "--listen": Setting(
        "--listen",
        "ACTONCE_STORE_LISTEN",
        values.listen,
        "where the store listens: HOST:PORT or unix:PATH",
        "127.0.0.1:50052",
    ),
    "--data-dir": Setting(
        "--data-dir",
        "ACTONCE_STORE_DATA_DIR",
        Path,
        "folder for the store's SQLite file",
        Path(".actonce-store"),
    ),
    "--store-dsn": SERVE["--store-dsn"],
    "--store-dsn-file": SERVE["--store-dsn-file"],
    # The same variable as the sidecar's --store-token-file: both sides read one Secret.
    "--token-file": Setting(
        "--token-file",
        "ACTONCE_STORE_TOKEN_FILE",
        values.readable_file,
        "file holding the bearer token every store call must carry; without it the store "
        "takes calls from anyone who reaches it",
    ),
    "--tls-cert": Setting(
        "--tls-cert",
        "ACTONCE_STORE_SERVER_CERT",
        values.readable_file,
        "PEM file of the store's certificate: serve TLS only",
    ),
    "--tls-key": Setting(
        "--tls-key",
        "ACTONCE_STORE_SERVER_KEY",
        values.readable_file,
        "PEM file of the key of --tls-cert",
    ),
    "--tls-client-ca": Setting(
        "--tls-client-ca",
        "ACTONCE_STORE_CLIENT_CA",
        values.readable_file,
        "PEM file of the CA whose client certificates alone get in: mutual TLS",
    ),
    **_LOG,
}

# actonce store check: the same variables as the sidecar's --store-* flags, so that in a
# sidecar's environment it checks the store that sidecar calls.
CHECK: dict[str, Setting] = {
    "--target": SERVE["--store-target"].renamed(
        "--target", "HOST:PORT or unix:PATH of the store to check"
    ),
    "--tls-ca": SERVE["--store-tls-ca"].renamed(
        "--tls-ca", "PEM file of the CA that signed the store's certificate: TLS to the store"
    ),
    "--tls-cert": SERVE["--store-tls-cert"].renamed(
        "--tls-cert", "PEM file of a client certificate: mutual TLS"
    ),
    "--tls-key": SERVE["--store-tls-key"].renamed("--tls-key", "PEM file of the key of --tls-cert"),
    "--token-file": SERVE["--store-token-file"].renamed(
        "--token-file",
        "file holding the bearer token the store expects; with it, a call without it must "
        "be FORBIDDEN",
    ),
    "--timeout": Setting(
        "--timeout",
        "ACTONCE_STORE_TIMEOUT",
        values.positive_float,
        "seconds each call, and reaching the store, may take",
        10.0,
    ),
}

# actonce store assign-owners: the ledger as `actonce audit` reads it, the store's database.
ASSIGN_OWNERS: dict[str, Setting] = {
    "--store-db": Setting(
        "--store-db",
        "ACTONCE_STORE_DB",
        Path,
        "the store's SQLite file: a sidecar's data folder's audit.db (its embedded store), or "
        "store.db in the folder of `actonce store`",
    ),
    "--store-dsn": SERVE["--store-dsn"],
    "--store-dsn-file": SERVE["--store-dsn-file"],
    **AUDIT,
}

# actonce inject: the admission webhook that adds the sidecar to annotated pods.
INJECT: dict[str, Setting] = {
    "--listen": Setting(
        "--listen",
        "ACTONCE_INJECT_LISTEN",
        values.host_port,
        "HOST:PORT the webhook serves HTTPS on (the Service's target port)",
        "127.0.0.1:8443",
    ),
    "--tls-cert": Setting(
        "--tls-cert",
        "ACTONCE_INJECT_TLS_CERT",
        values.readable_file,
        "PEM file of the webhook's certificate, for the name the API server calls (the "
        "Service's DNS name); read again when it changes (required: the API server calls "
        "webhooks over TLS alone)",
    ),
    "--tls-key": Setting(
        "--tls-key",
        "ACTONCE_INJECT_TLS_KEY",
        values.readable_file,
        "PEM file of the key of --tls-cert (required)",
    ),
    "--image": Setting(
        "--image",
        "ACTONCE_INJECT_IMAGE",
        str,
        "the image of the sidecar the webhook adds (default the kustomize Component's); "
        "the webhook's own image, as its manifests set it",
    ),
    **_LOG,
}

# What the agent beside the sidecar reads (its clients, and their test harness): a sidecar
# and its agent may share one env file, so these are no typo of a setting here.
CLIENT_VARIABLES = frozenset({"ACTONCE_TARGET", "ACTONCE_API_TOKEN", "ACTONCE_BIN"})


def known_variables() -> frozenset[str]:
    """Every ACTONCE_* variable a command or the agent beside it reads."""
    tables = (SERVE, STORE, CONSOLE, AUDIT, CHECK, ASSIGN_OWNERS, INJECT)
    return frozenset(s.env for table in tables for s in table.values()) | CLIENT_VARIABLES
