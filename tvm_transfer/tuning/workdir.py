"""A MetaSchedule work dir and everything a run needs to know of it, in one object: :class:`WorkDir`.

A work dir holds one run's database (MetaSchedule's two JSON-lines files), the settings every later run
on it must repeat (:class:`WorkDirSettings`: which model and convolution layout it was tuned for, whether
schedules may re-lay out the weights, how candidates were timed), and the tasks a transfer pack applied
(:class:`AppliedTask`). Its records' target is read off the records themselves.

**Lock.** :meth:`WorkDir.lock` takes an exclusive ``fcntl.flock`` on ``<work dir>/tvm-transfer.lock`` for
a run that writes the database (tune, tune-network, collect). A second run on the same work dir is refused
with a :class:`WorkDirBusyError` naming the holder (pid, command, start time), or waits with
``wait=True``. The kernel drops the lock when its process dies, even by ``kill -9``; the holder line that
such a process leaves in the file is reported once (a stale lock taken over) and replaced. The lock is
re-entrant within a process, so the functions that tune take it themselves and a command line may also
hold it around a whole command.

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
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING

from tenset_tools.atomic import atomic_output, atomic_write_text
from tenset_tools.command import CommandError, UsageError
from tenset_tools.features import target_id
from tenset_tools.metaschedule import (
    RECORD_FILE,
    SIDECAR_FILE,
    WORKLOAD_FILE,
    Sidecar,
    database_target_ids,
    read_sidecar,
    task_id_of_mod,
    write_sidecar,
)

if TYPE_CHECKING:
    import tvm
    from tvm.s_tir import meta_schedule as ms

__all__ = [
    "APPLIED_FILE",
    "LOCK_FILE",
    "SETTINGS_FILE",
    "AppliedTask",
    "DatabaseReadError",
    "WorkDir",
    "WorkDirBusyError",
    "WorkDirMismatchError",
    "WorkDirSettings",
    "count_records",
    "needs_repair",
    "open_database",
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


class DatabaseReadError(CommandError):
    """TVM cannot read a work dir's MetaSchedule database (a corrupt line other than a torn last one)."""


def open_database(work_dir: str | os.PathLike) -> ms.database.JSONDatabase:
    """The MetaSchedule database of ``work_dir`` (created when missing).

    A last line cut short by a killed run is first moved to a side file, under the work dir's lock
    (raises :class:`WorkDirBusyError` when another run is writing). Raises :class:`DatabaseReadError`
    naming the work dir when TVM still cannot read the database."""
    from tvm.s_tir import meta_schedule as ms

    work_dir = Path(work_dir)
    work_dir.mkdir(parents=True, exist_ok=True)
    if needs_repair(work_dir):
        with work_dir_lock(work_dir):
            set_aside_torn_tails(work_dir)
    try:
        return ms.database.JSONDatabase(work_dir=str(work_dir))
    except Exception as error:  # TVM's loader raises plain runtime errors, without the file's name
        reason = (str(error).strip().splitlines() or [type(error).__name__])[-1]
        raise DatabaseReadError(
            f"{work_dir}: TVM cannot read this MetaSchedule database ({reason}); "
            f"`tenset-tools convert {work_dir} -o FILE.parquet` lists its corrupt lines"
        ) from error


# ---- the work dir as one object --------------------------------------------------------------------------

#: The settings every later run on a work dir must repeat (:class:`WorkDirSettings`), as one JSON object.
SETTINGS_FILE = "tvm_transfer_run.json"
#: The tasks of a work dir whose record came from a transfer pack (:class:`AppliedTask` by workload hash).
APPLIED_FILE = "transfer_pack.json"


class WorkDirMismatchError(ValueError):
    """A run's settings contradict what its work dir was tuned with (the message names the option)."""


@dataclass(frozen=True)
class WorkDirSettings:
    """How a work dir's records were made, which every later run on it must repeat (``None``: not said).

    ``network`` is the model's name with its convolution layout (``torchvision:resnet18@nhwc``): records of
    convolutions in one layout match no task of the other. ``layout_free``: whether schedules could re-lay
    out the weights (the tasks differ either way). ``measure_caches``: ``"warm"`` or ``"cold"``, how
    candidates were timed (records timed one way do not compare with the other)."""

    network: str | None = None
    layout_free: bool | None = None
    measure_caches: str | None = None

    def merged(self, other: WorkDirSettings) -> WorkDirSettings:
        """These settings with every unsaid one taken from ``other``."""
        unsaid = {f.name: getattr(other, f.name) for f in fields(self) if getattr(self, f.name) is None}
        return replace(self, **unsaid)


