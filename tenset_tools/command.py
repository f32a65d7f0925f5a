"""One shape for the subcommand-style command lines (``tenset-tools``, ``tvm-transfer``, ``vta-ext``).

A subcommand is a :class:`Command`: its name, help line, a function adding its arguments and a function
running it (``args -> exit code``). :func:`build_parser` turns a sequence of them into one parser,
:func:`run` parses, dispatches and turns expected errors into one line on stderr, and
:func:`load_commands` reads the commands other distributions contribute through entry points. It lives in
``tenset_tools``, the lowest layer, because ``vta_ext`` and ``tvm_transfer`` both build on it and neither
may be imported here.

Exit status: 0 success, 1 an expected failure (:class:`CommandError` and the ``errors`` a command line
declares), 2 a usage error (a bad option value or input file: :class:`UsageError`, or argparse's own),
130 interrupted (Ctrl-C). ``--debug`` (or ``TVM_TRANSFER_DEBUG=1``) shows the traceback instead.
"""

from __future__ import annotations

import argparse
import math
import os
import shlex
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from importlib.metadata import EntryPoint
from typing import NoReturn

__all__ = [
    "DEBUG_ENV",
    "Command",
    "CommandError",
    "Interrupted",
    "UsageError",
    "bounded_float",
    "bounded_int",
    "build_parser",
    "debug_enabled",
    "load_commands",
    "run",
]

#: Environment variable that, set to ``1``, makes every command line show tracebacks (as ``--debug``).
DEBUG_ENV = "TVM_TRANSFER_DEBUG"


class UsageError(ValueError):
    """A value the user gave (an option, or a file an option names) that cannot be used.

    The message is one line naming the option or field, the value and what is allowed; :func:`run` prints
    it and exits with status 2. A ``ValueError``, so API callers may catch it as one."""


class CommandError(Exception):
    """An expected failure whose message says what to do (e.g. a work dir locked by another run):
    :func:`run` prints it on one line and exits with status 1."""


class Interrupted(KeyboardInterrupt):
    """Ctrl-C, with what was kept: the message (e.g. ``"37 records kept in work/x"``) is printed by
    :func:`run` with the command line that resumes the run when ``resumable``."""

    def __init__(self, message: str, resumable: bool = True) -> None:
        super().__init__(message)
        self.resumable = resumable


@dataclass(frozen=True)
class Command:
    """One subcommand.

    ``description`` heads the subcommand's ``--help``: ``""`` (the default) repeats the help line, ``None``
    shows none. ``defaults`` are parser defaults set after the arguments (a preset of another command's
    options, e.g. ``tvm-transfer demo``).
    """

    name: str
    help: str
    add_arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]
    description: str | None = ""
    defaults: Mapping[str, object] = field(default_factory=dict)


class _OneLineErrorParser(argparse.ArgumentParser):
    """An argument parser whose errors are one line (argparse prints the whole usage first, which for a
    command with many options is a screenful hiding the message)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def _add_debug_argument(parser: argparse.ArgumentParser, default: object) -> None:
    parser.add_argument(
        "--debug",
        action="store_true",
        default=default,
        help=f"show the traceback of an error instead of one line (also: {DEBUG_ENV}=1)",
    )


def build_parser(
    prog: str,
    description: str | None,
    commands: Iterable[Command],
    *,
    metavar: str | None = None,
    add_arguments: Callable[[argparse.ArgumentParser], None] | None = None,
) -> argparse.ArgumentParser:
    """A parser with one subcommand per ``commands`` entry, in order; ``add_arguments`` adds the options
    before the subcommand (e.g. ``--verbose``), ``metavar`` names the subcommand in the usage line.
    ``--debug`` is accepted before and after the subcommand."""
    parser = _OneLineErrorParser(prog=prog, description=description)
    _add_debug_argument(parser, False)
    if add_arguments is not None:
        add_arguments(parser)
    subparsers = parser.add_subparsers(dest="command", required=True, metavar=metavar)
    for command in commands:
        heading = command.help if command.description == "" else command.description
        sub = subparsers.add_parser(command.name, help=command.help, description=heading)
        command.add_arguments(sub)
        # SUPPRESS: a subcommand's default must not overwrite a --debug given before the subcommand.
        _add_debug_argument(sub, argparse.SUPPRESS)
        sub.set_defaults(**command.defaults, run=command.run)
    return parser


def debug_enabled(args: argparse.Namespace | None = None) -> bool:
    """Whether tracebacks are wanted: ``--debug`` in ``args`` or ``TVM_TRANSFER_DEBUG=1``."""
    return bool(getattr(args, "debug", False)) or os.environ.get(DEBUG_ENV, "") not in ("", "0")


def run(
    parser: argparse.ArgumentParser,
    argv: Sequence[str] | None = None,
    *,
    errors: tuple[type[Exception], ...] = (),
    configure: Callable[[argparse.Namespace], None] | None = None,
) -> int:
    """Parse ``argv``, call ``configure`` (e.g. logging) then the chosen command; returns its exit code.

    Errors become one line ``PROG COMMAND: error: MESSAGE`` on stderr: a :class:`UsageError` gives exit
    status 2; a :class:`CommandError` or an exception of a type in ``errors`` (those whose message tells
    the user what to do) gives 1. Ctrl-C gives 130 and one line (with an :class:`Interrupted`, what was
    kept and the command that resumes). Anything else propagates (a bug: its traceback is wanted). With
    ``--debug`` or ``TVM_TRANSFER_DEBUG=1`` every error propagates with its traceback.
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(argv)
    if configure is not None:
        configure(args)
    name = f"{parser.prog} {args.command}"
    try:
        return args.run(args)
    except UsageError as error:
        if debug_enabled(args):
            raise
        print(f"{name}: error: {error}", file=sys.stderr)
        return 2
    except (CommandError, *errors) as error:
        if debug_enabled(args):
            raise
        print(f"{name}: error: {error}", file=sys.stderr)
        return 1
    except KeyboardInterrupt as interrupt:
        if debug_enabled(args):
            raise
        message = f"{name}: interrupted"
        if isinstance(interrupt, Interrupted):
            message += f"; {interrupt}"
            if interrupt.resumable:
                message += f"; resume with: {shlex.join([parser.prog, *argv])}"
        print(message, file=sys.stderr)
        return 130


