"""What running the sidecar needs around the core: metrics, logs, drain, probes,
security to the store, listening, reflection, thread scheduling, PostgreSQL bounds.
"""
