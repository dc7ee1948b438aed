"""Sidecar configuration: flags, each with an ``ACTONCE_*`` environment variable.

Flags win over the environment, which wins over the defaults. A setting that
is unknown or malformed stops start-up with one clear line.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from sidecar import defaults
from sidecar.ops.http_guard import AllowedHost


@dataclass
class Config:
    """Everything `actonce serve` needs to start."""

    listen: str = defaults.LISTEN
    data_dir: Path = defaults.DATA_DIR
    # The ledger's file, apart from the store's data; default data_dir/audit.db.
    audit_db: Path | None = None
    # A PostgreSQL ledger shared by many sidecars, instead of audit_db.
    audit_dsn: str | None = None
    # An external ArtifactStoreService instead of the embedded reference store.
    store_target: str | None = None
    # The embedded reference store on PostgreSQL instead of data_dir.
    store_dsn: str | None = None
    send_allowlist: frozenset[str] = field(default_factory=frozenset)
    # The rules this sidecar serves; None serves any rule.
    rules: frozenset[str] | None = None
    store_timeout_seconds: float = defaults.STORE_TIMEOUT_SECONDS
    audit_busy_timeout_ms: int = defaults.AUDIT_BUSY_TIMEOUT_MS
    attempt_idle_ttl_seconds: float = defaults.ATTEMPT_IDLE_TTL_SECONDS
    # Bounds on live attempts: past either, the least recently used are forgotten.
    attempt_max_count: int = defaults.ATTEMPT_MAX_COUNT
    attempt_max_mib: int = defaults.ATTEMPT_MAX_MIB
    # The derived-id scheme of a new run; a run the ledger knows keeps its own.
    id_scheme: int = defaults.ID_SCHEME
    health_interval_seconds: float = 1.0
    log_level: str = "info"
    log_format: str = "auto"
    # A port answering grpc.health.v1 alone, for the kubelet; off when None.
    health_listen: str | None = None
    # Where Prometheus scrapes the metrics (HOST:PORT); off when None.
    metrics_listen: str | None = None
    # TLS to an external store: the CA that signed it, and our own pair for mutual TLS.
    store_tls_ca: Path | None = None
    store_tls_cert: Path | None = None
    store_tls_key: Path | None = None
    # The file holding the store's bearer token; the token itself is never kept here.
    store_token_file: Path | None = None
    # The file holding the API token every caller must send (sidecar.ops.auth), and the
    # services that stay open without it (words of sidecar.ops.auth.EXEMPTABLE).
    api_token_file: Path | None = None
    api_token_exempt: frozenset[str] = defaults.API_TOKEN_EXEMPT
    # The MCP front (HOST:PORT); off when None.
    mcp_listen: str | None = None
    # The gateway's upstream MCP servers (NAME -> Streamable HTTP URL), the files of
    # headers each is called with (NAME -> file), and the operator's effects file.
    mcp_upstreams: dict[str, str] = field(default_factory=dict)
    mcp_upstream_headers: dict[str, Path] = field(default_factory=dict)
    tool_effects: Path | None = None
    # Names and origins the MCP front takes besides the loopback ones (Host, Origin).
    mcp_allowed_hosts: tuple[AllowedHost, ...] = ()
    mcp_allowed_origins: tuple[str, ...] = ()
    mcp_upstream_timeout_seconds: float = defaults.MCP_UPSTREAM_TIMEOUT_SECONDS

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
