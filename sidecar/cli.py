"""The ``actonce`` command: ``serve`` (the sidecar) and ``store`` (the reference store alone).

Every flag has an ``ACTONCE_*`` environment variable; a flag given on the
command line wins. A malformed setting stops start-up with one line on
stderr and exit code 2, never a traceback.

Longer than most modules, on purpose: each command's flags are one table (flag,
variable, parser, default, help) that a reader scans top to bottom, and the
value parsers they name sit beside them.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import sqlite3
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NoReturn

from sidecar import defaults, extras, version
from sidecar.config import Config
from sidecar.ops import logs, tracing_settings
from sidecar.ops.http_guard import (
    beyond_loopback_problem,
    parse_allowed_hosts,
    parse_allowed_origins,
)


class ConfigError(Exception):
    """A setting that cannot be used; its message is the one line the user sees."""


def _env(name: str) -> str | None:
    value = os.environ.get(name)
    return value if value not in (None, "") else None


def _positive_float(text: str) -> float:
    value = float(text)
    if value <= 0:
        raise ValueError("must be greater than 0")
    return value


def _positive_int(text: str) -> int:
    value = int(text)
    if value <= 0:
        raise ValueError("must be greater than 0")
    return value


def _listen(text: str) -> str:
    if text.startswith("unix:"):
        if len(text) <= len("unix:"):
            raise ValueError("unix: needs a path")
        return text
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError("expected HOST:PORT or unix:PATH")
    return text


def _dsn(text: str) -> str:
    if not text.startswith(("postgresql://", "postgres://")):
        raise ValueError("expected a postgresql:// DSN")
    return text


def _dsn_file(text: str) -> str:
    # A Secret mounted as a file: the DSN, with its password, is in no flag, variable or
    # pod spec. Read at start-up, so that a missing mount stops the sidecar with its path.
    path = _readable_file(text)
    try:
        return _dsn(path.read_text(encoding="utf-8").strip())
    except ValueError:
        raise ValueError("holds no postgresql:// DSN") from None


def _host_port(text: str) -> str:
    # An HTTP endpoint (metrics) cannot take a Unix socket the way gRPC can.
    if text.startswith("unix:"):
        raise ValueError("expected HOST:PORT")
    return _listen(text)


def _readable_file(text: str) -> Path:
    # Checked at start-up so that a missing Secret mount stops the sidecar with its
    # path named, not at the first store call.
    path = Path(text)
    if not path.is_file():
        raise ValueError("no such file")
    if not os.access(path, os.R_OK):
        raise ValueError("not readable")
    return path


def _allowlist(text: str) -> frozenset[str]:
    return frozenset(rule.strip() for rule in text.split(",") if rule.strip())


def _rules(text: str) -> frozenset[str]:
    rules = _allowlist(text)
    if not rules:
        # An empty pin would refuse every attempt; unset means "any rule" instead.
        raise ValueError("names no rule (leave it unset to serve any rule)")
    return rules


def _named(parse_value: Callable[[str], Any]) -> Callable[[str], dict[str, Any]]:
    """Comma-separated NAME=VALUE pairs (a repeated flag's values are joined by commas)."""

    def parse(text: str) -> dict[str, Any]:
        pairs: dict[str, Any] = {}
        for item in (part.strip() for part in text.split(",")):
            if not item:
                continue
            name, sep, value = item.partition("=")
            if not sep or not name or "__" in name:
                raise ValueError(f"{item!r}: expected NAME=VALUE, NAME without '__'")
            if name in pairs:
                raise ValueError(f"{name} is named twice")
            pairs[name] = parse_value(value)
        return pairs

    return parse


def _http_url(text: str) -> str:
    if not text.startswith(("http://", "https://")):
        raise ValueError("expected an http:// or https:// URL (Streamable HTTP)")
    return text


def _id_scheme(text: str) -> int:
    if text not in ("1", "2"):
        raise ValueError("expected 1 or 2")
    return int(text)


def _trace_url_template(value: str) -> str:
    if not value.startswith(("http://", "https://")):
        raise ValueError("expected an http:// or https:// URL")
    if "{trace_id}" not in value:
        raise ValueError("names no {trace_id}")
    return value


_TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")


def _header_name(text: str) -> str:
    if not _TOKEN.fullmatch(text):
        raise ValueError("expected an HTTP header's name, such as X-Forwarded-Email")
    return text.lower()


def _exempt(text: str) -> frozenset[str]:
    from sidecar.ops.auth import parse_exempt

    return parse_exempt(text)


def _choice(*allowed: str) -> Callable[[str], str]:
    def parse(text: str) -> str:
        if text not in allowed:
            raise ValueError(f"expected one of {', '.join(allowed)}")
        return text

    return parse


# flag -> (environment variable, parser, default, help)
Setting = tuple[str, Callable[[str], Any], Any, str]

SERVE_SETTINGS: dict[str, Setting] = {
    "--listen": ("ACTONCE_LISTEN", _listen, defaults.LISTEN,
                 "where the sidecar listens: HOST:PORT or unix:PATH"),
    "--data-dir": ("ACTONCE_DATA_DIR", Path, defaults.DATA_DIR,
                   "folder for the embedded store and, by default, the ledger"),
    "--audit-db": ("ACTONCE_AUDIT_DB", Path, None,
                   "the audit ledger's SQLite file (default DATA_DIR/audit.db)"),
    "--audit-dsn": ("ACTONCE_AUDIT_DSN", _dsn, None,
                    "PostgreSQL DSN of a ledger shared by many sidecars, instead of --audit-db"),
    "--audit-dsn-file": ("ACTONCE_AUDIT_DSN_FILE", _dsn_file, None,
                         "file holding --audit-dsn's DSN (a Secret mount), instead of it"),
    "--store-target": ("ACTONCE_STORE_TARGET", _listen, None,
                       "HOST:PORT or unix:PATH of an external store, instead of the embedded one"),
    "--store-dsn": ("ACTONCE_STORE_DSN", _dsn, None,
                    "PostgreSQL DSN for the reference store's data, instead of DATA_DIR"),
    "--store-dsn-file": ("ACTONCE_STORE_DSN_FILE", _dsn_file, None,
                         "file holding --store-dsn's DSN (a Secret mount), instead of it"),
    "--send-allowlist": ("ACTONCE_SEND_ALLOWLIST", _allowlist, frozenset(),
                         "comma-separated rules allowed to Send (ask for a thread's turn)"),
    "--rules": ("ACTONCE_RULES", _rules, None,
                "comma-separated rules this sidecar serves; BeginAttempt for any other is "
                "refused FORBIDDEN (default: any rule)"),
    "--store-timeout": ("ACTONCE_STORE_TIMEOUT", _positive_float, defaults.STORE_TIMEOUT_SECONDS,
                        "seconds a store call may take"),
    "--store-tls-ca": ("ACTONCE_STORE_TLS_CA", _readable_file, None,
                       "PEM file of the CA that signed the external store's certificate: "
                       "TLS to the store"),
    "--store-tls-cert": ("ACTONCE_STORE_TLS_CERT", _readable_file, None,
                         "PEM file of this sidecar's client certificate: mutual TLS"),
    "--store-tls-key": ("ACTONCE_STORE_TLS_KEY", _readable_file, None,
                        "PEM file of the key of --store-tls-cert"),
    "--store-token-file": ("ACTONCE_STORE_TOKEN_FILE", _readable_file, None,
                           "file holding the bearer token the external store expects "
                           "(the token itself is never taken from a flag)"),
    "--api-token-file": ("ACTONCE_API_TOKEN_FILE", _readable_file, None,
                         "file holding the API token every caller must send as "
                         "'authorization: Bearer TOKEN' (gRPC and the MCP front); read again "
                         "when it changes (off by default)"),
    "--api-token-exempt": ("ACTONCE_API_TOKEN_EXEMPT", _exempt, None,
                           "gRPC services open without the API token: health, reflection, "
                           "both comma-separated, or none (default health,reflection)"),
    "--audit-busy-timeout-ms": ("ACTONCE_AUDIT_BUSY_TIMEOUT_MS", _positive_int,
                                defaults.AUDIT_BUSY_TIMEOUT_MS,
                                "ms a ledger append waits for a locked ledger"),
    "--id-scheme": ("ACTONCE_ID_SCHEME", _id_scheme, defaults.ID_SCHEME,
                    "derived-id scheme version of new runs (1 or 2); a run keeps the one "
                    "it began with"),
    "--attempt-idle-ttl": ("ACTONCE_ATTEMPT_IDLE_TTL", _positive_float,
                           defaults.ATTEMPT_IDLE_TTL_SECONDS,
                           "seconds after which an idle attempt is forgotten"),
    "--attempt-max-count": ("ACTONCE_ATTEMPT_MAX_COUNT", _positive_int, defaults.ATTEMPT_MAX_COUNT,
                            "live attempts kept at most; past it the least recently used "
                            "is forgotten (its calls get UNKNOWN_ATTEMPT)"),
    "--attempt-max-mib": ("ACTONCE_ATTEMPT_MAX_MIB", _positive_int, defaults.ATTEMPT_MAX_MIB,
                          "MiB that live attempts may take, approximately; past it the "
                          "least recently used are forgotten"),
    "--grace-period": ("ACTONCE_GRACE_PERIOD", _positive_float, 10.0,
                       "seconds the drain on SIGTERM takes at most (calls, then closing)"),
    "--health-listen": ("ACTONCE_HEALTH_LISTEN", _listen, None,
                        "HOST:PORT or unix:PATH answering grpc.health.v1 alone, for probes "
                        "from outside the pod (off by default)"),
    "--metrics-listen": ("ACTONCE_METRICS_LISTEN", _host_port, None,
                         "HOST:PORT serving Prometheus metrics at /metrics (off by default)"),
    "--mcp-listen": ("ACTONCE_MCP_LISTEN", _host_port, None,
                     "HOST:PORT serving the writes and reads as MCP tools over Streamable HTTP "
                     "at /mcp (off by default)"),
    "--mcp-upstream": ("ACTONCE_MCP_UPSTREAM", _named(_http_url), {},
                       "NAME=URL of an MCP server whose tools are listed as NAME__tool and "
                       "called once per run; repeatable (comma-separated in the variable)"),
    "--mcp-upstream-headers": ("ACTONCE_MCP_UPSTREAM_HEADERS", _named(_readable_file), {},
                               "NAME=FILE: a file of 'Header: value' lines sent to that "
                               "upstream (tokens); repeatable"),
    "--tool-effects": ("ACTONCE_TOOL_EFFECTS", _readable_file, None,
                       "JSON or YAML map from NAME__tool to a ToolEffect value name, or to "
                       "{effect, idempotency_key, errors_mean_nothing_happened}; a tool it "
                       "does not name is TOOL_EFFECT_NON_IDEMPOTENT_WRITE"),
    "--mcp-upstream-timeout": ("ACTONCE_MCP_UPSTREAM_TIMEOUT", _positive_float,
                               defaults.MCP_UPSTREAM_TIMEOUT_SECONDS,
                               "seconds the gateway waits for an upstream's answer; a call "
                               "sent and not answered in time is UPSTREAM_FAILED"),
    "--mcp-allowed-hosts": ("ACTONCE_MCP_ALLOWED_HOSTS", parse_allowed_hosts, (),
                            "NAME or NAME:PORT that callers of the MCP front may name in Host, "
                            "besides the loopback names; needed to listen beyond loopback; "
                            "repeatable (comma-separated)"),
    "--mcp-allowed-origins": ("ACTONCE_MCP_ALLOWED_ORIGINS", parse_allowed_origins, (),
                              "SCHEME://NAME[:PORT] of web pages that may send requests, "
                              "besides loopback pages and the allowed hosts' own (behind a "
                              "proxy that rewrites Host, say); repeatable"),
    "--log-level": ("ACTONCE_LOG_LEVEL", _choice("debug", "info", "warning", "error"), "info",
                    "debug, info, warning or error"),
    "--log-format": ("ACTONCE_LOG_FORMAT", _choice("auto", "json", "console"), "auto",
                     "json, console, or auto (console in a terminal)"),
}  # fmt: skip
# Flags that may be given more than once.
REPEATABLE = frozenset({
    "--mcp-upstream", "--mcp-upstream-headers", "--mcp-allowed-hosts", "--mcp-allowed-origins",
    "--allowed-hosts", "--allowed-origins",
})  # fmt: skip

AUDIT_SETTINGS: dict[str, Setting] = {
    "--audit-db": ("ACTONCE_AUDIT_DB", Path, None,
                   "the ledger's SQLite file (default .actonce/audit.db)"),
    "--audit-dsn": SERVE_SETTINGS["--audit-dsn"],
    "--audit-dsn-file": SERVE_SETTINGS["--audit-dsn-file"],
}  # fmt: skip

CONSOLE_SETTINGS: dict[str, Setting] = {
    "--listen": ("ACTONCE_CONSOLE_LISTEN", _host_port, "127.0.0.1:8080",
                 "HOST:PORT the console serves on"),
    **AUDIT_SETTINGS,
    "--token-file": ("ACTONCE_CONSOLE_TOKEN_FILE", _readable_file, None,
                     "file holding the operator's token: resolving needs it, and with it "
                     "the console may serve beyond loopback"),
    "--allowed-hosts": ("ACTONCE_CONSOLE_ALLOWED_HOSTS", parse_allowed_hosts, (),
                        "NAME or NAME:PORT that browsers may name in Host, besides the "
                        "loopback names; needed to serve beyond loopback; repeatable"),
    "--allowed-origins": ("ACTONCE_CONSOLE_ALLOWED_ORIGINS", parse_allowed_origins, (),
                          "SCHEME://NAME[:PORT] of pages that may send requests, besides "
                          "loopback pages and the allowed hosts' own (behind a proxy that "
                          "rewrites Host, say); repeatable"),
    "--operator-header": ("ACTONCE_CONSOLE_OPERATOR_HEADER", _header_name, None,
                          "header in which a sign-in proxy names the signed-in operator "
                          "(e.g. X-Forwarded-Email): a decision records that name, and "
                          "resolving needs it; trusted only when set, and the proxy must "
                          "strip it from clients' requests"),
    "--api-token-file": ("ACTONCE_API_TOKEN_FILE", _readable_file, None,
                         "file holding the API token: every request needs it (as "
                         "'authorization: Bearer TOKEN', or signed in), on top of the rules "
                         "above; read again when it changes"),
    "--trace-url-template": ("ACTONCE_CONSOLE_TRACE_URL_TEMPLATE", _trace_url_template, None,
                             "URL of a trace in your trace viewer, with {trace_id} where its "
                             "id goes (e.g. http://jaeger:16686/trace/{trace_id}): each traced "
                             "event links to it"),
    "--log-level": SERVE_SETTINGS["--log-level"],
    "--log-format": SERVE_SETTINGS["--log-format"],
}  # fmt: skip

STORE_SETTINGS: dict[str, Setting] = {
    "--listen": ("ACTONCE_STORE_LISTEN", _listen, "127.0.0.1:50052",
                 "where the store listens: HOST:PORT or unix:PATH"),
    "--data-dir": ("ACTONCE_STORE_DATA_DIR", Path, Path(".actonce-store"),
                   "folder for the store's SQLite file"),
    "--store-dsn": SERVE_SETTINGS["--store-dsn"],
    "--store-dsn-file": SERVE_SETTINGS["--store-dsn-file"],
    # The same variable as the sidecar's --store-token-file: both sides read one Secret.
    "--token-file": ("ACTONCE_STORE_TOKEN_FILE", _readable_file, None,
                     "file holding the bearer token every store call must carry; "
                     "without it the store takes calls from anyone who reaches it"),
    "--tls-cert": ("ACTONCE_STORE_SERVER_CERT", _readable_file, None,
                   "PEM file of the store's certificate: serve TLS only"),
    "--tls-key": ("ACTONCE_STORE_SERVER_KEY", _readable_file, None,
                  "PEM file of the key of --tls-cert"),
    "--tls-client-ca": ("ACTONCE_STORE_CLIENT_CA", _readable_file, None,
                        "PEM file of the CA whose client certificates alone get in: mutual TLS"),
    "--log-level": SERVE_SETTINGS["--log-level"],
    "--log-format": SERVE_SETTINGS["--log-format"],
}  # fmt: skip


# actonce store check: the same variables as the sidecar's --store-* flags, so that in a
# sidecar's environment it checks the store that sidecar calls.
CHECK_SETTINGS: dict[str, Setting] = {
    "--target": ("ACTONCE_STORE_TARGET", _listen, None,
                 "HOST:PORT or unix:PATH of the store to check"),
    "--tls-ca": (*SERVE_SETTINGS["--store-tls-ca"][:3], "PEM file of the CA that signed the "
                 "store's certificate: TLS to the store"),
    "--tls-cert": (*SERVE_SETTINGS["--store-tls-cert"][:3], "PEM file of a client "
                   "certificate: mutual TLS"),
    "--tls-key": (*SERVE_SETTINGS["--store-tls-key"][:3], "PEM file of the key of --tls-cert"),
    "--token-file": (*SERVE_SETTINGS["--store-token-file"][:3], "file holding the bearer "
                     "token the store expects; with it, a call without it must be FORBIDDEN"),
    "--timeout": ("ACTONCE_STORE_TIMEOUT", _positive_float, 10.0,
                  "seconds each call, and reaching the store, may take"),
}  # fmt: skip


def _add_settings(parser: argparse.ArgumentParser, settings: dict[str, Setting]) -> None:
    for flag, (env, _parse, default, text) in settings.items():
        shown = "" if default in (None, frozenset(), {}, ()) else f" (default {default})"
        action = "append" if flag in REPEATABLE else "store"
        parser.add_argument(flag, default=None, action=action, help=f"{text}{shown} [env {env}]")


def _resolve(args: argparse.Namespace, settings: dict[str, Setting]) -> dict[str, Any]:
    values: dict[str, Any] = {}
    for flag, (env, parse, default, _text) in settings.items():
        key = flag.lstrip("-").replace("-", "_")
        raw = getattr(args, key)
        if isinstance(raw, list):
            raw = ",".join(raw)
        source = flag
        if raw is None:
            raw = _env(env)
            source = env
        if raw is None:
            values[key] = default
            continue
        try:
            values[key] = parse(raw)
        except ValueError as exc:
            # A DSN carries its password: the one line names the setting, not its value.
            shown = "" if env.endswith("_DSN") else f"={raw!r}"
            raise ConfigError(f"{source}{shown} is not valid: {exc}") from None
    return _dsns_from_files(values)


def _dsns_from_files(values: dict[str, Any]) -> dict[str, Any]:
    """A DSN read from its file takes the DSN's place; both at once name it twice."""
    for key in ("audit_dsn", "store_dsn"):
        from_file = values.pop(f"{key}_file", None)
        if from_file is None:
            continue
        if values.get(key):
            flag = key.replace("_", "-")
            raise ConfigError(f"--{flag} and --{flag}-file both name a DSN: give one")
        values[key] = from_file
    return values


# What the agent beside the sidecar reads (its clients, and their test harness): a sidecar
# and its agent may share one env file, so these are no typo of a setting here.
CLIENT_VARIABLES = frozenset({"ACTONCE_TARGET", "ACTONCE_API_TOKEN", "ACTONCE_BIN"})


def _check_environment(settings: dict[str, Setting]) -> None:
    known = {env for env, *_ in settings.values()} | CLIENT_VARIABLES
    known |= {env for env, *_ in STORE_SETTINGS.values()}
    known |= {env for env, *_ in CONSOLE_SETTINGS.values()}
    unknown = sorted(k for k in os.environ if k.startswith("ACTONCE_") and k not in known)
    if unknown:
        raise ConfigError(f"unknown setting {unknown[0]} (see actonce serve --help)")


class _OneLineParser(argparse.ArgumentParser):
    """argparse whose usage errors are one line and exit 2, like every other setting error."""

    def error(self, message: str) -> NoReturn:
        _fail(f"{message} (see {self.prog} --help)")


def build_parser() -> argparse.ArgumentParser:
    # Subcommands' parsers are of the same class, so their errors are one line too.
    parser = _OneLineParser(
        prog="actonce",
        description="A gRPC sidecar that makes every write of an agent's run land once.",
    )
    parser.add_argument("--version", action="version", version=f"actonce {version()}")
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser(
        "serve",
        help="serve the sidecar (embedded store by default)",
        epilog=tracing_settings.EPILOG,
    )
    _add_settings(serve, SERVE_SETTINGS)
    store = commands.add_parser(
        "store", help="run the reference artifact store alone", epilog=tracing_settings.EPILOG
    )
    _add_settings(store, STORE_SETTINGS)
    store_commands = store.add_subparsers(dest="store_command", metavar="{check}")
    check = store_commands.add_parser(
        "check",
        help="run the store contract's behaviour against a store and print what holds; "
        "exit 0 when all of it does",
    )
    _add_settings(check, CHECK_SETTINGS)
    audit = commands.add_parser("audit", help="inspect and verify the audit ledger")
    audit_commands = audit.add_subparsers(dest="audit_command", required=True)
    for name, text in [
        ("list", "list the runs in the ledger"),
        ("show", "a readable timeline of one run"),
        ("export", "every event as JSON lines on stdout"),
        ("verify", "check the hash chain; exit 1 naming the first bad event"),
        ("pending", "what needs a person, newest first; exit 3 when anything is pending"),
        ("resolve", "record a person's decision on a pending step or write"),
        ("prune", "export the oldest events to a file, then remove them from the ledger"),
        ("migrate", "create or upgrade a PostgreSQL ledger's schema, as its owner role"),
    ]:
        sub = audit_commands.add_parser(name, help=text)
        if name == "show":
            sub.add_argument("run_id", help="the run to show")
        if name == "verify":
            sub.add_argument(
                "--with-export", action="append", type=Path, default=[], metavar="PATH",
                help="an export `audit prune` wrote, verified with the ledger as one chain; "
                "repeat it for every prune since the first event",
            )  # fmt: skip
        if name == "prune":
            sub.add_argument(
                "--before", required=True, metavar="TIME",
                help="remove events older than this: an ISO 8601 time (UTC unless it says) "
                "or an age such as 90d or 12h; pending items and their runs are kept",
            )  # fmt: skip
            sub.add_argument(
                "--export", required=True, type=Path, metavar="PATH",
                help="a new file that receives what is removed, as `audit export` writes it",
            )  # fmt: skip
        if name == "migrate":
            sub.add_argument(
                "--writer-role", metavar="NAME",
                help="an existing role the sidecars connect as: granted only what they need "
                "(append events, fence, bind runs, decide), never to UPDATE or DELETE an event",
            )  # fmt: skip
        if name == "pending":
            sub.add_argument("--json", action="store_true", help="one JSON object a line")
            sub.add_argument(
                "--in-flight", action="store_true",
                help="list instead the steps whose call is in flight on a live sidecar: "
                "not in doubt, and not decidable until their attempt is no longer live",
            )  # fmt: skip
        if name == "resolve":
            _add_decision(sub)
        _add_settings(sub, AUDIT_SETTINGS)
    console = commands.add_parser("console", help="serve the operator's web console over a ledger")
    _add_settings(console, CONSOLE_SETTINGS)
    demo = commands.add_parser(
        "demo", help="see a run killed mid-way and retried land each write once"
    )
    demo.add_argument(
        "--data-dir", type=Path, default=None, metavar="DIR",
        help="folder the demo keeps its store and ledger in, to open afterwards "
        "(default .actonce-demo)",
    )  # fmt: skip
    return parser


def _add_decision(sub: argparse.ArgumentParser) -> None:
    sub.add_argument("item_id", metavar="STEP_ID", help="the step id or write's derived id")
    decision = sub.add_mutually_exclusive_group(required=True)
    for flag, value, text in [
        (
            "--ran",
            "ran",
            "the step's tool did act: later attempts get ALREADY_APPLIED "
            "with --result-json and do not call it",
        ),
        ("--did-not-run", "did_not_run", "the tool did not act: a later attempt may run it"),
        ("--landed", "landed", "the write is in the store (looked up there)"),
        ("--not-landed", "not_landed", "the write is not in the store"),
    ]:
        decision.add_argument(flag, dest="decision", action="store_const", const=value, help=text)
    sub.add_argument("--result-json", help="with --ran: the result the tool gave, as JSON")
    sub.add_argument("--by", required=True, help="who decides (recorded in the ledger)")
    sub.add_argument("--reason", required=True, help="why (recorded in the ledger)")


def _fail(message: str) -> NoReturn:
    print(f"actonce: error: {message}", file=sys.stderr)
    raise SystemExit(2)


def _check_upstream(values: dict[str, Any]) -> None:
    # TLS and the token are for an external store: the embedded one is this process's
    # own, on loopback, and silently ignoring them would hide a missing --store-target.
    upstream = ("store_tls_ca", "store_tls_cert", "store_tls_key", "store_token_file")
    named = [key for key in upstream if values.get(key) is not None]
    if named and values.get("store_target") is None:
        raise ConfigError(f"--{named[0].replace('_', '-')} needs --store-target")
    if (values.get("store_tls_cert") is None) != (values.get("store_tls_key") is None):
        raise ConfigError("--store-tls-cert and --store-tls-key go together (mutual TLS)")


def _check_store_tls(values: dict[str, Any]) -> None:
    if (values["tls_cert"] is None) != (values["tls_key"] is None):
        raise ConfigError("--tls-cert and --tls-key go together")
    if values["tls_client_ca"] is not None and values["tls_cert"] is None:
        raise ConfigError("--tls-client-ca needs --tls-cert and --tls-key (mutual TLS is TLS)")


def _check_mcp(values: dict[str, Any]) -> None:
    of_the_front = ("mcp_upstream", "mcp_upstream_headers", "tool_effects",
                    "mcp_allowed_hosts", "mcp_allowed_origins")  # fmt: skip
    named = [key for key in of_the_front if values.get(key)]
    if named and values.get("mcp_listen") is None:
        raise ConfigError(f"--{named[0].replace('_', '-')} needs --mcp-listen")
    for name in values.get("mcp_upstream_headers") or {}:
        if name not in values["mcp_upstream"]:
            raise ConfigError(f"--mcp-upstream-headers names {name}, which no --mcp-upstream is")
    if values.get("mcp_listen") is not None:
        problem = beyond_loopback_problem(
            values["mcp_listen"], values.get("mcp_allowed_hosts") or (), "--mcp-allowed-hosts"
        )
        if problem is not None:
            raise ConfigError(f"--mcp-listen {problem}")
    if values.get("tool_effects") is not None:
        from sidecar.fronts.mcp.settings import load_effects

        try:
            load_effects(values["tool_effects"])
        except ValueError as exc:
            raise ConfigError(f"--tool-effects {values['tool_effects']}: {exc}") from None


def _store_check(values: dict[str, Any]) -> int:
    if values["target"] is None:
        raise ConfigError("store check needs --target HOST:PORT (or ACTONCE_STORE_TARGET)")
    if (values["tls_cert"] is None) != (values["tls_key"] is None):
        raise ConfigError("--tls-cert and --tls-key go together (mutual TLS)")
    from sidecar.conformance import check_store

    return check_store(
        values["target"],
        tls_ca=values["tls_ca"],
        tls_cert=values["tls_cert"],
        tls_key=values["tls_key"],
        token_file=values["token_file"],
        timeout=values["timeout"],
    )


def _require_extras(command: str, values: dict[str, Any]) -> None:
    """Stop with the install command when a feature asked for lacks its extra."""
    if command == "console":
        extras.require(extras.CONSOLE, "actonce console")
    if values.get("mcp_listen") is not None:
        extras.require(extras.MCP, "--mcp-listen")
    if command in ("serve", "store") and tracing_settings.requested():
        extras.require(extras.OTEL, "traces (asked for by OTEL_* variables)")
    for key in ("audit_dsn", "store_dsn"):
        if values.get(key) is not None:
            extras.require(extras.POSTGRES, f"--{key.replace('_', '-')}")


def _check_api_token(values: dict[str, Any]) -> None:
    if values.get("api_token_exempt") is not None and values.get("api_token_file") is None:
        raise ConfigError("--api-token-exempt needs --api-token-file")


def config_from(values: dict[str, Any]) -> Config:
    _check_upstream(values)
    _check_mcp(values)
    _check_api_token(values)
    return Config(
        listen=values["listen"],
        data_dir=values["data_dir"],
        audit_db=values["audit_db"],
        audit_dsn=values["audit_dsn"],
        store_target=values["store_target"],
        store_dsn=values["store_dsn"],
        send_allowlist=values["send_allowlist"],
        rules=values["rules"],
        store_timeout_seconds=values["store_timeout"],
        audit_busy_timeout_ms=values["audit_busy_timeout_ms"],
        attempt_idle_ttl_seconds=values["attempt_idle_ttl"],
        attempt_max_count=values["attempt_max_count"],
        attempt_max_mib=values["attempt_max_mib"],
        id_scheme=values["id_scheme"],
        log_level=values["log_level"],
        log_format=values["log_format"],
        health_listen=values["health_listen"],
        metrics_listen=values["metrics_listen"],
        store_tls_ca=values["store_tls_ca"],
        store_tls_cert=values["store_tls_cert"],
        store_tls_key=values["store_tls_key"],
        store_token_file=values["store_token_file"],
        api_token_file=values["api_token_file"],
        api_token_exempt=(
            defaults.API_TOKEN_EXEMPT
            if values["api_token_exempt"] is None
            else values["api_token_exempt"]
        ),
        mcp_listen=values["mcp_listen"],
        mcp_upstreams=values["mcp_upstream"],
        mcp_upstream_headers=values["mcp_upstream_headers"],
        tool_effects=values["tool_effects"],
        mcp_allowed_hosts=values["mcp_allowed_hosts"],
        mcp_allowed_origins=values["mcp_allowed_origins"],
        mcp_upstream_timeout_seconds=values["mcp_upstream_timeout"],
    )


def _cannot_start(exc: Exception) -> bool:
    """Whether ``exc`` says a ledger, a store or an address cannot be used (refused,
    unreachable, a schema this sidecar cannot use): one line at start-up, as every setting
    error, never a traceback. Its classes are imported only when something failed."""
    from sidecar.ledger.base import LedgerError
    from sidecar.refstore.backend import StoreUnavailableError

    return isinstance(exc, OSError | sqlite3.Error | LedgerError | StoreUnavailableError)


def main(argv: Sequence[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    try:
        if args.command == "serve":
            _check_environment(SERVE_SETTINGS)
            values = _resolve(args, SERVE_SETTINGS)
            _require_extras("serve", values)
            config = config_from(values)
            tracing_settings.check()
            logs.configure(config.log_level, config.log_format)
            from sidecar.assembly.server import serve

            asyncio.run(serve(config, grace_seconds=values["grace_period"]))
        elif args.command == "audit":
            values = _resolve(args, AUDIT_SETTINGS)
            _require_extras("audit", values)
            from sidecar.ledger.audit_command import run_audit

            for key in ("json", "in_flight", "item_id", "decision", "result_json", "by", "reason",
                        "with_export", "before", "export", "writer_role"):  # fmt: skip
                values[key] = getattr(args, key, None)
            raise SystemExit(run_audit(args.audit_command, values, getattr(args, "run_id", "")))
        elif args.command == "console":
            values = _resolve(args, CONSOLE_SETTINGS)
            _require_extras("console", values)
            logs.configure(values["log_level"], values["log_format"])
            from sidecar.console.serve import run_console

            raise SystemExit(run_console(values))
        elif args.command == "demo":
            from sidecar.demo import DATA_DIR, run_demo

            raise SystemExit(run_demo(args.data_dir or DATA_DIR))
        elif args.command == "store" and args.store_command == "check":
            raise SystemExit(_store_check(_resolve(args, CHECK_SETTINGS)))
        elif args.command == "store":
            _check_environment(STORE_SETTINGS)
            values = _resolve(args, STORE_SETTINGS)
            _require_extras("store", values)
            tracing_settings.check()
            logs.configure(values["log_level"], values["log_format"])
            from sidecar.ops.security import read_token, server_credentials
            from sidecar.refstore.server import serve_store

            token = read_token(values["token_file"]) if values["token_file"] else None
            _check_store_tls(values)
            credentials = (
                server_credentials(values["tls_cert"], values["tls_key"], values["tls_client_ca"])
                if values["tls_cert"]
                else None
            )
            asyncio.run(
                serve_store(
                    values["listen"],
                    values["data_dir"],
                    token,
                    dsn=values["store_dsn"],
                    credentials=credentials,
                )
            )
    except (ConfigError, tracing_settings.TracingSettingError, extras.MissingExtra) as exc:
        _fail(str(exc))
    except Exception as exc:
        if not _cannot_start(exc):
            raise
        _fail(f"cannot start: {' '.join(str(exc).split())}")
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
