"""What an ``aimeasure`` subcommand is made of: its declaration, the context it runs in, the usage
error it raises and the exit codes.

The command (:mod:`pytest_aimeasure.cli.main`) imports the modules that add subcommands; those modules
import this one, never the command, so the two never import each other.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

from pytest_aimeasure.store.runs import RunStore

__all__ = ["EXIT_OK", "EXIT_STORE", "EXIT_USAGE", "CliContext", "Subcommand", "UsageError"]

EXIT_OK, EXIT_STORE, EXIT_USAGE = 0, 1, 2


class UsageError(Exception):
    """Bad input from the user (unknown run id or dimension): exit 2 with the message."""


@dataclass
class CliContext:
    """What a subcommand gets besides its arguments."""

    store_path: Path
    out: TextIO = field(default_factory=lambda: sys.stdout)
    err: TextIO = field(default_factory=lambda: sys.stderr)
    inp: TextIO = field(default_factory=lambda: sys.stdin)
    """Where an interactive subcommand (``aimeasure label --interactive``) reads answers."""

    def store(self) -> RunStore:
        return RunStore(self.store_path)

    def print(self, *parts: object) -> None:
        print(*parts, file=self.out)


@dataclass(frozen=True)
class Subcommand:
    name: str
    help: str
    add_arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace, CliContext], int]
