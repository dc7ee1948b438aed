"""The ``actonce`` command: ``serve`` (the sidecar), ``store`` (the reference store alone),
``audit``, ``console``, ``inject`` (the admission webhook) and ``demo``.

Every flag has an ``ACTONCE_*`` environment variable; a flag given on the
command line wins. A malformed setting stops start-up with one line on
stderr and exit code 2, never a traceback. The settings themselves are declared in
:mod:`sidecar.config`: this module builds the parser from them, reads them, checks what
they mean together, and runs the command.
"""

from __future__ import annotations

import argparse
import asyncio
import sqlite3
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn

from sidecar import defaults, extras, version
from sidecar.config import Config, commands, reading
from sidecar.config.reading import ConfigError, add_settings, check_environment, resolve
from sidecar.ledger.schema import POSTGRES_CHAINS
from sidecar.ops import logs, tracing_settings
from sidecar.ops.http_guard import beyond_loopback_problem, is_loopback_listen


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
    subcommands = parser.add_subparsers(dest="command", required=True)
    serve = subcommands.add_parser(
        "serve",
        help="serve the sidecar (embedded store by default)",
        epilog=tracing_settings.EPILOG,
    )
    add_settings(serve, commands.SERVE)
    _add_store(subcommands)
    _add_audit(subcommands)
    console = subcommands.add_parser(
        "console", help="serve the operator's web console over a ledger"
    )
    add_settings(console, commands.CONSOLE)
    inject = subcommands.add_parser(
        "inject",
        help="serve the admission webhook that adds the sidecar to pods annotated "
        'actonce.dev/inject: "true"',
    )
    add_settings(inject, commands.INJECT)
    demo = subcommands.add_parser(
        "demo", help="see a run killed mid-way and retried land each write once"
    )
    demo.add_argument(
        "--data-dir",
        type=Path,
        default=None,
        metavar="DIR",
        help="folder the demo keeps its store and ledger in, to open afterwards "
        "(default .actonce-demo)",
    )
    return parser


Subcommands = Any  # argparse's subparsers action, which it does not name publicly


def _add_store(subcommands: Subcommands) -> None:
    store = subcommands.add_parser(
        "store", help="run the reference artifact store alone", epilog=tracing_settings.EPILOG
    )
    add_settings(store, commands.STORE)
    store_commands = store.add_subparsers(dest="store_command", metavar="{check,assign-owners}")
    check = store_commands.add_parser(
        "check",
        help="run the store contract's behaviour against a store and print what holds; "
        "exit 0 when all of it does",
    )
    add_settings(check, commands.CHECK)
    assign = store_commands.add_parser(
        "assign-owners",
        help="give the store's artifacts, proposals and threads made before owners were "
        "recorded the rule the ledger says made them (docs/upgrading.md)",
    )
    add_settings(assign, commands.ASSIGN_OWNERS)


_AUDIT_COMMANDS = {
    "list": "list the runs in the ledger",
    "show": "a readable timeline of one run",
    "export": "every event as JSON lines on stdout",
    "verify": "check the hash chain; exit 1 naming the first bad event",
    "pending": "what needs a person, newest first; exit 3 when anything is pending",
    "resolve": "record a person's decision on a pending step or write",
    "prune": "export the oldest events to a file, then remove them from the ledger",
    "migrate": "create or upgrade a PostgreSQL ledger's schema, as its owner role",
}


def _add_audit(subcommands: Subcommands) -> None:
    audit = subcommands.add_parser("audit", help="inspect and verify the audit ledger")
    audit_commands = audit.add_subparsers(dest="audit_command", required=True)
    for name, text in _AUDIT_COMMANDS.items():
        sub = audit_commands.add_parser(name, help=text)
        if name in _AUDIT_ARGUMENTS:
            _AUDIT_ARGUMENTS[name](sub)
        add_settings(sub, commands.AUDIT)


def _show_arguments(sub: argparse.ArgumentParser) -> None:
    sub.add_argument("run_id", help="the run to show")


