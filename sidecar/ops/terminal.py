"""Caller-chosen text made safe to show: every character a terminal (or a reader) would take
for something other than text, written out as its escape.

A run id, a rule, a tool's name, a reason: callers choose them, and the CLI prints them
to an operator's terminal, the console to a page. An ANSI sequence in a run id could erase
the line of ``audit pending`` that names it (and print "nothing pending" in its place),
OSC 52 write the clipboard, a bidirectional override reorder what a line seems to say.
:func:`escaped` writes each such character as ``\\x1b`` (``\\u202e`` past Latin-1):
control characters (C0, DEL, C1), the line and paragraph separators, and the invisible
formatting characters (bidirectional overrides and isolates, zero-width characters).
:class:`EscapingWriter` does it to every line a function writes to a stream.
"""

from __future__ import annotations

import re
from typing import TextIO

# C0, DEL, C1; soft hyphen; Arabic letter mark; Mongolian vowel separator; zero-width and
# direction marks; line and paragraph separators; embeddings and overrides; word joiner and
# invisible operators; isolates; byte order mark; interlinear annotations.
_UNSAFE = re.compile(
    "[\x00-\x1f\x7f-\x9f\u00ad\u061c\u180e\u200b-\u200f\u2028-\u202e\u2060-\u2064"
    "\u2066-\u206f\ufeff\ufff9-\ufffb]"
)


def _escape(found: re.Match[str]) -> str:
    code = ord(found.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def escaped(text: str, *, keep: str = "") -> str:
    """``text`` with every character a terminal would act on written as its escape; those
    in ``keep`` (say, a page's newlines) stay as they are."""
    if keep:
        return "".join(
            part if part in keep else _UNSAFE.sub(_escape, part)
            for part in re.split(f"([{re.escape(keep)}])", text)
        )
    return _UNSAFE.sub(_escape, text)


class EscapingWriter:
    """A text stream for a function that writes whole lines: each ``write`` is escaped but
    for the one newline that ends it, so a line cannot end early, or do anything else."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        body, newline = (text[:-1], "\n") if text.endswith("\n") else (text, "")
        return self._stream.write(escaped(body) + newline)

    def flush(self) -> None:
        self._stream.flush()
