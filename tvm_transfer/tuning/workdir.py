"""Guarding a MetaSchedule work dir: one run at a time, and a torn last line set aside before TVM reads it.

**Lock.** :func:`work_dir_lock` takes an exclusive ``fcntl.flock`` on ``<work dir>/tvm-transfer.lock`` for
a run that writes the database (tune, tune-network, collect). A second run on the same work dir is refused
with a :class:`WorkDirBusyError` naming the holder (pid, command, start time), or waits with
``wait=True``. The kernel drops the lock when its process dies, even by ``kill -9``; the holder line that
such a process leaves in the file is reported once (a stale lock taken over) and replaced. The lock is
re-entrant within a process, so the functions that tune (:func:`~tvm_transfer.tuning.session.tune_contexts`)
take it themselves and a command line may also hold it around a whole command.

**Torn tail.** MetaSchedule appends one JSON line per workload (``database_workload.json``) and per
measured candidate (``database_tuning_record.json``); a process killed in the middle of an append leaves
a last line cut short, and TVM's loader then aborts the whole database (``parallel_for_dynamic error with
Unexpected EOF``, naming no file). :func:`set_aside_torn_tails` moves such a line to a side file
``<file>.torn-<UTC time>`` and logs one line saying so; every complete line is kept. A complete last line
that only lacks its newline gets one (else the next append would be glued to it).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import shlex
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from tenset_tools.atomic import atomic_output
from tenset_tools.command import CommandError, UsageError
from tenset_tools.features import target_id
from tenset_tools.metaschedule import RECORD_FILE, WORKLOAD_FILE, database_target_ids

if TYPE_CHECKING:
    import tvm

__all__ = [
    "LOCK_FILE",
    "WorkDirBusyError",
    "check_work_dir",
    "check_work_dir_target",
    "count_records",
    "needs_repair",
    "set_aside_torn_tails",
    "work_dir_lock",
]

log = logging.getLogger(__name__)

#: The lock file a writing run holds in its work dir (its content: the holder, as one JSON line).
LOCK_FILE = "tvm-transfer.lock"

# Reading backwards from the end of a database file, this many bytes at a time (a record line is a few KB).
_CHUNK = 1 << 16


class WorkDirBusyError(CommandError):
    """Another process holds the work dir's lock (its message names the process and what to do)."""


@dataclass
class _Held:
    fd: int
    depth: int


# Locks this process holds, by real path of the work dir: flock conflicts between two descriptors of the
# same file even within one process, so nested users share the first descriptor.
_held: dict[str, _Held] = {}
_held_guard = threading.Lock()


def check_work_dir(work_dir: str | os.PathLike, option: str = "--work-dir") -> Path:
    """``work_dir`` as a path, after checking that it is (or can be created as) a writable directory;
    raises :class:`~tenset_tools.command.UsageError` naming ``option`` and the path otherwise."""
    path = Path(work_dir)
    if path.exists() and not path.is_dir():
        raise UsageError(f"{option} {str(path)!r} is a file; give a directory (created when missing)")
    existing = path
    while not existing.exists():  # the nearest existing ancestor is where the directory would be made
        existing = existing.parent
    if not existing.is_dir():
        raise UsageError(f"{option} {str(path)!r}: {existing} is a file, so the directory cannot be made")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise UsageError(f"{option} {str(path)!r}: {existing} is not writable by this user")
    return path


def check_work_dir_target(work_dir: str | os.PathLike, target: tvm.target.Target) -> None:
    """Raise ``ValueError`` when ``work_dir`` holds records measured for another target than ``target``
    (compared by target id, ``kind/mcpu/num-cores``): MetaSchedule's database
    ignores the target, so a run for ``target`` would tune on from them and build them as its own."""
    wanted = target_id(target)
    others = sorted(database_target_ids(work_dir) - {wanted})
    if others:
        raise ValueError(
            f"{work_dir} holds records measured for {', '.join(others)}, which a run for {wanted} would "
            "take for its own: use it with the target it was tuned for (the id reads kind/mcpu/num-cores: "
            "--mcpu and --num-cores), or another work dir"
        )


def _holder_text(holder: dict) -> str:
    return (
        f"pid {holder.get('pid', '?')} ({holder.get('command', '?')}, started {holder.get('started', '?')})"
    )


def _read_holder(fd: int) -> dict | None:
    """The holder line left in a lock file, or ``None`` when it is empty or unreadable."""
    text = os.pread(fd, 4096, 0).decode("utf-8", "replace").strip()
    if not text:
        return None
    try:
        holder = json.loads(text)
    except json.JSONDecodeError:
        return {"command": text[:200]}
    return holder if isinstance(holder, dict) else None


def _write_holder(fd: int) -> None:
    holder = {
        "pid": os.getpid(),
        "command": shlex.join([Path(sys.argv[0]).name, *sys.argv[1:]]) if sys.argv else "?",
        "started": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
    }
    os.ftruncate(fd, 0)
    os.pwrite(fd, (json.dumps(holder) + "\n").encode(), 0)


