"""Exceptions told in one line: for the status column of a table, or the cause in a named error."""

from __future__ import annotations

import re
from collections.abc import Iterator

__all__ = ["error_chain", "failure_line", "one_line"]

MESSAGE_CHARS = 240  # a message is one line of a table or a terminal: longer texts are cut here
_ANSI = re.compile(r"\x1b\[[0-9;]*m")  # colour codes some exporters put in their messages


def one_line(error: BaseException) -> str:
    """``error`` in one line: its type and first line, and those of its root cause if another; at most
    :data:`MESSAGE_CHARS` characters."""
    text = _first_line(error)
    root = list(error_chain(error))[-1]
    if root is not error:
        text += f" (caused by {_first_line(root)})"
    return text if len(text) <= MESSAGE_CHARS else text[: MESSAGE_CHARS - 3] + "..."


def failure_line(message: str) -> str:
    """The line of a TVM error text that says what failed, at most :data:`MESSAGE_CHARS` characters: a
    rendered schedule error's ``Error message:`` line; the last line when the first only says that an
    exception occurred (a builder's or runner's header, its traceback follows); else the first line."""
    lines = _lines(message) or [""]
    described = [line for line in lines if line.startswith("Error message:")]
    if described:
        return described[0].removeprefix("Error message:").strip()[:MESSAGE_CHARS]
    line = lines[-1] if "exception occurred" in lines[0].lower() else lines[0]
    return line[:MESSAGE_CHARS]


def error_chain(error: BaseException | None) -> Iterator[BaseException]:
    """``error``, then what caused it (``__cause__``, else ``__context__``), down to the root."""
    seen = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        yield error
        error = error.__cause__ or error.__context__


def _lines(text: str) -> list[str]:
    """The non-empty lines of ``text``, stripped, without colour codes."""
    return [line.strip() for line in _ANSI.sub("", text).splitlines() if line.strip()]


def _first_line(error: BaseException) -> str:
    lines = _lines(str(error))
    name = type(error).__name__
    if not lines:
        return name
    return lines[0] if lines[0].startswith(name) else f"{name}: {lines[0]}"
