"""How the sidecar's background threads take their work, and how the kernel runs them.

The ledger's writer and the embedded store's batch thread wake up for every commit, and a
write's answer waits for each of those wake-ups. They run under the kernel's normal policy
on purpose. SCHED_BATCH would let a woken thread wait out a full time slice of whatever
else runs on its core: on idle cores that saves about a fifth of the CPU per write, but
beside an agent whose container keeps both cores busy every hand-off of a write waits a
slice, and an audited write's p50 goes from about 4.5 ms to 40 ms. A policy that delays an
answer has no place on the answer's path, and every background thread here is on it.
"""

from __future__ import annotations

import queue
from typing import TypeVar

T = TypeVar("T")


def next_batch(jobs: queue.SimpleQueue[T | None], most: int) -> tuple[list[T], bool]:
    """Block for one job, then take what else is queued, up to ``most``.

    Returns the batch and whether the stop mark (``None``) was taken; a batch
    is empty only when the stop mark came first.
    """
    first = jobs.get()
    if first is None:
        return [], True
    batch = [first]
    while len(batch) < most:
        try:
            more = jobs.get_nowait()
        except queue.Empty:
            break
        if more is None:
            return batch, True
        batch.append(more)
    return batch, False