@contextlib.contextmanager
def work_dir_lock(work_dir: str | os.PathLike, *, wait: bool = False) -> Iterator[Path]:
    """Hold ``work_dir``'s lock for the block (creating the directory); yields the work dir.

    When another process holds it: raise :class:`WorkDirBusyError` naming that process, or with ``wait``
    log one line and block until it is released. Re-entrant within a process."""
    path = Path(work_dir)
    path.mkdir(parents=True, exist_ok=True)
    key = os.path.realpath(path)
    with _held_guard:
        held = _held.get(key)
        if held is not None:
            held.depth += 1
    if held is None:
        held = _Held(_acquire(path, wait), 1)
        with _held_guard:
            _held[key] = held
    try:
        yield path
    finally:
        with _held_guard:
            held.depth -= 1
            release = held.depth == 0
            if release:
                del _held[key]
        if release:
            # Emptied before unlocking: a holder line found later means its process died holding the lock.
            os.ftruncate(held.fd, 0)
            fcntl.flock(held.fd, fcntl.LOCK_UN)
            os.close(held.fd)


def _acquire(path: Path, wait: bool) -> int:
    fd = os.open(path / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _holder_text(_read_holder(fd) or {})
            if not wait:
                raise WorkDirBusyError(
                    f"work dir {path} is in use by {holder}; wait for it to end, run again with --wait, or "
                    "use another --work-dir"
                ) from None
            log.warning("work dir %s is in use by %s; waiting for it to end", path, holder)
            fcntl.flock(fd, fcntl.LOCK_EX)
        stale = _read_holder(fd)
        if stale is not None and stale.get("pid") != os.getpid():
            log.warning(
                "took over the stale lock of %s in %s (that process has ended)", _holder_text(stale), path
            )
        _write_holder(fd)
    except BaseException:
        os.close(fd)
        raise
    return fd


# ---- torn tails ------------------------------------------------------------------------------------------


def _is_complete(line: bytes) -> bool:
    """Whether ``line`` is a whole database line: a JSON array of two items (both files' format)."""
    try:
        value = json.loads(line)
    except (ValueError, UnicodeDecodeError):
        return False
    return isinstance(value, list) and len(value) == 2


def _last_line_start(file, end: int) -> int:
    """Offset just after the last newline before ``end`` (0 when there is none)."""
    position = end
    while position > 0:
        size = min(_CHUNK, position)
        position -= size
        file.seek(position)
        index = file.read(size).rfind(b"\n")
        if index >= 0:
            return position + index + 1
    return 0


def _tail(path: Path) -> tuple[int, bool, bool]:
    """``(start, complete, ends_with_newline)`` of ``path``'s last non-empty line (read only)."""
    with open(path, "rb") as file:
        size = file.seek(0, os.SEEK_END)
        if size == 0:
            return 0, True, True
        file.seek(size - 1)
        ends_with_newline = file.read(1) == b"\n"
        start = _last_line_start(file, size - 1 if ends_with_newline else size)
        file.seek(start)
        tail = file.read(size - start)
    return start, not tail.strip() or _is_complete(tail), ends_with_newline


def _database_files(work_dir: str | os.PathLike) -> list[Path]:
    return [p for p in (Path(work_dir) / WORKLOAD_FILE, Path(work_dir) / RECORD_FILE) if p.is_file()]


def needs_repair(work_dir: str | os.PathLike) -> bool:
    """Whether a database file of ``work_dir`` ends in a torn line or lacks its final newline (read
    only: cheap enough to call before every open)."""
    return any(not complete or not newline for _, complete, newline in map(_tail, _database_files(work_dir)))


def _set_aside_torn_tail(path: Path) -> Path | None:
    """Move ``path``'s incomplete last line to a side file (returned), or return ``None`` when the last
    line is complete (adding its newline if it lacks one)."""
    start, complete, ends_with_newline = _tail(path)
    with open(path, "rb+") as file:
        if complete:
            if not ends_with_newline:
                file.seek(0, os.SEEK_END)
                file.write(b"\n")
            return None
        file.seek(start)
        tail = file.read()
        side = path.with_name(f"{path.name}.torn-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}")
        while side.exists():
            side = side.with_name(side.name + "_")
        with atomic_output(side) as temporary:
            temporary.write_bytes(tail)
        file.truncate(start)
        file.flush()
        os.fsync(file.fileno())
    return side


def set_aside_torn_tails(work_dir: str | os.PathLike) -> list[Path]:
    """Set aside the torn last line of ``work_dir``'s two database files (see the module text); returns
    the side files written and logs one line for each. Call it with the work dir's lock held: a running
    tuner's half-written line looks torn too."""
    side_files = []
    for path in _database_files(work_dir):
        side = _set_aside_torn_tail(path)
        if side is not None:
            log.warning(
                "%s ended in an incomplete line (a run was killed while writing it): moved it to %s, kept "
                "every complete line",
                path,
                side.name,
            )
            side_files.append(side)
    return side_files


def count_records(work_dir: str | os.PathLike) -> int:
    """Lines of ``work_dir``'s tuning-record file (measured candidates of every task; 0 without one)."""
    path = Path(work_dir) / RECORD_FILE
    if not path.is_file():
        return 0
    with open(path, "rb") as lines:
        return sum(1 for line in lines if line.strip())
