"""The reference artifact store: a real server behind the store contract.

`actonce.store.v1.ArtifactStoreService` is what the sidecar speaks upstream. This package
implements it so that the embedded default (one command, no other service) and the tests have a
store that keeps the contract's promises for real: caller-chosen ids refused durably once used,
versioned JSON artifacts patched under optimistic concurrency (RFC 6902), proposals, threads
whose messages and turn requests commit in one transaction, and every refusal reported as a
gRPC status with a `google.rpc.ErrorInfo` in domain `store.actonce`.

Modules:
- `backend`: the rules on SQL (state checks, version bumps, paging, proposals), written once,
  the store's records and the input rules every backend shares (the refusal, its codes and the
  records the sidecar reads are the store contract's: `sidecar.store_contract`).
- `patches`: what a valid JSON Patch is, and applying one (VALIDATION_FAILED, PATCH_FAILED).
- `queries`: the SQL statements, written once, in either database's words.
- `sqlite`: the SQLite backend (the default): its file, schema and group commit.
- `postgres`: the PostgreSQL backend, for a store shared by many sidecars: its schema and pool.
- `wire`: records and refusals as the service's messages and statuses.
- `servicer`: the thin gRPC servicer over a backend.
- `server`: `create_store_server` (tests, embedding) and `serve_store` (the CLI command).
"""
