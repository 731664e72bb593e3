"""Reading traces and budget files: good rows parse, every bad row stops with file, line and field."""

from __future__ import annotations

from pathlib import Path

import pytest

from scheduling.simulation.cli import main
from scheduling.simulation.trace import TraceError, load_budgets, load_philly, load_trace, parse_nodes

HEADER = "job_id,submit_s,team,gpus,duration_s,kind,utilization\n"
TEAMS = ["lab", "lab/a", "lab/b"]


def assert_refused(load, path, line: int, field: str, words: str) -> None:
    """``load(path)`` stops with a TraceError naming the file, the line and the field, its message holding ``words``."""
    with pytest.raises(TraceError) as err:
        load(str(path))
    assert (err.value.path, err.value.line, err.value.field) == (str(path), line, field)
    assert words in err.value.message
    assert str(err.value) == f"{path}:{line}: {field}: {err.value.message}"


def test_normalized_trace_parses_and_windows(tiny_trace):
    jobs = load_trace(str(tiny_trace), TEAMS)
    assert [j.id for j in jobs] == [f"j{i}" for i in range(1, 9)]
    j1, j4, j5 = jobs[0], jobs[3], jobs[4]
    assert (j1.team, j1.gpus, j1.duration_s, j1.utilization, j1.user) == ("lab/a", 2, 3600.0, 0.9, "ann")
    assert j4.kind == "eval" and j4.utilization is None
    assert j5.gpu_type == "H100"
    window = load_trace(str(tiny_trace), TEAMS, start_s=20, days=40 / 86400)
    assert [(j.id, j.submit_s) for j in window] == [("j3", 0.0), ("j4", 10.0), ("j5", 20.0), ("j6", 30.0)]


def test_missing_job_id_is_generated_from_the_line(tmp_path, write_file):
    path = write_file(tmp_path / "t.csv", "submit_s,team,gpus,duration_s\n5,lab/a,1,10\n0,lab/b,1,10\n")
    jobs = load_trace(str(path), TEAMS)
    assert [(j.id, j.submit_s) for j in jobs] == [("L3", 0.0), ("L2", 5.0)]


@pytest.mark.parametrize(
    ("row", "line", "field", "words"),
    [
        ("j1,0,lab/a,1,-5,,", 2, "duration_s", "> 0"),
        ("j1,0,lab/a,1,0,,", 2, "duration_s", "> 0"),
        ("j1,0,lab/a,1,abc,,", 2, "duration_s", "not a number"),
        ("j1,0,lab/a,1,1e30,,", 2, "duration_s", "1e30 s is more than 100 years: not a run time in seconds"),
        ("j1,0,lab/a,0,10,,", 2, "gpus", ">= 1"),
        ("j1,0,lab/a,1.5,10,,", 2, "gpus", "not a whole number"),
        ("j1,0,lab/a,,10,,", 2, "gpus", "not a whole number"),
        ("j1,0,lab/zzz,1,10,,", 2, "team", "unknown team 'lab/zzz'"),
        ("j1,-1,lab/a,1,10,,", 2, "submit_s", ">= 0"),
        ("j1,0,lab/a,1,10,batch,", 2, "kind", "train, debug, eval"),
        ("j1,0,lab/a,1,10,,1.5", 2, "utilization", "0..1"),
    ],
)
def test_each_bad_field_names_file_line_and_field(tmp_path, write_file, row, line, field, words):
    path = write_file(tmp_path / "bad.csv", HEADER + row + "\n")
    assert_refused(lambda p: load_trace(p, TEAMS), path, line, field, words)


def test_error_line_counts_from_the_header(tmp_path, write_file):
    path = write_file(tmp_path / "bad.csv", HEADER + "j1,0,lab/a,1,10,,\nj2,5,lab/b,1,10,,\nj3,6,lab/b,-2,10,,\n")
    with pytest.raises(TraceError) as err:
        load_trace(str(path), TEAMS)
    assert (err.value.line, err.value.field) == (4, "gpus")


