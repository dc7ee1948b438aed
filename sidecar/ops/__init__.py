"""Leaf utilities: what running the sidecar needs, knowing none of its parts.

The metrics' registry, the traces' provider, logs, probes, security to the store, callers'
API token, gRPC limits, listening, reflection, PostgreSQL bounds, private files, and the HTTP
fronts' guard and server. Nothing here imports the ledger, the store, the core or a front (the
import contract in pyproject.toml says so); what wires them together is the assembly
(sidecar.assembly).
"""