#: The type of each setting in :data:`SETTINGS_FILE` (``None`` allowed for each).
_SETTING_TYPES = {"network": str, "layout_free": bool, "measure_caches": str}


def _read_settings(path: Path) -> WorkDirSettings:
    """The settings in ``path``; raises :class:`WorkDirMismatchError` naming the file when it is not a JSON
    object of known settings of the right types."""
    try:
        content = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise WorkDirMismatchError(f"{path} cannot be read ({error}): {_REWRITE_SETTINGS}") from None
    if not isinstance(content, dict) or any(
        not isinstance(content.get(name), (kind, type(None))) for name, kind in _SETTING_TYPES.items()
    ):
        raise WorkDirMismatchError(f"{path} is not a settings file tvm-transfer wrote: {_REWRITE_SETTINGS}")
    return WorkDirSettings(**{name: content.get(name) for name in _SETTING_TYPES})


_REWRITE_SETTINGS = "delete it if you know how the work dir was tuned, and run with those settings again"


@dataclass(frozen=True)
class AppliedTask:
    """A task whose schedule came from a pack: ``seconds`` is the latency the pack measured on
    ``target_id`` (seconds), ``rank`` the record's rank among the pack's records of the task (0: fastest)."""

    task: str
    workload: str
    target_id: str
    seconds: float
    rank: int
    pack: str


