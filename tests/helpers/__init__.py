"""What the suites, the chaos harness and the benchmarks share, each written once: the
environment a child `actonce` gets (env), waiting for a server's health (health), the
PostgreSQL servers and their databases (postgres), locks held by another process
(locks), and a real OTLP receiver that traces are exported to (otlp)."""
