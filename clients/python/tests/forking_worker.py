"""A worker that forks a process per delivery, so that a kill loop pays for
importing an agent framework once: ``python forking_worker.py MODULE``.

It imports MODULE and runs its ``warm()`` (a run that connects nowhere, so
that lazy imports are made once, before any fork), then reads one job a line on
stdin (JSON); for each, a forked child runs ``MODULE.run(job)`` and exits, and
the worker answers one line: the signal that ended the child (9 when it killed
itself), or its exit code. The worker makes no connection itself: each child makes its own.
"""

from __future__ import annotations

import faulthandler
import importlib
import json
import os
import sys
import traceback

DELIVERY_LIMIT = 30.0  # seconds; a delivery takes well under one


def serve(module_name: str) -> None:
    module = importlib.import_module(module_name)
    module.warm()
    for line in sys.stdin:
        job = json.loads(line)
        child = os.fork()
        if child == 0:
            # A delivery that hangs fails with every thread's stack, not the suite's timeout.
            faulthandler.dump_traceback_later(DELIVERY_LIMIT, exit=True)
            code = 0
            try:
                module.run(job)
            except BaseException:
                traceback.print_exc()
                code = 1
            finally:
                sys.stderr.flush()
                os._exit(code)
        _, status = os.waitpid(child, 0)
        ended = {"signal": os.WTERMSIG(status)} if os.WIFSIGNALED(status) else {}
        print(json.dumps({"code": os.WEXITSTATUS(status) if os.WIFEXITED(status) else None,
                          "signal": 0, **ended}), flush=True)  # fmt: skip


if __name__ == "__main__":
    serve(sys.argv[1])
