"""One shape for the subcommand-style command lines (``tenset-tools``, ``tvm-transfer``, ``vta-ext``).

A subcommand is a :class:`Command`: its name, help line, a function adding its arguments and a function
running it (``args -> exit code``). :func:`build_parser` turns a sequence of them into one parser,
:func:`run` parses, dispatches and turns expected errors into exit code 1, and :func:`load_commands`
reads the commands other distributions contribute through entry points. It lives in ``tenset_tools``, the
lowest layer, because ``vta_ext`` and ``tvm_transfer`` both build on it and neither may be imported here.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from importlib.metadata import EntryPoint

__all__ = ["Command", "build_parser", "load_commands", "run"]


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


def build_parser(
    prog: str,
    description: str | None,
    commands: Iterable[Command],
    *,
    metavar: str | None = None,
    add_arguments: Callable[[argparse.ArgumentParser], None] | None = None,
) -> argparse.ArgumentParser:
    """A parser with one subcommand per ``commands`` entry, in order; ``add_arguments`` adds the options
    before the subcommand (e.g. ``--verbose``), ``metavar`` names the subcommand in the usage line."""
    parser = argparse.ArgumentParser(prog=prog, description=description)
    if add_arguments is not None:
        add_arguments(parser)
    subparsers = parser.add_subparsers(dest="command", required=True, metavar=metavar)
    for command in commands:
        heading = command.help if command.description == "" else command.description
        sub = subparsers.add_parser(command.name, help=command.help, description=heading)
        command.add_arguments(sub)
        sub.set_defaults(**command.defaults, run=command.run)
    return parser


def run(
    parser: argparse.ArgumentParser,
    argv: Sequence[str] | None = None,
    *,
    errors: tuple[type[Exception], ...] = (),
    configure: Callable[[argparse.Namespace], None] | None = None,
) -> int:
    """Parse ``argv``, call ``configure`` (e.g. logging) then the chosen command; returns its exit code.

    An exception of a type in ``errors`` (those whose message tells the user what to do) is printed as
    ``PROG COMMAND: error: MESSAGE`` and gives exit code 1; anything else propagates.
    """
    args = parser.parse_args(argv)
    if configure is not None:
        configure(args)
    try:
        return args.run(args)
    except errors as error:
        print(f"{parser.prog} {args.command}: error: {error}", file=sys.stderr)
        return 1


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