def test_missing_column_and_duplicate_id(tmp_path, write_file):
    path = write_file(tmp_path / "nocol.csv", "job_id,submit_s,team,gpus\nj1,0,lab/a,1\n")
    with pytest.raises(TraceError) as err:
        load_trace(str(path), TEAMS)
    assert (err.value.line, err.value.field) == (1, "duration_s")
    path = write_file(tmp_path / "dup.csv", HEADER + "j1,0,lab/a,1,10,,\nj1,1,lab/a,1,10,,\n")
    with pytest.raises(TraceError) as err:
        load_trace(str(path), TEAMS)
    assert (err.value.line, err.value.field) == (3, "job_id") and "line 2" in err.value.message


def test_philly_window_team_and_relative_times(tmp_path, write_file):
    path = write_file(
        tmp_path / "philly.csv",
        """
        timestamp,duration,num_gpus,gpu_time,cluster
        2017-09-30 23:00:00,100.0,1,100.0,aaa
        2017-10-01 00:00:10,200.0,2,400.0,aaa
        2017-10-01 12:00:10,300.0,8,2400.0,bbb
        2017-10-02 00:00:10,400.0,1,400.0,aaa
        """,
    )
    jobs = load_philly(str(path), ["philly", "philly/aaa", "philly/bbb"], start="2017-10-01", days=1)
    assert [(j.team, j.submit_s, j.gpus, j.duration_s) for j in jobs] == [
        ("philly/aaa", 0.0, 2, 200.0), ("philly/bbb", 43200.0, 8, 300.0),
    ]
    assert jobs[0].line == 3
    every = load_philly(str(path), None)
    assert len(every) == 4 and every[0].submit_s == 0.0


@pytest.mark.parametrize(
    ("rows", "line", "field", "words"),
    [
        ("2017-10-01 00:00:00,10,0,0,aaa\n", 2, "num_gpus", ">= 1"),
        ("2017-10-01 00:00:00,10,1,10,zzz\n", 2, "cluster", "unknown team 'philly/zzz'"),
        ("2017-10-01 00:00:00,10,1,10,\n", 2, "cluster", "empty virtual cluster"),
        ("2017-10-01 00:00:00,-3,1,10,aaa\n", 2, "duration", "> 0"),
        ("2017-10-01 00:00:00,0,1,10,aaa\n", 2, "duration", "> 0"),
        ("2017-10-01 00:00:00,long,1,10,aaa\n", 2, "duration", "not a number"),
        ("2017-10-01 00:00:00,4e9,1,10,aaa\n", 2, "duration", "4e9 s is more than 100 years"),  # (a replay for ever)
        ("2017-10-01 00:00:05,10,1,10,aaa\n2017-10-01 00:00:00,10,1,10,aaa\n", 3, "timestamp", "not sorted"),
        ("yesterday,10,1,10,aaa\n", 2, "timestamp", "not a timestamp"),
    ],
)
def test_philly_bad_rows_name_file_line_and_field(tmp_path, write_file, rows, line, field, words):
    path = write_file(tmp_path / "p.csv", "timestamp,duration,num_gpus,gpu_time,cluster\n" + rows)
    assert_refused(lambda p: load_philly(p, ["philly/aaa"]), path, line, field, words)


@pytest.mark.parametrize(("num_gpus", "words"), [("inf", "not a whole number"), ("1e400", "not a whole number"),
                                                  ("2.5", "not a whole number"), ("1_000", "not a whole number")])
def test_philly_gpu_counts_that_are_not_whole_numbers_name_the_field(tmp_path, write_file, num_gpus, words):
    path = write_file(tmp_path / "p.csv", f"timestamp,duration,num_gpus,gpu_time,cluster\n"
                                          f"2017-10-01 00:00:00,10,{num_gpus},0,aaa\n")
    with pytest.raises(TraceError) as err:
        load_philly(str(path), ["philly/aaa"], start="2017-10-01")
    assert (err.value.line, err.value.field) == (2, "num_gpus") and words in err.value.message


def test_whole_gpu_counts_written_as_floats_read_in_both_formats(tmp_path, write_file):
    """pandas writes an integer column with a missing value as floats (8.0): that is still 8 GPUs."""
    path = write_file(tmp_path / "t.csv", HEADER + "j1,0,lab/a,2.0,10,,\n")
    assert load_trace(str(path), TEAMS)[0].gpus == 2
    path = write_file(tmp_path / "p.csv", "timestamp,duration,num_gpus,gpu_time,cluster\n"
                                          "2017-10-01 00:00:00,10,8.0,80,aaa\n")
    assert load_philly(str(path), ["philly/aaa"])[0].gpus == 8


