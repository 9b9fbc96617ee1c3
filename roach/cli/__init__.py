"""The command line: parse, call, render. ``roach = "roach.cli:main"``; the commands live in this package's modules."""

from roach.cli.app import CONTEXT, RoachGroup, cli, main

__all__ = ["CONTEXT", "RoachGroup", "cli", "main"]