def _verify_arguments(sub: argparse.ArgumentParser) -> None:
    sub.add_argument(
        "--with-export",
        action="append",
        type=Path,
        default=[],
        metavar="PATH",
        help="an export `audit prune` wrote, verified with the ledger as one chain; "
        "repeat it for every prune since the first event",
    )
    sub.add_argument(
        "--jobs",
        type=_positive,
        default=None,
        metavar="N",
        help="walk a PostgreSQL ledger's chains with N workers at once, each on a connection "
        "of its own, all reading one snapshot; the verdict is the one-by-one walk's "
        "(default 4, or the CPUs if fewer; 1 walks the chains one after another). A SQLite "
        "ledger has one chain: N changes nothing there",
    )


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be 1 or more, not {value}")
    return value


def _prune_arguments(sub: argparse.ArgumentParser) -> None:
    sub.add_argument(
        "--before",
        required=True,
        metavar="TIME",
        help="remove events older than this: an ISO 8601 time (UTC unless it says) "
        "or an age such as 90d or 12h; pending items and their runs are kept",
    )
    sub.add_argument(
        "--export",
        required=True,
        type=Path,
        metavar="PATH",
        help="a new file that receives what is removed, as `audit export` writes it",
    )


def _migrate_arguments(sub: argparse.ArgumentParser) -> None:
    sub.add_argument(
        "--writer-role",
        metavar="NAME",
        help="an existing role the sidecars connect as: granted only what they need "
        "(append events, fence and bind runs of their rule), never to decide, nor to UPDATE "
        "or DELETE an event",
    )
    sub.add_argument(
        "--operator-role",
        metavar="NAME",
        help="an existing role people decide as (audit resolve, the console): its members "
        "alone may append a decision; it must not be, nor contain, the writer role",
    )
    sub.add_argument(
        "--chains",
        type=int,
        default=POSTGRES_CHAINS,
        metavar="N",
        help="the hash chains a ledger that has none yet is partitioned into, each run's "
        f"events in one, appended without waiting on the others (default {POSTGRES_CHAINS}); "
        "a ledger keeps the count it was given",
    )


def _pending_arguments(sub: argparse.ArgumentParser) -> None:
    sub.add_argument("--json", action="store_true", help="one JSON object a line")
    sub.add_argument(
        "--in-flight",
        action="store_true",
        help="list instead the steps whose call is in flight on a live sidecar: "
        "not in doubt, and not decidable until their attempt is no longer live",
    )


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
    sub.add_argument(
        "--by",
        help="a name noted beside who decides, which the ledger authenticates: the "
        "PostgreSQL role, or the --operator-key's id (without a key, on SQLite, the "
        "decision is recorded unsigned under this name)",
    )
    sub.add_argument("--reason", required=True, help="why (recorded in the ledger)")


_AUDIT_ARGUMENTS = {
    "show": _show_arguments,
    "verify": _verify_arguments,
    "prune": _prune_arguments,
    "migrate": _migrate_arguments,
    "pending": _pending_arguments,
    "resolve": _add_decision,
}
# What the audit commands take besides the ledger's settings, passed on by name.
_AUDIT_VALUES: tuple[str, ...] = (
    "json",
    "in_flight",
    "item_id",
    "decision",
    "result_json",
    "by",
    "reason",
)
_AUDIT_VALUES += ("with_export", "before", "export", "writer_role", "operator_role", "chains")
_AUDIT_VALUES += ("jobs",)


def _fail(message: str) -> NoReturn:
    print(f"actonce: error: {message}", file=sys.stderr)
    raise SystemExit(2)


def _flag(key: str) -> str:
    return next(s.flag for s in commands.SERVE.values() if s.dest == key)


# Settings of which one is used and the other would be silently ignored.
_EITHER = (("store_target", "store_dsn"), ("audit_db", "audit_dsn"))


def _check_either(given: dict[str, Any]) -> None:
    for first, second in _EITHER:
        if given.get(first) is not None and given.get(second) is not None:
            raise ConfigError(f"{_flag(first)} and {_flag(second)} name two places: give one")