class WorkDir(os.PathLike):
    """A MetaSchedule work dir: its database, lock, settings and the tasks a transfer pack applied.

    Made once per run (:meth:`checked` for a path a user gave); path-like, so it goes wherever a path
    does. Reading never creates the directory; writing (the lock, the database, the settings) does."""

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = Path(path)

    @classmethod
    def checked(cls, path: str | os.PathLike, option: str = "--work-dir") -> WorkDir:
        """The work dir at ``path`` after checking that it is (or can be created as) a writable directory;
        raises :class:`~tenset_tools.command.UsageError` naming ``option`` and the path otherwise."""
        path = Path(path)
        if path.exists() and not path.is_dir():
            raise UsageError(f"{option} {str(path)!r} is a file; give a directory (created when missing)")
        existing = path
        while not existing.exists():  # the nearest existing ancestor is where the directory would be made
            existing = existing.parent
        if not existing.is_dir():
            raise UsageError(f"{option} {str(path)!r}: {existing} is a file, so the directory cannot be made")
        if not os.access(existing, os.W_OK | os.X_OK):
            raise UsageError(f"{option} {str(path)!r}: {existing} is not writable by this user")
        return cls(path)

    def __fspath__(self) -> str:
        return str(self.path)

    def __truediv__(self, name: str) -> Path:
        return self.path / name

    def __str__(self) -> str:
        return str(self.path)

    def __repr__(self) -> str:
        return f"WorkDir({str(self.path)!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, WorkDir) and other.path == self.path

    def __hash__(self) -> int:
        return hash(self.path)

    # -- database

    def lock(self, *, wait: bool = False) -> contextlib.AbstractContextManager[Path]:
        """:func:`work_dir_lock` of this work dir."""
        return work_dir_lock(self.path, wait=wait)

    def database(self) -> ms.database.JSONDatabase:
        """:func:`open_database` of this work dir."""
        return open_database(self.path)

    def record_count(self) -> int:
        """Measured candidates of every task in the database (the pack's applied records included)."""
        return count_records(self.path)

    def measured_here(self) -> bool:
        """Whether the database holds a record measured in this work dir: one beyond the records a transfer
        pack applied (timed where the pack was made)."""
        return self.record_count() > len(self.applied_tasks())

    # -- settings and checks

    def settings(self) -> WorkDirSettings:
        """What the work dir says it was tuned with; a work dir from before :data:`SETTINGS_FILE` existed
        says its network and timing through the data layer's sidecar."""
        path = self.path / SETTINGS_FILE
        if path.is_file():
            return _read_settings(path)
        sidecar = read_sidecar(self.path)
        if sidecar is None:
            return WorkDirSettings()
        legacy = json.loads((self.path / SIDECAR_FILE).read_text()).get("measure_caches")
        return WorkDirSettings(network=sidecar.network, measure_caches=legacy)

    def check(self, settings: WorkDirSettings, target: tvm.target.Target | None = None) -> None:
        """Raise :class:`WorkDirMismatchError` when ``settings`` (a run's) or ``target`` contradict what the
        work dir was tuned with: another convolution layout, layout rewrite on or off, candidates timed the
        other way, records measured for another target (compared by target id, ``kind/mcpu/num-cores``:
        MetaSchedule's database ignores the target, so a run would tune on from them as its own)."""
        recorded = self.settings()
        if settings.network and recorded.network:
            from tvm_transfer.networks import conv_layout_of

            tuned, wanted = conv_layout_of(recorded.network), conv_layout_of(settings.network)
            if tuned != wanted:
                raise WorkDirMismatchError(
                    f"{self} was tuned for {recorded.network!r}, convolutions {tuned}: tune and compile it "
                    f"with that layout (--conv-layout {tuned}), or use another work dir"
                )
        if None not in (settings.layout_free, recorded.layout_free) and (
            settings.layout_free != recorded.layout_free
        ):
            tuned, flag = ("with", "without") if recorded.layout_free else ("without", "with")
            raise WorkDirMismatchError(
                f"{self} was tuned {tuned} weight layout rewrite: run {flag} --no-layout-rewrite, or use "
                "another work dir"
            )
        if None not in (settings.measure_caches, recorded.measure_caches) and (
            settings.measure_caches != recorded.measure_caches
        ):
            raise WorkDirMismatchError(
                f"{self} was tuned with its candidates timed {recorded.measure_caches}, and records timed "
                f"{settings.measure_caches} would not compare with them: tune it with --measure-caches "
                f"{recorded.measure_caches}, or use another work dir"
            )
        if target is not None:
            self.check_target(target)

    def check_target(self, target: tvm.target.Target) -> None:
        """Raise :class:`WorkDirMismatchError` when the work dir holds records measured for another target
        than ``target`` (see :meth:`check`)."""
        wanted = target_id(target)
        others = sorted(database_target_ids(self.path) - {wanted})
        if others:
            raise WorkDirMismatchError(
                f"{self} holds records measured for {', '.join(others)}, which a run for {wanted} would "
                "take for its own: use it with the target it was tuned for (the id reads "
                "kind/mcpu/num-cores: --mcpu and --num-cores), or another work dir"
            )

    def record_settings(self, settings: WorkDirSettings) -> None:
        """Write ``settings`` where the work dir says nothing yet: the network and layout rewrite at once,
        how candidates are timed only before the first measurement here (so that it holds for every
        record). Call it after :meth:`check`."""
        recorded = self.settings()
        if settings.measure_caches is not None and self.measured_here():
            settings = replace(settings, measure_caches=recorded.measure_caches)
        merged = recorded.merged(settings)
        if merged != recorded or not (self.path / SETTINGS_FILE).is_file():
            self.path.mkdir(parents=True, exist_ok=True)
            atomic_write_text(self.path / SETTINGS_FILE, json.dumps(asdict(merged), indent=1, sort_keys=True))

    def name_tasks(self, network: str, tasks: Sequence[ms.ExtractedTask]) -> None:
        """Name ``network``'s tasks (task id: name and weight) in the data layer's sidecar, once, so that
        the run can be converted and packed later."""
        if not (self.path / SIDECAR_FILE).is_file():
            self.path.mkdir(parents=True, exist_ok=True)
            named = {task_id_of_mod(t.dispatched[0]): (t.task_name, float(t.weight)) for t in tasks}
            write_sidecar(self.path, Sidecar(network, named))

    # -- transfer pack

    def applied_tasks(self) -> dict[str, AppliedTask]:
        """``{workload hash: AppliedTask}`` of the tasks a transfer pack applied here (empty when none)."""
        path = self.path / APPLIED_FILE
        if not path.is_file():
            return {}
        content = json.loads(path.read_text(encoding="utf-8"))
        return {key: AppliedTask(**value) for key, value in content.get("tasks", {}).items()}

    def record_applied(self, added: Mapping[str, AppliedTask]) -> None:
        """Add ``added`` (by workload hash) to the tasks a transfer pack applied here."""
        content = {"tasks": {k: asdict(v) for k, v in {**self.applied_tasks(), **added}.items()}}
        atomic_write_text(self.path / APPLIED_FILE, json.dumps(content, indent=1, sort_keys=True))