def test_philly_timestamps_with_an_offset_blank_rows_and_other_date_forms(tmp_path, write_file):
    head = "timestamp,duration,num_gpus,gpu_time,cluster\n"
    path = write_file(tmp_path / "tz.csv", head + "2017-10-01 00:00:45+00:00,10,1,10,aaa\n,,,,\n"
                                                  "2017-10-01 02:00:45+02:00,10,1,10,aaa\n")
    jobs = load_philly(str(path), ["philly/aaa"], start="2017-10-01", days=1)
    assert [j.submit_s for j in jobs] == [0.0, 0.0]  # 02:00:45+02:00 is 00:00:45 UTC; the blank row is skipped
    # a row before the window written with an offset is passed over, not the end of the file; half a second runs
    path = write_file(tmp_path / "early.csv", head + "2017-09-30 23:00:00+00:00,10,1,10,aaa\n"
                                                     "2017-10-01 00:00:10,0.5,1,0.5,aaa\n")
    assert [(j.submit_s, j.duration_s) for j in load_philly(str(path), ["philly/aaa"], start="2017-10-01")] == [
        (0.0, 0.5)]
    path = write_file(tmp_path / "us.csv", head + "10/01/2017 00:00:45,10,1,10,aaa\n")
    with pytest.raises(TraceError) as err:  # before: silently before the window, so an empty replay
        load_philly(str(path), ["philly/aaa"], start="2017-10-01")
    assert (err.value.line, err.value.field) == (2, "timestamp") and "YYYY-MM-DD" in err.value.message


def test_an_unclosed_quote_names_the_line_it_opens_on(tmp_path, write_file):
    path = write_file(tmp_path / "t.csv", HEADER + 'j1,0,lab/a,1,10,,\n"j2,5,lab/a,1,10,,\nj3,6,lab/a,1,10,,\n')
    with pytest.raises(TraceError) as err:
        load_trace(str(path), TEAMS)
    assert (err.value.line, err.value.field) == (3, "csv") and "never closed" in err.value.message


@pytest.mark.parametrize("encoding", ["latin-1", "utf-16"])
def test_a_file_that_is_not_utf8_names_the_file_and_says_so(tmp_path, encoding):
    path = tmp_path / "t.csv"
    path.write_bytes((HEADER + "j1,0,lab/a,1,10,,\nj2,0,lab/a,1,10,,\n# Jos\u00e9\n").encode(encoding))
    with pytest.raises(TraceError) as err:
        load_trace(str(path), TEAMS)
    assert err.value.field == "encoding" and "not UTF-8" in err.value.message and err.value.path == str(path)


def test_budgets_tree_and_implied_parent(tmp_path, write_file):
    path = write_file(tmp_path / "b.csv", "team,gpu_hours\nlab/x/p,30\nlab/x/q,10\nlab/y,60\n")
    b = load_budgets(str(path))
    assert b.grant == {"lab/x/p": 30, "lab/x/q": 10, "lab/y": 60, "lab/x": 40, "lab": 100}
    assert b.parent["lab/x/p"] == "lab/x" and b.parent["lab"] is None
    assert b.shares() == pytest.approx({"lab/x/p": 0.3, "lab/x/q": 0.1, "lab/y": 0.6})


@pytest.mark.parametrize(
    ("text", "line", "field", "words"),
    [
        ("team,gpu_hours\nlab,100\nlab/a,60\nlab/b,50\n", 2, "gpu_hours", "children are granted 110 (10 more)"),
        # a thousandth over, in numbers whose first six digits agree: the message shows the difference
        ("team,gpu_hours\nlab,3449.751\nlab/a,3000.001\nlab/b,449.751\n", 2, "gpu_hours",
         "has 3449.751 GPU-hours but its children are granted 3449.752 (0.001 more)"),
        ("team,gpu_hours\nlab/a,-1\n", 2, "gpu_hours", ">= 0"),
        ("team,gpu_hours\nlab/a,lots\n", 2, "gpu_hours", "not a number"),
        ("team,gpu_hours\nlab/a,1\nlab/a,2\n", 3, "team", "listed twice"),
        ("team,hours\nlab/a,1\n", 1, "gpu_hours", "missing column"),
        ("team,gpu_hours\nlab//a,1\n", 2, "team", "bad team path"),
    ],
)
def test_budget_file_errors(tmp_path, write_file, text, line, field, words):
    path = write_file(tmp_path / "b.csv", text)
    assert_refused(load_budgets, path, line, field, words)