def _check_upstream(given: dict[str, Any]) -> None:
    # TLS and the token are for an external store: the embedded one is this process's
    # own, on loopback, and silently ignoring them would hide a missing --store-target.
    upstream = ("store_tls_ca", "store_tls_cert", "store_tls_key", "store_token_file")
    named = [key for key in upstream if given.get(key) is not None]
    if named and given.get("store_target") is None:
        raise ConfigError(f"{_flag(named[0])} needs --store-target")
    if (given.get("store_tls_cert") is None) != (given.get("store_tls_key") is None):
        raise ConfigError("--store-tls-cert and --store-tls-key go together (mutual TLS)")


def _check_store_tls(values: dict[str, Any]) -> None:
    if (values["tls_cert"] is None) != (values["tls_key"] is None):
        raise ConfigError("--tls-cert and --tls-key go together")
    if values["tls_client_ca"] is not None and values["tls_cert"] is None:
        raise ConfigError("--tls-client-ca needs --tls-cert and --tls-key (mutual TLS is TLS)")


_OF_THE_MCP_FRONT: tuple[str, ...] = ("mcp_upstreams", "mcp_upstream_headers", "tool_effects")
_OF_THE_MCP_FRONT += ("mcp_allowed_hosts", "mcp_allowed_origins")


def _check_mcp(given: dict[str, Any]) -> None:
    named = [key for key in _OF_THE_MCP_FRONT if given.get(key)]
    if named and given.get("mcp_listen") is None:
        raise ConfigError(f"{_flag(named[0])} needs --mcp-listen")
    for name in given.get("mcp_upstream_headers") or {}:
        if name not in given.get("mcp_upstreams", {}):
            raise ConfigError(f"--mcp-upstream-headers names {name}, which no --mcp-upstream is")
    if given.get("mcp_listen") is not None:
        hosts = given.get("mcp_allowed_hosts") or ()
        problem = beyond_loopback_problem(given["mcp_listen"], hosts, "--mcp-allowed-hosts")
        if problem is not None:
            raise ConfigError(f"--mcp-listen {problem}")
    if given.get("tool_effects") is not None:
        _check_effects(given["tool_effects"])


def _check_effects(path: Path) -> None:
    from sidecar.fronts.mcp.settings import load_effects

    try:
        load_effects(path)
    except ValueError as exc:
        raise ConfigError(f"--tool-effects {path}: {exc}") from None


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


def _assign_owners(values: dict[str, Any]) -> int:
    _require_extras("store", values)
    from sidecar.assembly.owners import run_assign_owners

    try:
        return run_assign_owners(values, sys.stdout)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


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


def _check_api_token(given: dict[str, Any]) -> None:
    if "api_token_exempt" in given and given.get("api_token_file") is None:
        raise ConfigError("--api-token-exempt needs --api-token-file")
    if given.get("agent_capabilities") and given.get("api_token_file") is None:
        raise ConfigError(
            "--agent-capabilities needs --api-token-file: a capability is keyed by the API "
            "token, and without a token every caller could begin any run"
        )


def _check_listen(given: dict[str, Any]) -> None:
    """The agent API beyond loopback: never open to whoever reaches it, never the token in
    clear unless the operator says the network protects it."""
    if (given.get("tls_cert") is None) != (given.get("tls_key") is None):
        raise ConfigError("--tls-cert and --tls-key go together")
    if given.get("tls_client_ca") is not None and given.get("tls_cert") is None:
        raise ConfigError("--tls-client-ca needs --tls-cert and --tls-key (mutual TLS is TLS)")
    listen = given.get("listen", defaults.LISTEN)
    if listen.startswith("unix:") or is_loopback_listen(listen.rpartition(":")[0]):
        return
    if given.get("api_token_file") is None:
        raise ConfigError(
            f"--listen {listen} is not loopback: every caller who reaches it could make any "
            "run's writes; give --api-token-file (and --tls-cert, --tls-key)"
        )
    if given.get("tls_cert") is None and not given.get("insecure_listen"):
        raise ConfigError(
            f"--listen {listen} is not loopback and serves no TLS: the API token would "
            "travel in clear; give --tls-cert and --tls-key, or --insecure-listen true on "
            "a network that encrypts it"
        )


