"""The chains a ledger is partitioned into: which chain a run's events go to.

A ledger holds a fixed number of hash chains, recorded in it (one head row per chain in
``audit_chains``) when it is created or migrated, so that every sidecar sharing it agrees.
A run's events all go to one chain, picked by a stable hash of its run id: everything an
append reads under its chain's lock (the run's fencing rows, its rule, a step's decisions
before its send permit) concerns that one run, so the chain's lock serializes it as the
single head once did, while runs of other chains append at the same time.

SQLite keeps one chain: its file has one writer, so more would gain nothing. A ledger of
one chain numbers its events from its head, without gaps; a ledger of many takes numbers
from one sequence, unique, increasing along each chain, but neither gap-free nor in
commit order across chains: whoever follows the ledger keeps a cursor per chain.
"""

from __future__ import annotations

import hashlib

__all__ = ["POSTGRES_CHAINS", "chain_of"]

# The chains of a PostgreSQL ledger created or migrated without ``--chains``: enough that
# the runs a fleet appends to at one moment seldom share one (8 runs at once make 28 pairs:
# 0.22 pairs on one chain expected among 128 chains, 1.75 among 16; a shared chain is a
# batch waiting on another), few enough that verify's walk per chain stays cheap (a query
# per chain) and the heads stay one small table.
POSTGRES_CHAINS = 128
# The most a ledger may have: each append locks its chains' rows, and verify walks each.
MAX_CHAINS = 1024


def chain_of(run_id: str, chains: int) -> int:
    """The chain of ``run_id``'s events in a ledger of ``chains`` chains."""
    if chains <= 1:
        return 0
    digest = hashlib.sha256(run_id.encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") % chains