def test_node_spec():
    nodes = parse_nodes("2x8:H100,1x4:B200")
    assert [(n.id, n.gpus, n.gpu_type) for n in nodes] == [
        ("h100-000", 8, "H100"), ("h100-001", 8, "H100"), ("b200-000", 4, "B200"),
    ]
    with pytest.raises(ValueError, match="--nodes"):
        parse_nodes("8xH100")


def test_node_spec_without_a_type_is_one_generic_type():
    """``--nodes 16x2,12x8`` (Philly's 2- and 8-GPU machines) needs no type; a typed group keeps its own."""
    nodes = parse_nodes("2x2, 1x8,1x8:B200")
    assert [(n.id, n.gpus, n.gpu_type) for n in nodes] == [
        ("gpu-000", 2, "GPU"), ("gpu-001", 2, "GPU"), ("gpu-002", 8, "GPU"), ("b200-000", 8, "B200"),
    ]

def test_cli_prints_error_with_file_line_field_and_exits_2(tmp_path, write_file, budgets_file, capsys):
    path = write_file(tmp_path / "bad.csv", HEADER + "j1,0,lab/a,1,10,,\nj2,0,lab/c,1,10,,\n")
    code = main(["--trace", str(path), "--nodes", "1x8:H100", "--budgets", str(budgets_file), "--policy",
                 "fifo-backfill"])
    assert code == 2
    assert capsys.readouterr().err.strip() == f"error: {path}:3: team: unknown team 'lab/c' (not in the budget file)"


def test_cli_budget_error_exit_2(tmp_path, write_file, tiny_trace, capsys):
    bad = write_file(tmp_path / "b.csv", "team,gpu_hours\nlab,10\nlab/a,6\nlab/b,6\n")
    code = main(["--trace", str(tiny_trace), "--nodes", "1x8:H100", "--budgets", str(bad)])
    assert code == 2
    assert f"error: {bad}:2: gpu_hours:" in capsys.readouterr().err


ROOT = Path(__file__).resolve().parents[2]
PHILLY = ROOT.parent / "shared" / "traces" / "philly" / "philly-sep-oct-2017.csv"  # ../shared beside the checkout


@pytest.mark.skipif(not PHILLY.exists(), reason="Philly trace not available")
def test_the_shipped_philly_budgets_are_valid_and_cover_the_window():
    b = load_budgets(str(ROOT / "docs/examples/philly-budgets.csv"))
    assert len(b.leaves()) == 11
    assert b.grant["philly"] == 16 * 8 * 14 * 24
    jobs = load_philly(str(PHILLY), b.teams, start="2017-10-01", days=14)
    assert 20_000 < len(jobs) < 30_000


def test_files_saved_with_a_byte_order_mark_read_like_any_other(tmp_path):
    """Spreadsheet programs write a UTF-8 byte-order mark; the first column must still be found."""
    trace = tmp_path / "t.csv"
    trace.write_bytes("\ufeffsubmit_s,team,gpus,duration_s,kind\n0,lab/a,1,10,Debug\n".encode())
    budgets = tmp_path / "b.csv"
    budgets.write_bytes("\ufeffteam,gpu_hours\nlab,10\nlab/a,5\n".encode())
    [job] = load_trace(str(trace), TEAMS)
    assert (job.submit_s, job.team, job.kind) == (0.0, "lab/a", "debug")
    assert load_budgets(str(budgets)).grant["lab/a"] == 5.0


def test_a_time_limit_is_read_and_may_be_left_empty(tmp_path, write_file):
    path = write_file(tmp_path / "t.csv", "job_id,submit_s,team,gpus,duration_s,time_limit_s\n"
                                          "a,0,lab/a,1,600,3600\nb,1,lab/a,1,600,\n")
    a, b = load_trace(str(path), TEAMS)
    assert (a.time_limit_s, b.time_limit_s) == (3600.0, None)


