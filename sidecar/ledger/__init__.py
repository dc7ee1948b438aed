"""The audit ledger: append-only, hash-chained, durable before any answer.

``base`` holds the small interface every backend implements; ``sqlite`` is
the embedded default.
"""
