"""``actonce audit list|show|export|verify``: the ledger for operators.

Exit codes: 0 when the command did what it was asked (``verify``: the chain is
intact), 1 when ``verify`` found a bad event, 2 when the ledger cannot be read.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from sidecar.config import DEFAULT_DATA_DIR
from sidecar.ledger import inspect
from sidecar.ledger.base import LedgerError, LedgerReader


def open_reader(values: dict[str, Any]) -> LedgerReader:
    if values.get("audit_dsn"):
        from sidecar.ledger.postgres import PostgresLedgerReader

        return PostgresLedgerReader(str(values["audit_dsn"]))
    from sidecar.ledger.sqlite import SqliteLedgerReader

    path = values.get("audit_db") or DEFAULT_DATA_DIR / "audit.db"
    return SqliteLedgerReader(Path(path))


def _progress(done: int, total: int) -> None:
    # Progress goes to stderr, so that `export > file` stays clean JSON lines.
    print(f"\r{done}/{total} events", end="" if done < total else "\n", file=sys.stderr)


def run_audit(command: str, values: dict[str, Any], run_id: str = "") -> int:
    try:
        reader = open_reader(values)
    except LedgerError as exc:
        print(f"actonce: error: {exc}", file=sys.stderr)
        return 2
    try:
        if command == "list":
            inspect.list_runs(reader, sys.stdout)
        elif command == "show":
            inspect.show_run(reader, run_id, sys.stdout)
        elif command == "export":
            inspect.export(reader, sys.stdout, _progress)
        elif command == "verify":
            verdict = inspect.verify(reader, _progress)
            if not verdict.intact:
                print(
                    f"ledger TAMPERED: first bad event #{verdict.first_bad}: {verdict.problem} "
                    f"({verdict.checked} events before it are intact)"
                )
                return 1
            print(f"ledger intact: {verdict.checked} events, hash chain verified")
        return 0
    except Exception as exc:  # a ledger that cannot be read is not a traceback for the operator
        print(f"actonce: error: cannot read the ledger: {exc}", file=sys.stderr)
        return 2
    finally:
        reader.close()