@pytest.mark.parametrize(("value", "words"), [("0", "> 0"), ("-60", "> 0"), ("1h", "not a number"), ("inf", "> 0")])
def test_a_bad_time_limit_names_file_line_and_field(tmp_path, write_file, value, words):
    path = write_file(tmp_path / "t.csv", f"job_id,submit_s,team,gpus,duration_s,time_limit_s\na,0,lab/a,1,600,"
                                          f"3600\nb,1,lab/a,1,600,{value}\n")
    with pytest.raises(TraceError) as err:
        load_trace(str(path), TEAMS)
    assert (err.value.line, err.value.field) == (3, "time_limit_s")
    assert words in err.value.message


@pytest.mark.parametrize("newline", ["\n", "\r\n"])
def test_a_byte_that_is_not_utf8_is_reported_on_its_own_line(tmp_path, newline):
    """Python decodes in blocks: a Latin-1 byte on line 1501 used to be reported on line 1093. The same for budget
    files."""
    rows = [HEADER.strip()] + [f"j{i},{i},lab/a,1,10,," for i in range(2, 1501)] + ["j1501,0,lab/a,1,10,,",
                                                                                    "j1502,0,lab/a,1,10,,"]
    rows[1500] += "\u00e9"  # line 1501 (rows[0] is line 1)
    trace = tmp_path / "t.csv"
    trace.write_bytes((newline.join(rows) + newline).encode("latin-1"))
    with pytest.raises(TraceError) as err:
        load_trace(str(trace), TEAMS)
    assert (err.value.line, err.value.field) == (1501, "encoding")
    budgets = tmp_path / "b.csv"
    lines = ["team,gpu_hours", "lab,10000"] + [f"lab/t{i},1" for i in range(3, 2001)] + ["lab/caf\u00e9,1"]
    budgets.write_bytes((newline.join(lines) + newline).encode("latin-1"))
    with pytest.raises(TraceError) as err:
        load_budgets(str(budgets))
    assert (err.value.line, err.value.field) == (2001, "encoding")


def test_generated_ids_avoid_the_ids_the_file_gives(tmp_path, write_file):
    """An empty job_id is L<line>, or L<line>~1 where the file uses L<line> itself, before or after that row."""
    path = write_file(tmp_path / "t.csv", "job_id,submit_s,team,gpus,duration_s\n"
                                          "L3,0,lab/a,1,10\n,1,lab/a,1,10\n,2,lab/a,1,10\nL4,3,lab/b,1,10\n")
    assert [j.id for j in load_trace(str(path), TEAMS)] == ["L3", "L3~1", "L4~1", "L4"]


def test_a_priority_column_of_another_kind_is_ignored_with_one_warning(tmp_path, write_file):
    """``priority`` is this project's extension; extra columns are ignored (traces/README.md), so a column of
    numbers is not a reason to refuse the trace: it is dropped, once, with the file and the first odd line."""
    header = "job_id,submit_s,team,gpus,duration_s,priority\n"
    path = write_file(tmp_path / "t.csv", header + "a,0,lab/a,1,10,HIGH\nb,1,lab/a,1,10,\nc,2,lab/a,1,10,Low\n")
    warnings = []
    assert [j.priority for j in load_trace(str(path), TEAMS, warn=warnings.append)] == ["high", None, "low"]
    assert warnings == []
    path = write_file(tmp_path / "n.csv", header + "a,0,lab/a,1,10,high\nb,1,lab/a,1,10,5\nc,2,lab/a,1,10,7\n")
    jobs = load_trace(str(path), TEAMS, warn=warnings.append)
    assert [j.priority for j in jobs] == [None, None, None]
    assert warnings == [f"warning: {path}:3: priority: '5' is not high or low; the priority column is ignored "
                        "(static-priority runs every job as HIGH)"]


@pytest.mark.parametrize(("text", "line"), [("team,gpu_hours\nlab/a,1e308\nlab/b,1e308\n", 2),
                                            ("team,gpu_hours\nlab/a,10\nlab/b,2e12\n", 3)])
def test_an_absurd_budget_is_refused_with_its_line(tmp_path, write_file, text, line):
    """Two rows of 1e308 summed to inf and stopped the replay with a NaN traceback deep in the pyramid."""
    path = write_file(tmp_path / "b.csv", text)
    with pytest.raises(TraceError) as err:
        load_budgets(str(path))
    assert (err.value.line, err.value.field) == (line, "gpu_hours") and "1,000,000,000,000 GPU-hours" in str(err.value)
    assert load_budgets(str(write_file(tmp_path / "ok.csv", "team,gpu_hours\nlab/a,1e12\n"))).grant["lab"] == 1e12


