"""A load agent for the drain test on the Python client: it runs runs back to back, three
creates each, one JSON line per acknowledged write on stdout, until a call fails; then it
prints that failure as the client classified it, and exits 0.

    python drain_agent.py TARGET NAME
"""

from __future__ import annotations

import itertools
import json
import sys

from actonce_client import ActonceError, Client


def main(target: str, name: str) -> None:
    with Client(target, timeout=30) as client:
        try:
            for run in itertools.count():
                attempt = client.begin(f"{name}-{run}", "drain", checkpoint="c")
                for n in range(3):
                    written = attempt.create("ticket", {"agent": name, "run": run, "n": n})
                    print(json.dumps({"id": written.id}), flush=True)
                attempt.end()
        except ActonceError as error:
            failure = {"code": error.code.name, "reason": error.reason,
                       "failure_class": str(error.failure_class),
                       "message": error.message}  # fmt: skip
            print(json.dumps(failure), flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:3])
