"""All-or-nothing output files: a failed command never destroys an earlier result.

A writer fills a temporary file beside the target (same directory, so the same filesystem and an atomic
rename) and :func:`os.replace` moves it onto the target only when writing succeeded; on any exception the
temporary is removed and the target keeps its previous content. It lives in ``tenset_tools``, the lowest
layer, so that the data tools, the TVM plug-ins and ``vta_ext`` all write their outputs the same way.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from collections.abc import Iterator
from pathlib import Path

__all__ = ["atomic_output", "atomic_write_text"]


@contextlib.contextmanager
def atomic_output(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; on success of the block it replaces ``path``.

    The block creates and writes the temporary file; when the block raises, the temporary is removed and
    ``path`` is left as it was. Raises :class:`FileNotFoundError` before the block runs when the parent
    directory of ``path`` does not exist.
    """
    target = Path(path)
    parent = target.parent
    if not parent.is_dir():
        raise FileNotFoundError(f"cannot write {target}: directory {parent} does not exist")
    # The writer creates the temporary itself (not mkstemp), so the output gets the usual permissions.
    temporary = parent / f".{target.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp"
    try:
        yield temporary
        os.replace(temporary, target)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    """Write ``text`` to ``path`` (UTF-8) all at once: the previous content stays if writing fails."""
    with atomic_output(path) as temporary:
        temporary.write_text(text, encoding="utf-8")