def test_cli_ignores_an_odd_priority_column_and_refuses_an_absurd_budget(tmp_path, write_file, budgets_file, capsys):
    trace = write_file(tmp_path / "t.csv", "job_id,submit_s,team,gpus,duration_s,priority\na,0,lab/a,1,10,5\n")
    args = ["--trace", str(trace), "--nodes", "1x8:H100", "--policy", "static-priority"]
    assert main([*args, "--budgets", str(budgets_file)]) == 0
    assert capsys.readouterr().err.count("priority column is ignored") == 1
    huge = write_file(tmp_path / "huge.csv", "team,gpu_hours\nlab/a,1e308\nlab/b,1e308\n")
    assert main([*args, "--budgets", str(huge)]) == 2
    captured = capsys.readouterr()
    assert captured.err.startswith(f"error: {huge}:2: gpu_hours: ") and captured.out == ""


def test_blank_lines_anywhere_are_skipped_and_edge_values_are_valid(tmp_path, write_file):
    """A blank line between rows does not end the file; a grant of 0, a utilization of exactly 0 or 1, a run of
    half a second and a time limit of half a second are all valid; a short row leaves its missing fields empty."""
    budgets = write_file(tmp_path / "b.csv", "team,gpu_hours\nlab/a,10\n\n , \nlab/b,0\n")
    assert load_budgets(str(budgets)).grant == {"lab/a": 10, "lab/b": 0, "lab": 10}
    trace = write_file(tmp_path / "t.csv", "job_id,submit_s,team,gpus,duration_s,utilization,time_limit_s\n"
                       "j1,0,lab/a,1,10,0,\n\n,,,,,,\nj2,1,lab/b,1,0.5,1,0.5\nj3,2,lab/a,1,10\n")
    jobs = load_trace(str(trace), TEAMS)
    assert [(j.id, j.duration_s, j.utilization, j.time_limit_s) for j in jobs] == [
        ("j1", 10.0, 0.0, None), ("j2", 0.5, 1.0, 0.5), ("j3", 10.0, None, None)]


@pytest.mark.parametrize(
    ("load", "text", "line", "field", "words"),
    [
        (load_budgets, "", 1, "header", "empty file"),
        (load_budgets, "team,gpu_hours\n\n", 1, "team", "no teams"),
        (load_trace, "", 1, "header", "empty file"),
        (load_trace, "submit_s,team,gpus,duration_s\n\"0,lab/a,1,10\n", 2, "csv", "never closed"),
        (load_trace, "submit_s,team,gpus,duration_s\nsoon,lab/a,1,10\n", 2, "submit_s", "not a number"),
        (load_trace, "submit_s,team,gpus,duration_s,utilization\n0,lab/a,1,10,lots\n", 2, "utilization",
         "not a number"),
        (load_trace, "submit_s,team,gpus,duration_s,time_limit_s\n0,lab/a,1,10,later\n", 2, "time_limit_s",
         "not a number"),
    ],
)
def test_a_file_without_rows_or_with_a_bad_number_names_file_line_and_field(tmp_path, load, text, line, field, words):
    path = tmp_path / "f.csv"
    path.write_text(text)
    assert_refused(load, path, line, field, words)


def test_shares_give_a_parent_its_own_remainder_and_split_grants_of_nothing_evenly(tmp_path, write_file):
    """Generated sessions and squatters are spread over the teams by these shares."""
    path = write_file(tmp_path / "b.csv", "team,gpu_hours\nlab,100\nlab/a,30\nlab/b,50\n")
    assert load_budgets(str(path)).shares() == pytest.approx({"lab": 0.2, "lab/a": 0.3, "lab/b": 0.5})
    path = write_file(tmp_path / "z.csv", "team,gpu_hours\nlab/a,0\nlab/b,0\n")
    assert load_budgets(str(path)).shares() == pytest.approx({"lab/a": 0.5, "lab/b": 0.5})


def test_nodes_of_one_gpu_are_a_valid_group():
    assert [(n.id, n.gpus) for n in parse_nodes("2x1:H100")] == [("h100-000", 1), ("h100-001", 1)]
