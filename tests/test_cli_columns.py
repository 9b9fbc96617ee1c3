"""roach.cli.columns: ls's table without rich: whole rows when piped, fitted and folded on a terminal."""

from __future__ import annotations

import click

from roach.cli.columns import fit, plain, styled, table_lines

HEADERS = ("run id", "job id", "cluster", "name", "state", "submitted", "log")
ROW = (
    "bench-009999",
    "109999",
    "lab",
    "bench",
    [("COMPLETED", {"fg": "green"})],
    "2026-11-04T15:00:00Z",
    "/tmp/roach-bench/logs/bench-009999_109999.out",
)


def test_piped_each_row_is_one_whole_line_under_its_header():
    lines = [click.unstyle(ln) for ln in table_lines(HEADERS, [ROW, ROW], None)]
    assert len(lines) == 3
    assert lines[0].split() == ["run", "id", "job", "id", "cluster", "name", "state", "submitted", "log"]
    assert lines[1].split() == [plain(c) for c in ROW]
    assert lines[1].index("109999") == lines[0].index("job id")  # columns line up, two spaces apart
    assert len({len(ln) for ln in lines}) == 1


def test_on_a_terminal_the_widest_columns_narrow_in_turn_and_their_cells_fold():
    # 80 columns: log (45) narrows to submitted's 20, then both share the rest (the first takes the odd one)
    assert fit([12, 6, 7, 5, 9, 20, 45], 80) == [12, 6, 7, 5, 9, 14, 15]
    lines = [click.unstyle(ln) for ln in table_lines(HEADERS, [ROW], 80)]
    assert [len(ln) for ln in lines] == [80] * 4
    assert lines[1].split() == [
        "bench-009999",
        "109999",
        "lab",
        "bench",
        "COMPLETED",
        "2026-11-04T15:",
        "/tmp/roach-benc",
    ]
    assert lines[2].split() == ["00:00Z", "h/logs/bench-00"]
    assert lines[3].split() == ["9999_109999.out"]


def test_a_cell_folds_at_its_spaces_and_keeps_its_styles():
    state = [("PENDING (Priority)", {"fg": "yellow"}), (" held 1h02m", {})]
    lines = table_lines(["state"], [[state]], 12)
    assert [click.unstyle(ln).rstrip() for ln in lines] == ["state", "PENDING", "(Priority)", "held 1h02m"]
    assert lines[1] == styled([("PENDING", {"fg": "yellow"})]) + " " * 5
    assert fit([3, 3], 1) == [1, 1]  # never below one character
