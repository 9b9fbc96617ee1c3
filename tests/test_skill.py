"""`roach skill`: the skill file for agents is generated from the command tree and the clusters, and every
`roach ...` line it shows names a command that exists with options that command takes."""

from __future__ import annotations

import re
from pathlib import Path

import click
from click.testing import CliRunner

from roach.cli.agent import skill as skill_mod
from roach.cli.agent.skillcheck import command_lines, text_problems
from roach.cli.app import cli
from roach.cli.jobs import submit
from roach.fleet.cluster import known_clusters

REPO = Path(__file__).resolve().parent.parent


def test_every_command_line_of_the_skill_and_its_pages_exists_with_its_options():
    s = skill_mod.generate()
    lines = command_lines(s.text)
    assert len(lines) > 40  # the workflow's examples and every command's usage
    assert text_problems(s.text, cli) == []
    for page in s.pages.values():
        assert command_lines(page) and text_problems(page, cli) == []


def test_every_command_line_of_the_docs_exists_with_its_options():
    """The same check over the docs the skill and its pages draw on, so they cannot drift either."""
    pages = [*sorted((REPO / "docs").rglob("*.md")), REPO / "README.md"]
    assert sum(len(command_lines(p.read_text())) for p in pages) > 100
    assert [f"{p.relative_to(REPO)}: {x}" for p in pages for x in text_problems(p.read_text(), cli)] == []


def test_the_check_finds_a_command_or_an_option_that_does_not_exist():
    text = (
        "Use `roach submit pkg.m:f --resources CPU --no-such-option` and `roach nosuch`.\n"
        "```\nroach clusters show lab --bogus\nroach clones prune --node n1\nroach watch --json | jq .\n```\n"
        "`roach -h`, `roach COMMAND -h`, `roach --nope`, `roach lab up [--prolog P] [--a/--no-a]`, `roach ls/stat`"
    )
    assert text_problems(text, cli) == [
        "'roach submit pkg.m:f --resources CPU --no-such-option': `roach submit` has no option '--no-such-option'",
        "'roach nosuch': roach has no command 'nosuch'",
        "'roach --nope': `roach` has no option '--nope'",
        "'roach lab up [--prolog P] [--a/--no-a]': `roach lab up` has no option '--a'",
        "'roach lab up [--prolog P] [--a/--no-a]': `roach lab up` has no option '--no-a'",
        "'roach stat': roach has no command 'stat'",
        "'roach clusters show lab --bogus': `roach clusters show` has no option '--bogus'",
    ]


def test_each_commands_reference_is_its_help_and_options(monkeypatch):
    template = (skill_mod.files("roach.cli.agent") / "skill.md").read_text()
    named = re.findall(r"\{\{command ([\w-]+)\}\}", template)
    assert {"submit", "sweep", "watch", "status", "logs", "why", "promote", "move", "resume", "cancel", "clean"} <= set(
        named
    )
    text = skill_mod.generate().text
    for name in named:
        with click.Context(cli) as ctx:
            command = cli.get_command(ctx, name)
        assert command is not None and command.help.strip().splitlines()[0] in text, name
    # an option added to a command is in the next skill without anyone writing it there
    extra = click.Option(["--brand-new"], is_flag=True, help="An option nobody documented by hand.")
    monkeypatch.setattr(submit, "params", [*submit.params, extra])
    assert "- `--brand-new`: An option nobody documented by hand." in skill_mod.generate().text


def test_a_cluster_marked_metered_in_clusters_toml_says_so(tmp_path, monkeypatch):
    assert "- budget: not metered" in skill_mod.generate().pages["clusters/lab.md"]
    toml = tmp_path / "clusters.toml"
    toml.write_text("[clusters.lab]\nmetered = true\n")
    monkeypatch.setenv("ROACH_CLUSTERS_TOML", str(toml))
    s = skill_mod.generate()
    page = s.pages["clusters/lab.md"]
    assert "- budget: **metered** (" in page
    assert "--resources CPU --json` (only within a grant" in page
    assert "| lab | **metered** (" in s.text


def test_print_and_install(tmp_path):
    printed = CliRunner().invoke(cli, ["skill"], catch_exceptions=False)
    assert printed.exit_code == 0 and printed.stdout.startswith("---\nname: roach\n")
    r = CliRunner().invoke(cli, ["skill", "--install", str(tmp_path)], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    root = tmp_path / "roach"
    assert sorted(p.relative_to(root).as_posix() for p in root.rglob("*.md")) == [
        "SKILL.md",
        *[f"clusters/{n}.md" for n in known_clusters()],
    ]
    assert (root / "SKILL.md").read_text() == printed.stdout
    assert "## The site page (docs/clusters/lab.md)" in (root / "clusters" / "lab.md").read_text()