def config_from(given: dict[str, Any]) -> Config:
    """The sidecar's configuration from the settings given; the others keep their default."""
    _check_either(given)
    _check_upstream(given)
    _check_mcp(given)
    _check_api_token(given)
    _check_listen(given)
    return Config(**given)


def _cannot_start(exc: Exception) -> bool:
    """Whether ``exc`` says a ledger, a store or an address cannot be used (refused,
    unreachable, a schema this sidecar cannot use): one line at start-up, as every setting
    error, never a traceback. Its classes are imported only when something failed."""
    from sidecar.ledger.base import LedgerError
    from sidecar.refstore.backend import StoreUnavailableError

    return isinstance(exc, OSError | sqlite3.Error | LedgerError | StoreUnavailableError)


def _serve(args: argparse.Namespace) -> None:
    check_environment()
    given = reading.given(args, commands.SERVE)
    _require_extras("serve", given)
    config = config_from(given)
    tracing_settings.check()
    logs.configure(config.log_level, config.log_format)
    from sidecar.assembly.server import serve

    asyncio.run(serve(config))


def _audit(args: argparse.Namespace) -> None:
    values = resolve(args, commands.AUDIT)
    _require_extras("audit", values)
    from sidecar.ledger.audit_command import run_audit

    values |= {key: getattr(args, key, None) for key in _AUDIT_VALUES}
    raise SystemExit(run_audit(args.audit_command, values, getattr(args, "run_id", "")))


def _console(args: argparse.Namespace) -> None:
    values = resolve(args, commands.CONSOLE)
    _require_extras("console", values)
    logs.configure(values["log_level"], values["log_format"])
    from sidecar.console.serve import run_console

    raise SystemExit(run_console(values))


def _demo(args: argparse.Namespace) -> None:
    from sidecar.demo import DATA_DIR, run_demo

    raise SystemExit(run_demo(args.data_dir or DATA_DIR))


def _inject(args: argparse.Namespace) -> None:
    check_environment()
    values = resolve(args, commands.INJECT)
    if values["tls_cert"] is None or values["tls_key"] is None:
        raise ConfigError(
            "--tls-cert and --tls-key are required: the API server calls a webhook over "
            "TLS alone (cert-manager, or a self-generated certificate: docs/deploy-inject.md)"
        )
    logs.configure(values["log_level"], values["log_format"])
    from sidecar.inject.server import serve_inject
    from sidecar.inject.template import TemplateError, load

    try:
        template = load()
    except TemplateError as exc:
        raise ConfigError(str(exc)) from exc
    serve_inject(values["listen"], template, values["tls_cert"], values["tls_key"], values["image"])


def _store(args: argparse.Namespace) -> None:
    if args.store_command == "check":
        raise SystemExit(_store_check(resolve(args, commands.CHECK)))
    if args.store_command == "assign-owners":
        raise SystemExit(_assign_owners(resolve(args, commands.ASSIGN_OWNERS)))
    check_environment()
    values = resolve(args, commands.STORE)
    _require_extras("store", values)
    tracing_settings.check()
    logs.configure(values["log_level"], values["log_format"])
    _check_store_tls(values)
    from sidecar.ops.security import read_token, server_credentials
    from sidecar.refstore.server import serve_store

    token = read_token(values["token_file"]) if values["token_file"] else None
    credentials = None
    if values["tls_cert"]:
        credentials = server_credentials(
            values["tls_cert"], values["tls_key"], values["tls_client_ca"]
        )
    serving = serve_store(
        values["listen"],
        values["data_dir"],
        token,
        dsn=values["store_dsn"],
        credentials=credentials,
    )
    asyncio.run(serving)


_COMMANDS = {"serve": _serve, "audit": _audit, "console": _console, "demo": _demo}
_COMMANDS["store"] = _store
_COMMANDS["inject"] = _inject


def main(argv: Sequence[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    try:
        _COMMANDS[args.command](args)
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
