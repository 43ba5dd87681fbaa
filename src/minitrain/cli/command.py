"""What a command of the table is (cli/__init__.py): its arguments, its help, its handler, and what it tells the
user after Ctrl-C. Plain classes, not dataclasses: `minitrain --help` imports as little as it can."""
from __future__ import annotations

import argparse
from collections.abc import Callable

from minitrain.core.errors import UserError

# After Ctrl-C, unless the command says more: every file is written whole or not at all (run/files/atomic.py), so
# nothing half-written is left
AGAIN = "run the same command again"


class Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line and exit code 2 like every other bad input."""

    def error(self, message: str):
        raise UserError(f"{self.prog}: {message} (see '{self.prog} --help')")


class Arg:
    """One argument: the names and keywords of argparse's add_argument."""

    def __init__(self, *names: str, **options: object):
        self.names, self.options = names, options


class Command:
    """One sub-command: what its --help says, its arguments and the handler that runs it."""

    def __init__(self, name: str, help: str, description: str, args: tuple[Arg, ...] = (),
                 run: Callable[[argparse.Namespace], int] | None = None, actions: tuple[Command, ...] = (),
                 interrupted: str = AGAIN, distributed: bool = False):
        self.name = name
        self.help = help  # one line, in `minitrain --help`
        self.description = description  # the paragraph at the top of `minitrain NAME --help`
        self.args = args
        self.run = run  # None when the command has sub-commands (actions), e.g. `minitrain learner init`
        self.actions = actions
        self.interrupted = interrupted  # what to run after Ctrl-C ("minitrain: interrupted; ...")
        self.distributed = distributed  # runs under torchrun's ranks (only `train`); the others refuse to


def add_commands(parser: argparse.ArgumentParser, commands: tuple[Command, ...], dest: str, metavar: str,
                 required: bool = False) -> None:
    """The table's commands as argparse sub-parsers of `parser`; each parser's defaults name its Command."""
    sub = parser.add_subparsers(dest=dest, metavar=metavar, parser_class=Parser, required=required)
    for command in commands:
        p = sub.add_parser(command.name, help=command.help, description=command.description)
        for a in command.args:
            p.add_argument(*a.names, **a.options)
        if command.actions:  # `minitrain learner init`: the action is required
            add_commands(p, command.actions, dest="action", metavar="ACTION", required=True)
        if command.run is not None:
            p.set_defaults(func=command.run, spec=command)
