"""Checking a text's `roach ...` command lines against the command tree: every command it names exists, with
every option it gives. The skill is generated and then checked with this (tests/test_skill.py), so a command
renamed or an option dropped fails a test instead of misleading an agent."""

from __future__ import annotations

import re
import shlex

import click

# `roach ...` in inline code, and the lines of fenced code blocks
_INLINE = re.compile(r"`(roach [^`]+)`")
_FENCE = re.compile(r"^```.*?$(.*?)^```", re.S | re.M)


def command_lines(text: str) -> list[str]:
    """Every `roach ...` command the text shows: in inline code and on the lines of its code blocks."""
    found = [m.group(1) for m in _INLINE.finditer(_FENCE.sub("", text))]
    for block in _FENCE.finditer(text):
        found += [ln.strip() for ln in block.group(1).splitlines() if ln.strip().startswith("roach ")]
    return found


def _tokens(line: str) -> list[str]:
    line = line.split(" #", 1)[0].split(" | ", 1)[0]  # a trailing comment, a pipe into another program
    try:
        words = shlex.split(line)
    except ValueError:  # an unclosed quote in prose: words are enough here
        words = line.split()
    out: list[str] = []
    for w in words:  # `[--json]`, `--a|--b`, `--flag/--no-flag`, `--x=V`: each option on its own
        for part in re.split(r"[|\[\]{}()]", w):
            out += part.split("/") if part.startswith("--") else [part] if part else []
    return out


def _options(command: click.Command, ctx: click.Context) -> set[str]:
    names = {"-h", "--help"}
    for p in command.get_params(ctx):
        if isinstance(p, click.Option):
            names |= {*p.opts, *p.secondary_opts}
    return names


def problems(line: str, group: click.Group) -> list[str]:
    """What is wrong with one `roach ...` line: an unknown command, or an option that command does not take."""
    words = _tokens(line)[1:]
    if words and (words[0] == "..." or words[0].isupper()):
        return []  # `roach COMMAND -h`, `roach ...`: a placeholder for any command
    if words and "/" in words[0] and not words[0].startswith("-"):  # `roach ls/status/logs`: several commands
        return [p for name in words[0].split("/") for p in problems(f"roach {name}", group)]
    command: click.Command = group
    path = ["roach"]
    ctx = click.Context(group)
    while isinstance(command, click.Group) and words and not words[0].startswith("-"):
        sub = command.get_command(ctx, words[0])
        if sub is None:
            if command is group:
                return [f"{line!r}: roach has no command {words[0]!r}"]
            break  # an argument of a group that runs without a subcommand
        command, path = sub, [*path, words.pop(0)]
        ctx = click.Context(command, parent=ctx, info_name=path[-1])
    if command is group and (not words or not all(w.startswith("-") for w in words)):
        return [f"{line!r}: names no command"]
    known = _options(command, ctx)
    if "--" in words:  # after `--`, the words are a command of its own (`roach lab shell -- pip install -q x`)
        words = words[: words.index("--")]
    return [
        f"{line!r}: `{' '.join(path)}` has no option {w.split('=', 1)[0]!r}"
        for w in words
        if w.startswith("-") and w != "--" and not re.fullmatch(r"-\d.*", w) and w.split("=", 1)[0] not in known
    ]


def text_problems(text: str, group: click.Group) -> list[str]:
    """Every problem of every `roach ...` line in ``text``."""
    return [p for line in command_lines(text) for p in problems(line, group)]
