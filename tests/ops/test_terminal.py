"""Escaping what a terminal would act on: each such character as its escape, nothing else."""

from __future__ import annotations

import io

from sidecar.ops.terminal import EscapingWriter, escaped


def test_control_and_invisible_characters_are_written_as_their_escapes() -> None:
    assert escaped("run-\x1b[2Kx\x07\x7f\x9b\u202e\u2028\u200b") == (
        "run-\\x1b[2Kx\\x07\\x7f\\x9b\\u202e\\u2028\\u200b"
    )
    # Printable text, whatever its script, and backslashes, are left as they are.
    assert escaped("Zoë 東京 ☃ a\\x1b") == "Zoë 東京 ☃ a\\x1b"
    assert escaped("a\nb\tc\rd", keep="\n\t") == "a\nb\tc\\x0dd"


def test_a_writer_escapes_all_but_the_newline_that_ends_each_write() -> None:
    out = io.StringIO()
    writer = EscapingWriter(out)
    writer.write("run-1\nnothing pending\x1b[1A\n")
    writer.write("no newline\x1b")
    assert out.getvalue() == "run-1\\x0anothing pending\\x1b[1A\nno newline\\x1b"
