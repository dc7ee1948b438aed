"""The sidecar's configuration: one field a setting, each a flag with an ``ACTONCE_*``
environment variable.

Flags win over the environment, which wins over the defaults. A setting that
is unknown or malformed stops start-up with one clear line.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from sidecar import defaults
from sidecar.config import values
from sidecar.config.setting import setting
from sidecar.ops.http_guard import AllowedHost, parse_allowed_hosts, parse_allowed_origins
from sidecar.rules.grants import Grants, parse_grants


def _grants_file(text: str) -> Grants:
    # Read and checked at start-up: a grants file that does not parse stops the sidecar with
    # one line, rather than leaving every rule to reach only its own without a word.
    return parse_grants(values.readable_file(text).read_text(encoding="utf-8"))


def _yes_or_no(text: str) -> bool:
    if text not in ("true", "false"):
        raise ValueError("expected true or false")
    return text == "true"


@dataclass
class Config:
    """Everything `actonce serve` needs to start: its settings, one field each.

    A field declared with :func:`setting` is a flag and an ``ACTONCE_*`` variable of
    ``actonce serve``, in this order in its help: adding a setting is adding a field here.
    """

    listen: str = setting(
        "--listen",
        "ACTONCE_LISTEN",
        values.listen,
        "where the sidecar listens: HOST:PORT or unix:PATH",
        defaults.LISTEN,
    )
    data_dir: Path = setting(
        "--data-dir",
        "ACTONCE_DATA_DIR",
        Path,
        "folder for the embedded store and, by default, the ledger",
        defaults.DATA_DIR,
    )
    # The ledger's file, apart from the store's data; default data_dir/audit.db.
    audit_db: Path | None = setting(
        "--audit-db",
        "ACTONCE_AUDIT_DB",
        Path,
        "the audit ledger's SQLite file (default DATA_DIR/audit.db)",
    )
    # A PostgreSQL ledger shared by many sidecars, instead of audit_db.
    audit_dsn: str | None = setting(
        "--audit-dsn",
        "ACTONCE_AUDIT_DSN",
        values.dsn,
        "PostgreSQL DSN of a ledger shared by many sidecars, instead of --audit-db",
        dsn_from_file=True,
    )
    # An external ArtifactStoreService instead of the embedded reference store.
    store_target: str | None = setting(
        "--store-target",
        "ACTONCE_STORE_TARGET",
        values.listen,
        "HOST:PORT or unix:PATH of an external store, instead of the embedded one",
    )
    # The embedded reference store on PostgreSQL instead of data_dir.
    store_dsn: str | None = setting(
        "--store-dsn",
        "ACTONCE_STORE_DSN",
        values.dsn,
        "PostgreSQL DSN for the reference store's data, instead of DATA_DIR",
        dsn_from_file=True,
    )
    send_allowlist: frozenset[str] = setting(
        "--send-allowlist",
        "ACTONCE_SEND_ALLOWLIST",
        values.allowlist,
        "comma-separated rules allowed to Send (ask for a thread's turn)",
        frozenset(),
    )
    # The rules this sidecar serves; None serves any rule.
    rules: frozenset[str] | None = setting(
        "--rules",
        "ACTONCE_RULES",
        values.rules,
        "comma-separated rules this sidecar serves; BeginAttempt for any other is refused "
        "FORBIDDEN (default: any rule)",
    )
    # Which other rules' artifacts and threads each rule's attempts may reach (docs/grants.md).
    grants: Grants = setting(
        "--grants",
        "ACTONCE_GRANTS",
        _grants_file,
        "YAML or JSON file of grants: which other rules' artifact kinds and threads each rule "
        "may read, edit or post to (docs/grants.md); without it each rule reaches only what "
        "its runs made",
        Grants(),
    )
    store_timeout_seconds: float = setting(
        "--store-timeout",
        "ACTONCE_STORE_TIMEOUT",
        values.positive_float,
        "seconds a store call may take",
        defaults.STORE_TIMEOUT_SECONDS,
    )
    # TLS to an external store: the CA that signed it, and our own pair for mutual TLS.
    store_tls_ca: Path | None = setting(
        "--store-tls-ca",
        "ACTONCE_STORE_TLS_CA",
        values.readable_file,
        "PEM file of the CA that signed the external store's certificate: TLS to the store",
    )
    store_tls_cert: Path | None = setting(
        "--store-tls-cert",
        "ACTONCE_STORE_TLS_CERT",
        values.readable_file,
        "PEM file of this sidecar's client certificate: mutual TLS",
    )
    store_tls_key: Path | None = setting(
        "--store-tls-key",
        "ACTONCE_STORE_TLS_KEY",
        values.readable_file,
        "PEM file of the key of --store-tls-cert",
    )
    # The file holding the store's bearer token; the token itself is never kept here.
    store_token_file: Path | None = setting(
        "--store-token-file",
        "ACTONCE_STORE_TOKEN_FILE",
        values.readable_file,
        "file holding the bearer token the external store expects (the token itself is "
        "never taken from a flag)",
    )
    # The file holding the API token every caller must send (sidecar.ops.auth), and the
    # services that stay open without it (words of sidecar.ops.auth.EXEMPTABLE).
    api_token_file: Path | None = setting(
        "--api-token-file",
        "ACTONCE_API_TOKEN_FILE",
        values.readable_file,
        "file holding the API token every caller must send as 'authorization: Bearer "
        "TOKEN' (gRPC and the MCP front); read again when it changes (off by default)",
    )
    api_token_exempt: frozenset[str] = setting(
        "--api-token-exempt",
        "ACTONCE_API_TOKEN_EXEMPT",
        values.exempt,
        "gRPC services open without the API token: health, reflection, both "
        "comma-separated, or none",
        defaults.API_TOKEN_EXEMPT,
    )
    # The harness holds the token, its agent one attempt's capability (sidecar.ops.auth).
    agent_capabilities: bool = setting(
        "--agent-capabilities",
        "ACTONCE_AGENT_CAPABILITIES",
        _yes_or_no,
        "true to answer each BeginAttempt with the attempt's capability, and let a call "
        "without the API token in only when it carries, in 'actonce-attempt-capability', "
        "the capability of the attempt it names (needs --api-token-file)",
        False,
    )
    # TLS on the agent API's --listen: the server's pair, and the CA of the clients let in
    # (mutual TLS). Beyond loopback, a listen needs the token, and TLS unless
    # insecure_listen says the network already protects it (sidecar.cli checks both).
    tls_cert: Path | None = setting(
        "--tls-cert",
        "ACTONCE_TLS_CERT",
        values.readable_file,
        "PEM file of the certificate the agent API (--listen) serves TLS with",
    )
    tls_key: Path | None = setting(
        "--tls-key",
        "ACTONCE_TLS_KEY",
        values.readable_file,
        "PEM file of the key of --tls-cert",
    )
    tls_client_ca: Path | None = setting(
        "--tls-client-ca",
        "ACTONCE_TLS_CLIENT_CA",
        values.readable_file,
        "PEM file of the CA whose client certificates alone may call the agent API: "
        "mutual TLS (needs --tls-cert)",
    )
    insecure_listen: bool = setting(
        "--insecure-listen",
        "ACTONCE_INSECURE_LISTEN",
        _yes_or_no,
        "true to serve --listen beyond loopback without TLS (the API token then travels "
        "in clear: only on a network that encrypts it, a service mesh's)",
        False,
    )
    audit_busy_timeout_ms: int = setting(
        "--audit-busy-timeout-ms",
        "ACTONCE_AUDIT_BUSY_TIMEOUT_MS",
        values.positive_int,
        "ms a ledger append waits for a locked ledger",
        defaults.AUDIT_BUSY_TIMEOUT_MS,
    )
    # Server connections to a PostgreSQL ledger and to the embedded store's PostgreSQL: a
    # fleet of sidecars on one server holds this many each, at most.
    audit_pool_size: int = setting(
        "--audit-pool-size",
        "ACTONCE_AUDIT_POOL_SIZE",
        values.at_least(2),
        "server connections a PostgreSQL ledger may hold: one appends, the rest read, beat "
        "and answer health checks (at least 2)",
        defaults.AUDIT_POOL_SIZE,
    )
    store_pool_size: int = setting(
        "--store-pool-size",
        "ACTONCE_STORE_POOL_SIZE",
        values.positive_int,
        "server connections the embedded store on PostgreSQL (--store-dsn) may hold",
        defaults.STORE_POOL_SIZE,
    )
    # The derived-id scheme of a new run; a run the ledger knows keeps its own.
    id_scheme: int = setting(
        "--id-scheme",
        "ACTONCE_ID_SCHEME",
        values.id_scheme,
        "derived-id scheme version of new runs (1, 2 or 3; keys need 3); a run keeps the one it "
        "began with",
        defaults.ID_SCHEME,
    )
    attempt_idle_ttl_seconds: float = setting(
        "--attempt-idle-ttl",
        "ACTONCE_ATTEMPT_IDLE_TTL",
        values.positive_float,
        "seconds after which an idle attempt is forgotten",
        defaults.ATTEMPT_IDLE_TTL_SECONDS,
    )
    # Bounds on live attempts: past either, the least recently used are forgotten.
    attempt_max_count: int = setting(
        "--attempt-max-count",
        "ACTONCE_ATTEMPT_MAX_COUNT",
        values.positive_int,
        "live attempts kept at most; past it the least recently used is forgotten (its "
        "calls get UNKNOWN_ATTEMPT)",
        defaults.ATTEMPT_MAX_COUNT,
    )
    attempt_max_mib: int = setting(
        "--attempt-max-mib",
        "ACTONCE_ATTEMPT_MAX_MIB",
        values.positive_int,
        "MiB that live attempts may take, approximately; past it the least recently used "
        "are forgotten",
        defaults.ATTEMPT_MAX_MIB,
    )
    grace_seconds: float = setting(
        "--grace-period",
        "ACTONCE_GRACE_PERIOD",
        values.positive_float,
        "seconds the drain on SIGTERM takes at most (calls, then closing)",
        defaults.GRACE_SECONDS,
    )
    # A port answering grpc.health.v1 alone, for the kubelet; off when None.
    health_listen: str | None = setting(
        "--health-listen",
        "ACTONCE_HEALTH_LISTEN",
        values.listen,
        "HOST:PORT or unix:PATH answering grpc.health.v1 alone, for probes from outside "
        "the pod (off by default)",
    )
    # Where Prometheus scrapes the metrics (HOST:PORT); off when None.
    metrics_listen: str | None = setting(
        "--metrics-listen",
        "ACTONCE_METRICS_LISTEN",
        values.host_port,
        "HOST:PORT serving Prometheus metrics at /metrics (off by default)",
    )
    # The MCP front (HOST:PORT); off when None.
    mcp_listen: str | None = setting(
        "--mcp-listen",
        "ACTONCE_MCP_LISTEN",
        values.host_port,
        "HOST:PORT serving the writes and reads as MCP tools over Streamable HTTP at /mcp "
        "(off by default)",
    )
    # The gateway's upstream MCP servers (NAME -> Streamable HTTP URL), the files of
    # headers each is called with (NAME -> file), and the operator's effects file.
    mcp_upstreams: dict[str, str] = setting(
        "--mcp-upstream",
        "ACTONCE_MCP_UPSTREAM",
        values.named(values.http_url),
        "NAME=URL of an MCP server whose tools are listed as NAME__tool and called once "
        "per run; repeatable (comma-separated in the variable)",
        {},
        repeatable=True,
    )
    mcp_upstream_headers: dict[str, Path] = setting(
        "--mcp-upstream-headers",
        "ACTONCE_MCP_UPSTREAM_HEADERS",
        values.named(values.readable_file),
        "NAME=FILE: a file of 'Header: value' lines sent to that upstream (tokens); repeatable",
        {},
        repeatable=True,
    )
    tool_effects: Path | None = setting(
        "--tool-effects",
        "ACTONCE_TOOL_EFFECTS",
        values.readable_file,
        "JSON or YAML map from NAME__tool to a ToolEffect value name, or to {effect, "
        "idempotency_key, errors_mean_nothing_happened}; a tool it does not name is "
        "TOOL_EFFECT_NON_IDEMPOTENT_WRITE",
    )
    mcp_upstream_timeout_seconds: float = setting(
        "--mcp-upstream-timeout",
        "ACTONCE_MCP_UPSTREAM_TIMEOUT",
        values.positive_float,
        "seconds the gateway waits for an upstream's answer; a call sent and not answered "
        "in time is UPSTREAM_FAILED",
        defaults.MCP_UPSTREAM_TIMEOUT_SECONDS,
    )
    # Names and origins the MCP front takes besides the loopback ones (Host, Origin).
    mcp_allowed_hosts: tuple[AllowedHost, ...] = setting(
        "--mcp-allowed-hosts",
        "ACTONCE_MCP_ALLOWED_HOSTS",
        parse_allowed_hosts,
        "NAME or NAME:PORT that callers of the MCP front may name in Host, besides the "
        "loopback names; needed to listen beyond loopback; repeatable (comma-separated)",
        (),
        repeatable=True,
    )
    mcp_allowed_origins: tuple[str, ...] = setting(
        "--mcp-allowed-origins",
        "ACTONCE_MCP_ALLOWED_ORIGINS",
        parse_allowed_origins,
        "SCHEME://NAME[:PORT] of web pages that may send requests, besides loopback pages "
        "and the allowed hosts' own (behind a proxy that rewrites Host, say); repeatable",
        (),
        repeatable=True,
    )
    log_level: str = setting(
        "--log-level",
        "ACTONCE_LOG_LEVEL",
        values.choice("debug", "info", "warning", "error"),
        "debug, info, warning or error",
        "info",
    )
    log_format: str = setting(
        "--log-format",
        "ACTONCE_LOG_FORMAT",
        values.choice("auto", "json", "console"),
        "json, console, or auto (console in a terminal)",
        "auto",
    )
    # Not a setting: how often the store's health is polled.
    health_interval_seconds: float = 1.0

    @property
    def ledger(self) -> str:
        """The ledger actually used, as a log line may name it: the DSN without its
        password, or the SQLite file."""
        return without_password(self.audit_dsn) if self.audit_dsn else str(self.audit_path)

    @property
    def audit_path(self) -> Path:
        return self.audit_db if self.audit_db is not None else self.data_dir / "audit.db"

    @property
    def store_path(self) -> Path:
        """The embedded store's SQLite file: see :func:`embedded_store_file`."""
        return embedded_store_file(self.data_dir, self.audit_db)

    @property
    def one_file(self) -> bool:
        """Whether the embedded store on SQLite shares the SQLite ledger's file."""
        embedded = not (self.store_target or self.store_dsn or self.audit_dsn)
        return embedded and self.store_path == self.audit_path


def embedded_store_file(data_dir: Path, audit_db: Path | None = None) -> Path:
    """Where the embedded store keeps its tables on SQLite.

    In the ledger's own file (data_dir/audit.db), so that a write's intent, its rows and
    its outcome can commit as one: a data folder of one file. A folder made before that,
    which has the store's file of its own (data_dir/store.db), keeps its two files as they
    are, and so does a ledger given a file elsewhere (``--audit-db``).
    """
    own = data_dir / "store.db"
    default_ledger = data_dir / "audit.db"
    if own.exists() or (audit_db is not None and audit_db != default_ledger):
        return own
    return default_ledger


def without_password(dsn: str) -> str:
    """A postgresql:// DSN with its password (in the URL or as a parameter) left out."""
    parts = urlsplit(dsn)
    netloc = parts.netloc
    if "@" in netloc:
        user, _, host = netloc.rpartition("@")
        netloc = f"{user.partition(':')[0]}@{host}"
    query = "&".join(
        item for item in parts.query.split("&") if item and not item.startswith("password=")
    )
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))
