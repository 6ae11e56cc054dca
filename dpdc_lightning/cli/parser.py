"""The one argument parser of every entry point: argparse, with its errors as one ``UserError``
line (argparse itself prints a usage block and exits)."""

from __future__ import annotations

import argparse
import re
from typing import NoReturn

from dpdc_lightning.errors import UserError


class Parser(argparse.ArgumentParser):
    def __init__(self, prog: str, usage: str) -> None:
        super().__init__(prog=prog, usage=usage, add_help=False, allow_abbrev=False)
        self.add_argument("-h", "--help", action="store_true")

    def error(self, message: str) -> NoReturn:
        if message.startswith("unrecognized arguments: "):
            flag = message.split(": ", 1)[1].split()[0]
            raise UserError(f"unknown flag {flag}; {self.usage}")
        missing = re.match(r"argument (\S+?)(?:/\S+)?: expected one argument", message)
        if missing:  # e.g. "--images needs a file"
            action = next(a for a in self._actions if missing.group(1) in a.option_strings)
            raise UserError(f"{missing.group(1)} needs {action.metavar or 'a value'}; {self.usage}")
        raise UserError(f"{message}; {self.usage}")

    def parse(self, argv: list[str]) -> argparse.Namespace:
        """Flags anywhere; every other argument (``key=value``, a folder) in ``args.rest``."""
        args, rest = self.parse_known_args(argv)
        unknown = [a for a in rest if a.startswith("-")]
        if unknown:
            self.error(f"unrecognized arguments: {unknown[0]}")
        args.rest = rest
        return args
