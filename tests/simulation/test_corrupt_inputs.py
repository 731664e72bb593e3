"""Any corruption of a valid trace or budget file (every cell replaced in turn by each junk value; at random, cells
added or dropped, rows repeated or dropped) either replays or stops with exit code 2 and an error line that names
the file, the line and the field (``error: FILE:LINE: FIELD: ...``, FIELD ``csv`` for a row the CSV reader cannot
split): never a traceback, never a policy bug."""

from __future__ import annotations

import re
import uuid
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import pytest

from scheduling.simulation.cli import main

NORMALIZED = "job_id,submit_s,team,user,gpus,duration_s,gpu_type,kind,utilization,time_limit_s,priority\n" + "".join(
    f"j{i},{i * 60},lab/{'ab'[i % 2]},u{i % 3},{1 + i % 4},{600 + 30 * i},{('', 'H100')[i % 2]},"
    f"{('train', 'debug', 'eval')[i % 3]},0.5,{('', '3600')[i % 2]},{('', 'high', 'low')[i % 3]}\n" for i in range(8))
BUDGETS = "team,gpu_hours\nlab,100\nlab/a,40\nlab/b,40\n"
PHILLY = "timestamp,duration,num_gpus,gpu_time,cluster\n" + "".join(
    f"2017-10-01 0{i}:00:00,{100 + i},{1 + i % 3},0,{'ab'[i % 2]}\n" for i in range(6))
PHILLY_BUDGETS = "team,gpu_hours\nphilly,100\nphilly/a,40\nphilly/b,40\n"
JUNK = ["", "-1", "0", "nan", "inf", "1e400", "x", ",", '"', "lab/a", "lab", "9" * 30, "-0", "1.5", " ", "é", "\x00",
        "H100", "debug", "2017-13-01 00:00:00"]


def _pristine(philly: bool) -> tuple[str, str]:
    """The valid (trace, budgets) of the format the damage is done to."""
    return (PHILLY, PHILLY_BUDGETS) if philly else (NORMALIZED, BUDGETS)


ERROR_LINE = re.compile(r"^error: (?P<path>.+\.csv):(?P<line>\d+): (?P<field>\w+): \S", re.MULTILINE)


def _replays_or_refuses(run, trace: str, budgets: str, philly: bool, nodes: str, policy: str,
                        capsys) -> tuple[str, int] | None:
    """Replays, or checks the refusal's error line names a file, a line of it and a column of that file's format;
    returns (the file's name, the line) for a refusal, None for a replay."""
    run.mkdir()
    (run / "t.csv").write_text(trace, encoding="utf-8")
    (run / "b.csv").write_text(budgets, encoding="utf-8")
    args = ["--trace", str(run / "t.csv"), "--budgets", str(run / "b.csv"), "--nodes", nodes, "--policy", policy,
            "--workers", "1", "--no-progress", *(["--format", "philly"] if philly else [])]
    code = main(args)  # (an exception here is the failure these tests look for)
    err = capsys.readouterr().err
    assert code in (0, 2), err
    if code == 0:
        return None
    found = ERROR_LINE.search(err)
    assert found, err
    path = Path(found["path"])
    assert path.parent == run and path.name in ("t.csv", "b.csv"), err
    which = 0 if path.name == "t.csv" else 1
    text, pristine = (trace, budgets)[which], _pristine(philly)[which]
    assert 1 <= int(found["line"]) <= len(text.split("\n")), err
    # a column of the file's format (its header may be the damaged line), or the CSV reader's own
    assert found["field"] in (*pristine.split("\n")[0].split(","), "csv"), err
    return path.name, int(found["line"])


@pytest.mark.parametrize(("philly", "damaged"), [(False, "trace"), (False, "budgets"), (True, "trace"),
                                                 (True, "budgets")])
def test_each_junk_value_in_each_cell_of_a_row_replays_or_stops_with_an_error_line(tmp_path, capsys, philly, damaged):
    trace, budgets = _pristine(philly)
    lines = (trace if damaged == "trace" else budgets).split("\n")
    row = 2  # the second data row (or budget line)
    for column in range(len(lines[row].split(","))):
        for junk in JUNK:
            cells = lines[row].split(",")
            cells[column] = junk
            text = "\n".join([*lines[:row], ",".join(cells), *lines[row + 1:]])
            files = (text, budgets) if damaged == "trace" else (trace, text)
            where = _replays_or_refuses(tmp_path / uuid.uuid4().hex, *files, philly, "2x8:H100",
                                        "budget,fifo-backfill", capsys)
            # the damaged line itself, or (a budget line's team changed) a trace line whose team is now unknown
            assert where in (None, ("t.csv" if damaged == "trace" else "b.csv", row + 1)) or (
                damaged == "budgets" and where[0] == "t.csv"), (column, junk, where)


@st.composite
def corrupted(draw, text: str) -> str:
    """``text`` with one to three rows damaged."""
    lines = text.split("\n")
    for _ in range(draw(st.integers(1, 3))):
        i = draw(st.integers(0, len(lines) - 1))
        cells = lines[i].split(",")
        damage = draw(st.sampled_from(["replace", "insert", "drop cell", "repeat row", "drop row"]))
        if damage == "replace":
            cells[draw(st.integers(0, len(cells) - 1))] = draw(st.sampled_from(JUNK))
        elif damage == "insert":
            cells.insert(draw(st.integers(0, len(cells))), draw(st.sampled_from(JUNK)))
        elif damage == "drop cell" and len(cells) > 1:
            del cells[draw(st.integers(0, len(cells) - 1))]
        elif damage == "repeat row":
            lines.insert(i, lines[i])
            continue
        elif damage == "drop row":
            del lines[i]
            continue
        lines[i] = ",".join(cells)
    return "\n".join(lines)


@st.composite
def inputs(draw) -> tuple[bool, str, str]:
    """(Philly?, trace, budgets), one of the two files corrupted."""
    philly = draw(st.booleans())
    trace, budgets = _pristine(philly)
    if draw(st.booleans()):
        trace = draw(corrupted(trace))
    else:
        budgets = draw(corrupted(budgets))
    return philly, trace, budgets


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(inputs(), st.sampled_from(["2x8:H100", "1x4", "2x8:H100,1x8:B200"]))
def test_a_corrupted_input_replays_or_stops_with_an_error_line(tmp_path, capsys, files, nodes):
    philly, trace, budgets = files
    _replays_or_refuses(tmp_path / uuid.uuid4().hex, trace, budgets, philly, nodes, "all", capsys)
