"""Files only their owner may open, whatever the umask: the data folder (0700), the
databases and their WAL and shared-memory files, exports and Unix sockets (0600).

They hold every artifact, step result and audit event: any other local user who can read
them reads it all. A mode is set when the sidecar creates the file, and an existing file or
folder that the sidecar's user owns is tightened at start, so that a data folder made by an
earlier release, or under a loose umask, is closed too. What another user owns (a shared
volume's root, say) is left as it is: the sidecar cannot change it, and must not fail on it.
"""

from __future__ import annotations

import contextlib
import os
import stat
from pathlib import Path
from typing import IO

PRIVATE_FOLDER = 0o700
PRIVATE_FILE = 0o600
# SQLite's companions of a database file, which it creates with the database's own mode.
SQLITE_COMPANIONS = ("-wal", "-shm", "-journal")


def private_folder(path: Path) -> Path:
    """``path`` as a folder, created 0700 if missing; tightened to 0700 if it is this
    user's own and not a shared one (a sticky folder such as /tmp is never changed)."""
    path.mkdir(parents=True, exist_ok=True, mode=PRIVATE_FOLDER)
    found = path.stat()
    if found.st_uid == os.getuid() and not found.st_mode & stat.S_ISVTX:
        _tighten(path, found, PRIVATE_FOLDER)
    return path


def private_file(path: Path) -> Path:
    """``path`` as a file only its owner may read or write: created empty with 0600 if
    missing (before any library opens it with the umask's mode), else tightened."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.exists():
        os.close(os.open(path, os.O_CREAT | os.O_RDWR, PRIVATE_FILE))
    # Only a chmod for a file that exists: closing a descriptor of a SQLite file drops every
    # POSIX lock this process holds on it, those of SQLite's open connections included (the
    # ledger and the embedded store share one file), and another process could then take
    # the file for its own and reset the log under them.
    tighten(path)
    return path


def private_database(path: Path) -> Path:
    """A SQLite database as :func:`private_file` makes it, and its companions tightened:
    SQLite gives a new WAL the database's mode, an earlier release's one kept the umask's."""
    private_file(path)
    for suffix in SQLITE_COMPANIONS:
        tighten(Path(f"{path}{suffix}"))
    return path


def tighten(path: Path, mode: int = PRIVATE_FILE) -> None:
    """Set ``mode`` on ``path`` if it exists and is this user's own."""
    with contextlib.suppress(FileNotFoundError):
        found = path.stat()
        if found.st_uid == os.getuid():
            _tighten(path, found, mode)


def new_private_text(path: Path) -> IO[str]:
    """A new file (never one that exists) opened for writing text, 0600 from its creation."""
    fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, PRIVATE_FILE)
    return os.fdopen(fd, "w", encoding="utf-8")


def _tighten(path: Path, found: os.stat_result, mode: int) -> None:
    if stat.S_IMODE(found.st_mode) != mode:
        os.chmod(path, mode)
