"""The core: the write path in phases, steps, reads and the live attempts.

It speaks the project's own types only; the fronts translate their protocols
to it, and it reaches the ledger and the store through small interfaces.
"""
