"""Faults: writes fail closed and the sidecar recovers when what it stands on fails for
real: a ledger locked by another process or on a full disk, a store killed, paused or
slow, PostgreSQL restarted or frozen. No fault is simulated inside the sidecar."""
