"""Integration: the promise end to end. A run's writes land once, over real gRPC, with the
real reference store and ledger on SQLite and on PostgreSQL: retries, restarts, replays,
steps, refusals and bad input, each as an agent meets it."""