def refuse_unused(args: argparse.Namespace, options: Mapping[str, tuple[str, object]], needs: str) -> None:
    """Raise :class:`UsageError` naming every option of ``options`` (flag: ``(dest, default)``) that
    ``args`` sets to other than its default, when the run will not read them: ``needs`` says what would
    (e.g. ``"give --trials N to tune first"``). An option accepted and ignored would let a user believe it
    acted."""
    given = [flag for flag, (dest, default) in options.items() if getattr(args, dest, default) != default]
    if given:
        raise UsageError(f"{', '.join(given)}: not used by this run; {needs}, or leave it out")


def bounded_int(minimum: int | None = None, maximum: int | None = None) -> Callable[[str], int]:
    """An argparse ``type``: an integer in ``[minimum, maximum]`` (either bound optional); a value
    outside is refused with a message naming it and the allowed range."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        if (minimum is not None and value < minimum) or (maximum is not None and value > maximum):
            raise argparse.ArgumentTypeError(f"{value} is out of range: {_range_text(minimum, maximum)}")
        return value

    parse.__name__ = "integer"
    return parse


def bounded_float(
    minimum: float | None = None, maximum: float | None = None, *, open_minimum: bool = False
) -> Callable[[str], float]:
    """An argparse ``type``: a finite number in ``[minimum, maximum]`` (``open_minimum``: greater than
    ``minimum``); NaN, infinities and values outside are refused naming the value and the range."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
        low = minimum is not None and (value <= minimum if open_minimum else value < minimum)
        if not math.isfinite(value) or low or (maximum is not None and value > maximum):
            allowed = _range_text(minimum, maximum, open_minimum)
            raise argparse.ArgumentTypeError(f"{text} is out of range: {allowed}")
        return value

    parse.__name__ = "number"
    return parse


def _range_text(minimum: float | None, maximum: float | None, open_minimum: bool = False) -> str:
    low = "" if minimum is None else f"{'>' if open_minimum else '>='} {minimum}"
    high = "" if maximum is None else f"<= {maximum}"
    return " and ".join(p for p in (low, high) if p) or "any finite value"


def load_commands(entry_points: Iterable[EntryPoint], prog: str) -> list[Command]:
    """The commands of ``entry_points``, sorted by entry-point name; each entry point is a
    :class:`Command` or a sequence of them. One that fails to load is reported on stderr and left out."""
    commands: list[Command] = []
    for entry_point in sorted(entry_points, key=lambda e: e.name):
        try:
            loaded = entry_point.load()
        except Exception as error:  # a broken plug-in must not take the built-in commands down
            print(f"{prog}: command {entry_point.name!r} unavailable ({error})", file=sys.stderr)
            continue
        commands += [loaded] if isinstance(loaded, Command) else list(loaded)
    return commands
