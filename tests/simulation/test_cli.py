"""The command line: the table, --json, --schedule and the benchmark."""

from __future__ import annotations

import argparse
import csv
import dataclasses
import json
import os
import types

import pytest

from scheduling.simulation.check import check_schedule
from scheduling.simulation.cli import add_simulate_arguments, debug_pool_nodes, main, sim_config
from scheduling.simulation.output import IMPACT_LOSS_KEYS, METRIC_KEYS
from scheduling.simulation.trace import TraceJob, parse_nodes


def test_simulate_writes_table_json_and_schedules(tmp_path, budgets_file, tiny_trace, capsys):
    out = tmp_path / "r.json"
    sched = tmp_path / "sched"
    code = main(["simulate", "--trace", str(tiny_trace), "--nodes", "2x8:H100", "--budgets", str(budgets_file),
                 "--policy", "fifo-backfill,quota-borrowing", "--days", "1", "--debug-rate", "1", "--json", str(out),
                 "--schedule", str(sched), "--seed", "4"])
    assert code == 0
    table = capsys.readouterr().out
    assert "fifo-backfill" in table and "quota-borrowing" in table and "impact_ceiling" in table
    assert "debug_as_batch" in table  # sessions replayed as batch jobs (too large, or beyond their user's limit)
    report = json.loads(out.read_text())
    # the ratios the bars are set on, under the table, from the same figures as the JSON
    rows = {line.split()[0]: line.split()[1:] for line in table.splitlines()[2:]}
    fifo, quota = report["policies"]["fifo-backfill"], report["policies"]["quota-borrowing"]
    assert rows["impact/ceiling"][0] == f"{fifo['impact'] / fifo['impact_ceiling']:.3f}"
    assert rows["preempted/started"][0] == f"{fifo['preempted_jobs'] / fifo['started_jobs']:.3f}"
    assert rows["lost/delivered"][1] == f"{quota['lost_gpu_hours'] / quota['delivered_gpu_hours']:.3f}"

    assert set(report["policies"]) == {"fifo-backfill", "quota-borrowing"}
    for m in report["policies"].values():
        assert set(METRIC_KEYS) <= set(m)
        assert m["jobs"] == 8 and m["completed_jobs"] == 8
        # where the rest of impact went, in the JSON and in the table under impact
        assert m["impact"] + sum(m[k] for k in IMPACT_LOSS_KEYS) == pytest.approx(1.0)
    for key in IMPACT_LOSS_KEYS:
        assert rows[key] == [f"{report['policies'][n][key]:.3f}" for n in ("fifo-backfill", "quota-borrowing")]
    gpu_seconds = 2 * 3600 + 1800 + 4 * 7200 + 600 + 2 * 3600 + 2 * 5400 + 900 + 2 * 1200  # (the sessions: none)
    assert report["demand_ratio"] == pytest.approx(gpu_seconds / (16 * 86400))  # over --days, not the trace's span
    assert set(report) == {"demand_ratio", "policies", "meta", "targets"} and report["targets"] == []  # (no budget)
    assert report["meta"] == {"trace": str(tiny_trace), "format": "normalized", "nodes": "2x8:H100", "gpus": 16,
                              "window_s": 86400.0, "jobs_in_window": 8, "seed": 4}
    for name in ("fifo-backfill", "quota-borrowing"):
        assert check_schedule(str(sched / f"{name}.csv"), parse_nodes("2x8:H100")) == []


def test_the_table_goes_to_the_stream_the_caller_gives(budgets_file, tiny_trace, capsys):
    """As Django's commands give their own stdout and stderr (call_command captures them)."""
    import io

    from scheduling.simulation.cli import simulate

    out, err = io.StringIO(), io.StringIO()
    opts = add_simulate_arguments(argparse.ArgumentParser()).parse_args(
        ["--trace", str(tiny_trace), "--nodes", "2x8:H100", "--budgets", str(budgets_file), "--policy", "budget",
         "--no-progress"])
    report = simulate(opts, out, err)
    assert out.getvalue().splitlines()[:2] == ["demand_ratio: 0.517", "metric                           budget"]
    assert report["policies"]["budget"]["jobs"] == 8 and capsys.readouterr() == ("", "")


def test_static_priority_preempts_low_work_only_when_asked(tmp_path, budgets_file, capsys):
    """--static-preempt: a HIGH job stops the LOW job that holds the cluster, as the old scheme's optional
    preemption did; without it, it waits."""
    trace = tmp_path / "t.csv"
    trace.write_text("job_id,submit_s,team,gpus,duration_s,priority\nlow,0,lab/a,16,36000,low\n"
                     "high,600,lab/b,8,600,high\n", encoding="utf-8")
    args = ["--trace", str(trace), "--nodes", "2x8", "--budgets", str(budgets_file), "--policy", "static-priority"]
    assert main_json(tmp_path, args)["policies"]["static-priority"]["preemptions"] == 0
    assert main_json(tmp_path, [*args, "--static-preempt"])["policies"]["static-priority"]["preemptions"] == 1
    capsys.readouterr()


def test_unknown_policy_is_a_usage_error(budgets_file, tiny_trace, capsys):
    code = main(["--trace", str(tiny_trace), "--nodes", "2x8:H100", "--budgets", str(budgets_file),
                 "--policy", "lottery"])
    assert code == 2 and "unknown policy 'lottery'" in capsys.readouterr().err


def test_bench_reports_p50_p95_per_size(tmp_path, capsys):
    out = tmp_path / "b.json"
    code = main(["bench", "--gpus", "64", "--teams", "4", "--pending", "10,200",
                 "--policy", "fifo-backfill,static-priority,quota-borrowing", "--repeat", "3", "--json", str(out)])
    assert code == 0
    report = json.loads(out.read_text())
    assert set(report["policies"]) == {"fifo-backfill", "static-priority", "quota-borrowing"}
    for sizes in report["policies"].values():
        assert set(sizes) == {"10", "200"}
        for v in sizes.values():
            assert 0 <= v["p50_ms"] <= v["p95_ms"]
    assert "pending=    200" in capsys.readouterr().out


def test_bench_times_the_budget_cycle_with_or_without_its_first_pass(monkeypatch, capsys):
    from scheduling.simulation import cli

    passes = []
    real = cli.make_policy

    class Recording:
        def __init__(self, policy):
            self.policy = policy

        def plan(self, snapshot):
            passes.append(snapshot.config.guaranteed_first)
            return self.policy.plan(snapshot)

    monkeypatch.setattr(cli, "make_policy", lambda *args: Recording(real(*args)))
    argv = ["bench", "--gpus", "64", "--teams", "4", "--pending", "10", "--policy", "budget", "--repeat", "2"]
    assert main(argv) == 0
    assert passes and all(passes)
    passes.clear()
    assert main([*argv, "--no-guaranteed-first"]) == 0
    assert passes and not any(passes)
    assert "pending=     10" in capsys.readouterr().out


def test_bench_refuses_a_json_path_it_cannot_write_before_timing_anything(tmp_path, capsys):
    folder = tmp_path / "out.json"
    folder.mkdir()
    for bad in (tmp_path / "missing" / "b.json", folder):
        code = main(["bench", "--gpus", "64", "--teams", "4", "--pending", "10", "--policy", "fifo-backfill",
                     "--repeat", "1", "--json", str(bad)])
        captured = capsys.readouterr()
        assert code == 2 and "--json" in captured.err and "pending=" not in captured.out


def test_bench_defaults_are_the_issues_case():
    from scheduling.simulation.cli import add_bench_arguments

    opts = add_bench_arguments(argparse.ArgumentParser()).parse_args([])
    assert (opts.gpus, opts.teams, opts.pending, opts.users, opts.policy, opts.repeat, opts.seed, opts.json) == (
        1024, 30, "1000,10000,100000", 150, "all", None, 0, None)
    assert opts.guaranteed_first is True


def test_bench_times_each_policy_on_the_snapshot_asked_for_and_reads_p50_and_p95_off_the_sorted_times(
        monkeypatch, tmp_path, capsys):
    """20 timed cycles up to 10,000 pending (3 above), after one untimed warm-up; p95 is the 19th of 20 times."""
    from scheduling.simulation import cli

    clock, made = [0.0], []
    costs = iter(range(1000))

    class Timed:
        def plan(self, snapshot):
            clock[0] += next(costs) / 1000  # each cycle 1 ms longer than the last

    monkeypatch.setattr(cli, "time", types.SimpleNamespace(perf_counter=lambda: clock[0]))
    monkeypatch.setattr(cli, "make_policy", lambda name: Timed())
    monkeypatch.setattr(cli, "synthetic_snapshot", lambda *a, **kw: made.append((a, kw)) or object())
    out = tmp_path / "b.json"
    code = main(["bench", "--gpus", "64", "--teams", "4", "--users", "9", "--seed", "7", "--pending", "10,10000,20000",
                 "--policy", "fifo-backfill", "--json", str(out)])
    assert code == 0
    assert made == [((64, 4, size), {"users": 9, "seed": 7}) for size in (10, 10000, 20000)]
    report = json.loads(out.read_text())["policies"]["fifo-backfill"]
    # size 10: warm-up 0 ms, then 1..20 ms; 10,000: 21, then 22..41; 20,000: 42, then 43, 44, 45
    assert report == {"10": {"p50_ms": 10.5, "p95_ms": 19.0, "repeat": 20},
                      "10000": {"p50_ms": 31.5, "p95_ms": 40.0, "repeat": 20},
                      "20000": {"p50_ms": 44.0, "p95_ms": 45.0, "repeat": 3}}
    lines = capsys.readouterr().out.splitlines()
    assert lines == ["fifo-backfill    pending=     10  p50=    10.50 ms  p95=    19.00 ms  (n=20)",
                     "fifo-backfill    pending=  10000  p50=    31.50 ms  p95=    40.00 ms  (n=20)",
                     "fifo-backfill    pending=  20000  p50=    44.00 ms  p95=    45.00 ms  (n=3)"]


def test_bench_runs_on_the_smallest_case_it_accepts(capsys):
    """One GPU, one team, an empty queue: each the least its check lets through."""
    assert main(["bench", "--gpus", "1", "--teams", "1", "--pending", "0", "--repeat", "1", "--policy", "budget"]) == 0
    assert "pending=      0" in capsys.readouterr().out


@pytest.mark.parametrize(("args", "words"), [
    (["--pending", "10,x"], "--pending: expected comma-separated integers, got '10,x'"),
    (["--pending", "10,-1"], "--pending: give at least one size >= 0"),
    (["--pending", ","], "--pending: give at least one size >= 0"),
    (["--gpus", "0"], "--gpus and --teams must be >= 1"),
    (["--teams", "0"], "--gpus and --teams must be >= 1"),
    (["--policy", "nope"], "--policy: unknown policy 'nope'"),
])
def test_bench_refuses_bad_sizes_and_counts_before_timing_anything(args, words, capsys):
    code = main(["bench", "--gpus", "64", "--teams", "4", "--pending", "10", "--repeat", "1", *args])
    captured = capsys.readouterr()
    assert code == 2 and words in captured.err and "pending=" not in captured.out


def test_manage_py_commands_forward_to_the_same_functions(tmp_path, budgets_file, tiny_trace):
    """Through Django (in a subprocess: this folder's tests run without Django)."""
    import subprocess
    import sys
    from pathlib import Path

    import pytest

    root = Path(__file__).resolve().parents[2]
    if not (root / "manage.py").exists():
        pytest.skip("manage.py not there yet")
    out = tmp_path / "r.json"
    proc = subprocess.run(
        [sys.executable, "manage.py", "simulate", "--trace", str(tiny_trace), "--nodes", "2x8:H100", "--budgets",
         str(budgets_file), "--policy", "fifo-backfill", "--days", "1", "--json", str(out)],
        cwd=root, capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert "fifo-backfill" in proc.stdout and "\n\n" not in proc.stdout.strip()
    assert json.loads(out.read_text())["policies"]["fifo-backfill"]["completed_jobs"] == 8
    bad = tmp_path / "bad.csv"
    bad.write_text("job_id,submit_s,team,gpus,duration_s\nj1,0,lab/a,0,10\n")
    proc = subprocess.run(
        [sys.executable, "manage.py", "simulate", "--trace", str(bad), "--nodes", "2x8:H100", "--budgets",
         str(budgets_file)],
        cwd=root, capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 2
    assert f"{bad}:2: gpus: must be >= 1" in proc.stderr


@pytest.mark.parametrize("missing", ["trace", "budgets"])
def test_an_input_file_that_is_not_there_is_named(tmp_path, budgets_file, tiny_trace, capsys, missing):
    gone = tmp_path / "gone.csv"
    files = {"trace": tiny_trace, "budgets": budgets_file, missing: gone}
    code = main(["--trace", str(files["trace"]), "--nodes", "2x8:H100", "--budgets", str(files["budgets"])])
    captured = capsys.readouterr()
    assert code == 2 and captured.err == f"error: {gone}: file not found\n" and captured.out == ""


def _opts(*args: str, nodes: str = "2x8") -> argparse.Namespace:
    """``simulate``'s options as the command parses them (files named, not read)."""
    return add_simulate_arguments(argparse.ArgumentParser()).parse_args(
        ["--trace", "t.csv", "--nodes", nodes, "--budgets", "b.csv", *args])


def _pool(args: list[str], jobs, nodes: str = "16x8:H100") -> int:
    opts = _opts(*args, nodes=nodes)
    pool = debug_pool_nodes(opts, jobs, parse_nodes(nodes))
    return len(pool)


def test_every_replay_option_reaches_the_replays_settings_in_its_unit():
    """What the options say is what the replay is given (each away from its default); a checkpoint save of 0 s is
    the pessimistic model (every stopped job holds its GPUs for its whole grace), and the timeline's interval is
    in hours."""
    opts = _opts("--seed", "7", "--debug-rate", "2.5", "--mtbf-hours", "30", "--repair-hours", "3",
                  "--checkpoint-minutes", "15", "--checkpoint-save-seconds", "20", "--squatters", "4",
                  "--debug-forget", "0.25", "--debug-sessions-per-user", "3", "--debug-sessions-per-team", "5",
                  "--teams-csv", "teams.csv", "--timeline", "t.csv", "--timeline-hours", "2", "--explain",
                  "--no-progress")
    budgets, nodes = object(), parse_nodes("2x8")
    cfg = sim_config(opts, budgets, nodes, 86400.0, ("node-000",))
    assert (cfg.nodes, cfg.budgets, cfg.horizon_s, cfg.debug_pool_nodes) == (nodes, budgets, 86400.0, ("node-000",))
    assert (cfg.seed, cfg.debug_rate_per_hour, cfg.mtbf_hours, cfg.repair_hours, cfg.checkpoint_minutes,
            cfg.checkpoint_save_s, cfg.squatters, cfg.debug_forget_share, cfg.debug_sessions_per_user,
            cfg.debug_sessions_per_team, cfg.timeline_s) == (7, 2.5, 30.0, 3.0, 15.0, 20.0, 4, 0.25, 3, 5, 7200.0)
    assert cfg.per_team and cfg.whole_jobs and cfg.idle_by_place and cfg.progress is False
    cfg = sim_config(_opts("--checkpoint-save-seconds", "0", "--timeline-hours", "2"), budgets, nodes, None, ())
    assert cfg.checkpoint_save_s is None and cfg.timeline_s is None and cfg.progress is None
    assert not (cfg.per_team or cfg.whole_jobs or cfg.idle_by_place)


def test_without_options_the_replay_is_the_models_and_the_policys_defaults():
    """The command's defaults are the documented model's (docs/simulation.md: checkpoints every 30 minutes, saved
    in 60 s, nodes repaired in 4 hours, two open sessions per user, the policy as it ships), so that a replay from
    the command and one from code give the same figures."""
    from scheduling.simulation.cli import with_policy_options
    from scheduling.simulation.model import SimConfig

    opts = _opts()
    budgets, nodes = object(), parse_nodes("2x8")
    cfg = with_policy_options(sim_config(opts, budgets, nodes, None, ()), opts)
    assert cfg == SimConfig(nodes=nodes, budgets=budgets, debug_pool_nodes=())
    assert (cfg.checkpoint_minutes, cfg.checkpoint_save_s, cfg.repair_hours, cfg.debug_sessions_per_user) == (
        30.0, 60.0, 4.0, 2)
    assert (opts.policy, opts.format, opts.timeline_hours, opts.workers) == ("all", "normalized", 1.0, None)


def _session(k: int, gpus: int, hours: float, gpu_type: str | None = None):
    return TraceJob(id=f"d{k}", submit_s=k * 60.0, team="lab/a", gpus=gpus, duration_s=hours * 3600, kind="debug",
                    gpu_type=gpu_type)


def test_default_debug_pool_grows_with_the_expected_debug_load():
    """No sessions, no pool; a light stream gets at least one node in eight; a heavy one (here 24 sessions of
    4 GPUs for 2 h in a day: 8 GPUs in use on average) a pool that holds the mean plus three deviations; and the
    pool never takes more than half the cluster. --debug-pool overrides it."""
    assert _pool(["--days", "1"], []) == 0
    assert _pool(["--days", "1", "--debug-rate", "0.5"], []) == 2
    heavy = [_session(k, 4, 2.0) for k in range(24)]
    # mean 24 x 4 x 2 / 24 = 8 GPUs, variance 24 x 16 x 2 / 24 = 32: 8 + 3 x 5.66 = 25 GPUs -> 4 nodes of 8
    assert _pool(["--days", "1"], heavy) == 4
    # the same sessions booked for 30 minutes each (their time limit): mean 2 GPUs, deviation 2.83 -> 2 nodes
    assert _pool(["--days", "1"], [dataclasses.replace(j, time_limit_s=1800.0) for j in heavy]) == 2
    flood = [_session(k, 8, 4.0) for k in range(24 * 20)]
    assert _pool(["--days", "1"], flood) == 8
    assert _pool(["--days", "1", "--debug-pool", "1"], heavy) == 1
    # sessions left open for a day count for the debug contract's 4 hours: mean 16 GPUs, deviation 8 -> 5 nodes
    assert _pool(["--days", "1"], [_session(k, 4, 24.0) for k in range(24)]) == 5
    # the stream: 8 sessions an hour of 1-2 GPUs for 30-120 minutes: mean 15 GPUs, deviation 5 -> 4 nodes
    assert _pool(["--days", "1", "--debug-rate", "8"], []) == 4
    # without --days the load is averaged over the span of the submits: 8 sessions of 2 GPUs for an hour, one every
    # 10 minutes from the second hour on, over 70 minutes: mean 13.7 GPUs, deviation 5.2 -> 4 nodes
    burst = [dataclasses.replace(_session(k, 2, 1.0), submit_s=7200.0 + 600 * k) for k in range(8)]
    assert _pool([], burst) == 4


def test_default_debug_pool_follows_the_gpu_types_sessions_ask_for():
    """Sessions that ask for B200 get B200 pool nodes; sessions of any type count on the largest type."""
    nodes = "12x8:H100,4x8:B200"
    opts = _opts("--days", "1", nodes=nodes)
    b200 = [_session(k, 4, 2.0, "B200") for k in range(24)]  # 25 GPUs wanted, at most half of the 4 B200 nodes
    assert debug_pool_nodes(opts, b200, parse_nodes(nodes)) == ("b200-000", "b200-001")
    light = [_session(0, 1, 1.0, "B200")]  # one B200 node for it, one H100 node to reach one node in eight
    assert debug_pool_nodes(opts, light, parse_nodes(nodes)) == ("h100-000", "b200-000")
    untyped = [_session(k, 4, 2.0) for k in range(24)]
    assert debug_pool_nodes(opts, untyped, parse_nodes(nodes)) == ("h100-000", "h100-001", "h100-002", "h100-003")
    even = "2x8:B200,2x8:H100"  # as many GPUs of each type: the type listed first takes them
    assert debug_pool_nodes(opts, untyped, parse_nodes(even)) == ("b200-000",)


def test_default_debug_pool_takes_the_smallest_nodes_that_hold_a_session():
    """On 16- and 8-GPU nodes with 1-GPU nodes beside them, the pool takes 8-GPU nodes (the smallest that hold the
    stream's 2-GPU sessions), keeping the 16-GPU nodes whole for gangs; trace sessions of 8 GPUs skip the 1-GPU
    ones too."""
    nodes = "2x16:H100,4x8:H100,8x1:H100"
    opts = _opts("--days", "1", "--debug-rate", "0.5", nodes=nodes)
    pool = debug_pool_nodes(opts, [], parse_nodes(nodes))
    assert pool == ("h100-002", "h100-003")  # the first two 8-GPU nodes (one node in eight of 14, rounded)
    opts.debug_rate = 0.0
    assert debug_pool_nodes(opts, [_session(0, 8, 1.0)], parse_nodes(nodes))[0] == "h100-002"
    ones = {f"h100-{i:03d}" for i in range(6, 14)}  # sessions of one GPU (and no stream) fit the 1-GPU nodes
    assert set(debug_pool_nodes(opts, [_session(0, 1, 1.0)], parse_nodes(nodes))) <= ones


def test_a_debug_forget_share_outside_0_1_is_a_usage_error(budgets_file, tiny_trace, capsys):
    code = main(["--trace", str(tiny_trace), "--nodes", "2x8:H100", "--budgets", str(budgets_file),
                 "--debug-forget", "1.5"])
    assert code == 2 and "--debug-forget must be a share between 0 and 1" in capsys.readouterr().err
    assert main(["--trace", str(tiny_trace), "--nodes", "2x8:H100", "--budgets", str(budgets_file), "--days", "1",
                 "--policy", "fifo-backfill", "--debug-forget", "1"]) == 0  # (every session forgotten)


def test_a_negative_session_limit_is_a_usage_error(budgets_file, tiny_trace, capsys):
    code = main(["--trace", str(tiny_trace), "--nodes", "2x8:H100", "--budgets", str(budgets_file),
                 "--debug-sessions-per-user", "-1"])
    assert code == 2 and "--debug-sessions-per-user must be >= 0, got -1" in capsys.readouterr().err


@pytest.mark.parametrize(("option", "value", "words"), [
    ("--days", "inf", "--days must be a finite number"),
    ("--mtbf-hours", "-5", "--mtbf-hours must be > 0, got -5.0"),
    ("--mtbf-hours", "0", "--mtbf-hours must be > 0"),
    ("--mtbf-hours", "nan", "--mtbf-hours must be a finite number"),
    ("--repair-hours", "-2", "--repair-hours must be > 0"),
    ("--checkpoint-minutes", "0", "--checkpoint-minutes must be > 0"),
    ("--checkpoint-save-seconds", "-30", "--checkpoint-save-seconds must be >= 0"),
    ("--debug-rate", "-3", "--debug-rate must be >= 0"),
    ("--debug-pool", "-1", "--debug-pool must be >= 0"),
    ("--squatters", "-3", "--squatters must be >= 0"),
    ("--nodes", "16x", "error: --nodes: bad group '16x' (expected COUNTxGPUS[:TYPE], e.g. 16x8:H100)\n"),
])
def test_out_of_range_options_stop_before_the_replay(budgets_file, tiny_trace, capsys, option, value, words):
    """NaN metrics, failures that never repair or a model silently switched off were what these gave before."""
    code = main(["--trace", str(tiny_trace), "--nodes", "2x8:H100", "--budgets", str(budgets_file), option, value])
    captured = capsys.readouterr()
    assert code == 2 and words in captured.err and captured.out == ""


def test_bad_output_paths_stop_before_anything_runs_or_is_written(tmp_path, budgets_file, tiny_trace, capsys):
    base = ["--trace", str(tiny_trace), "--nodes", "2x8:H100", "--budgets", str(budgets_file)]
    sched = tmp_path / "sched"
    code = main([*base, "--schedule", str(sched), "--json", str(tmp_path / "no" / "such" / "r.json")])
    assert code == 2 and "folder" in capsys.readouterr().err and not sched.exists()  # nothing half-written
    code = main([*base, "--schedule", str(tiny_trace)])
    assert code == 2 and "exists and is not a folder" in capsys.readouterr().err
    code = main(["--trace", str(tmp_path), "--nodes", "2x8:H100", "--budgets", str(budgets_file)])
    assert code == 2 and "is a folder, not a CSV file" in capsys.readouterr().err


def test_jobs_that_never_start_without_days_are_announced(budgets_file, tiny_trace, capsys, monkeypatch):
    """Without --days the window ends when nothing more can happen: a job that never started then counts with a
    wait up to that moment, which may be 0 s, so the replay says so."""
    from scheduling.policy.types import Plan
    from scheduling.simulation import cli

    class Idle:
        name = "fifo-backfill"

        def plan(self, snapshot):
            return Plan()

    monkeypatch.setattr(cli, "make_policy", lambda *args: Idle())
    base = ["--trace", str(tiny_trace), "--nodes", "2x8:H100", "--budgets", str(budgets_file), "--policy",
            "fifo-backfill"]
    assert main(base) == 0
    assert "fifo-backfill: 8 job(s) never started; without --days" in capsys.readouterr().err
    assert main([*base, "--days", "1"]) == 0
    assert "never started" not in capsys.readouterr().err
    monkeypatch.undo()  # the real policy starts every job
    assert main(base) == 0
    assert "never started" not in capsys.readouterr().err


def test_a_window_without_jobs_is_an_error_not_an_empty_table(budgets_file, tiny_trace, capsys):
    code = main(["--trace", str(tiny_trace), "--nodes", "2x8:H100", "--budgets", str(budgets_file),
                 "--start", "999999"])
    captured = capsys.readouterr()
    assert code == 2 and "no job submitted from --start 999999" in captured.err and captured.out == ""

def test_a_philly_run_without_start_says_where_its_window_begins(tmp_path, capsys):
    """Without --start, and when --start leaves no job in the window (the file saved with a byte order mark, as
    spreadsheets do)."""
    trace = tmp_path / "philly.csv"
    trace.write_text("timestamp,duration,num_gpus,gpu_time,cluster\n2017-09-04 10:30:41,100.0,1,100.0,aaa\n"
                     "2017-09-04 11:00:00,400000000,2,400.0,aaa\n", encoding="utf-8-sig")
    budgets = tmp_path / "b.csv"
    budgets.write_text("team,gpu_hours\nphilly,10\nphilly/aaa,10\n", encoding="utf-8")
    args = ["--trace", str(trace), "--format", "philly", "--nodes", "1x8:H100", "--budgets", str(budgets),
            "--policy", "fifo-backfill", "--days", "1"]
    assert main(args) == 0
    err = capsys.readouterr().err
    assert ("note: the window starts at the file's first job (2017-09-04 10:30:41); --start DATE picks another, e.g. "
            "--start 2017-10-01\n") in err
    assert "1 job(s) run longer than a year (first: P3, line 3, duration 4e+08); duration is in seconds" in err
    assert main([*args, "--start", "2017-09-04"]) == 0
    assert "window starts" not in capsys.readouterr().err
    assert main([*args, "--start", "2017-10-01"]) == 2
    assert capsys.readouterr().err == (f"error: {trace}: no job submitted from --start 2017-10-01 in --days 1; its "
                                       "first job is at 2017-09-04 10:30:41\n")


def test_a_philly_window_is_its_start_and_days_and_its_teams_are_the_budget_files(tmp_path, capsys):
    """The window opens at the first job at or after --start and lasts --days; a VC inside it without a budget, or a
    --start that is not a date, stops the command with the file's line or the option."""
    trace = tmp_path / "philly.csv"
    rows = ["2017-09-29 10:00:00,60,1,0,aaa", "2017-09-30 23:00:00,60,1,0,aaa", "2017-10-01 01:00:00,60,1,0,aaa",
            "2017-10-01 12:00:00,60,2,0,aaa", "2017-10-03 00:00:00,60,1,0,zzz"]
    trace.write_text("timestamp,duration,num_gpus,gpu_time,cluster\n" + "\n".join(rows) + "\n", encoding="utf-8")
    budgets = tmp_path / "b.csv"
    budgets.write_text("team,gpu_hours\nphilly,10\nphilly/aaa,10\n", encoding="utf-8")
    args = ["--trace", str(trace), "--format", "philly", "--nodes", "1x8:H100", "--budgets", str(budgets),
            "--policy", "fifo-backfill"]
    report = main_json(tmp_path, [*args, "--start", "2017-10-01", "--days", "1"])
    assert report["meta"]["jobs_in_window"] == 2 and report["policies"]["fifo-backfill"]["completed_jobs"] == 2
    capsys.readouterr()
    assert main([*args, "--start", "2017-10-01"]) == 2
    assert f"error: {trace}:6: cluster: unknown team 'philly/zzz' (not in the budget file)" in capsys.readouterr().err
    assert main([*args, "--start", "soon"]) == 2
    assert capsys.readouterr().err == ("error: --start: not a date: 'soon' (use YYYY-MM-DD or YYYY-MM-DD HH:MM:SS)\n")


def test_the_reclaim_wait_is_an_option(tmp_path, budgets_file, capsys):
    """b falls one GPU short at 3 h: it preempts after a GPU-hour by default, at once with 0, never below 0."""
    trace = tmp_path / "t.csv"
    trace.write_text("job_id,submit_s,team,gpus,duration_s\n"
                     + "".join(f"a{i},0,lab/a,1,36000\n" for i in range(8)) + "b0,10800,lab/b,1,3600\n",
                     encoding="utf-8")
    args = ["--trace", str(trace), "--nodes", "1x8:H100", "--budgets", str(budgets_file), "--policy", "budget"]

    def start_of_b0(*extra: str) -> float:
        out = tmp_path / f"s{len(extra)}"
        assert main([*args, "--schedule", str(out), *extra]) == 0
        with open(out / "budget.csv", encoding="utf-8") as fh:
            return next(float(r["start_s"]) for r in csv.DictReader(fh) if r["job_id"] == "b0")

    assert 10800 + 3600 <= start_of_b0() <= 10800 + 3600 + 420
    assert 10800 + 600 <= start_of_b0("--reclaim-after-gpu-hours", "0") <= 10800 + 600 + 420
    assert 10800 + 7200 <= start_of_b0("--reclaim-after-gpu-hours", "2") <= 10800 + 7200 + 420  # GPU-hours: 2 h short
    assert main([*args, "--reclaim-after-gpu-hours", "-1"]) == 2
    assert "--reclaim-after-gpu-hours must be >= 0, got -1" in capsys.readouterr().err


def test_the_debug_headroom_is_an_option(tmp_path, budgets_file, capsys):
    """On a one-node debug pool, batch work borrows all but the headroom: 3 GPUs kept free by default, as many as the
    option says otherwise (0: the whole node lent), never fewer than none."""
    trace = tmp_path / "t.csv"
    trace.write_text("job_id,submit_s,team,gpus,duration_s\n" + "".join(f"a{i},0,lab/a,1,3600\n" for i in range(8)),
                     encoding="utf-8")
    args = ["--trace", str(trace), "--nodes", "1x8:H100", "--budgets", str(budgets_file), "--policy", "budget",
            "--debug-pool", "1"]

    def started_at_once(*extra: str) -> int:
        out = tmp_path / f"s{'-'.join(extra)}"
        assert main([*args, "--schedule", str(out), *extra]) == 0
        with open(out / "budget.csv", encoding="utf-8") as fh:
            return sum(1 for r in csv.DictReader(fh) if float(r["start_s"]) == 0)

    assert started_at_once() == 5
    assert started_at_once("--debug-headroom", "0") == 8
    assert started_at_once("--debug-headroom", "2") == 6
    assert main([*args, "--debug-headroom", "-1"]) == 2
    assert "--debug-headroom must be >= 0 GPUs, got -1" in capsys.readouterr().err


def test_jobs_too_large_or_longer_than_their_limit_are_announced(tmp_path, budgets_file, capsys):
    """Jobs larger than the cluster are rejected at submit (and demand nothing, even when every job is); a run
    longer than its limit is cut at it (one as long as its limit is not); a session larger than the portal allows
    runs as a batch job."""
    trace = tmp_path / "t.csv"
    trace.write_text("job_id,submit_s,team,gpus,duration_s,time_limit_s,kind\n"
                     "fits,0,lab/a,1,600,3600,train\nhuge,1,lab/a,64,600,,train\ncut,2,lab/b,1,7200,3600,train\n"
                     "exact,3,lab/b,1,3600,3600,train\nbig,4,lab/a,16,60,,debug\n")
    args = ["--trace", str(trace), "--nodes", "2x8:H100", "--budgets", str(budgets_file), "--no-progress"]
    code = main([*args, "--policy", "budget"])
    err = capsys.readouterr().err
    assert code == 0
    assert ("warning: 1 job(s) ask for more GPUs than --nodes 2x8:H100 has (first: huge, 64 GPUs, line 3); they are "
            "rejected at submit") in err
    assert "note: 1 job(s) run longer than their time_limit_s (first: cut, line 4)" in err
    assert ("warning: 1 debug session(s) ask for more than 8 GPUs (first: big, line 6); they run as batch jobs, as "
            "the portal would ask") in err
    trace.write_text("job_id,submit_s,team,gpus,duration_s\nhuge,0,lab/a,64,600\n", encoding="utf-8")
    report = main_json(tmp_path, [*args, "--policy", "fifo-backfill"])
    assert "(first: huge, 64 GPUs, line 2); they are rejected at submit" in capsys.readouterr().err
    assert report["demand_ratio"] == 0.0 and report["policies"]["fifo-backfill"]["rejected"] == 1


def _replay_for(tmp_path, budgets: str, trace: str, nodes: str, job_id: str, *extra: str) -> tuple[list[dict], dict]:
    """Replay a two-day trace under ``budget`` (``extra``: more options): the schedule's rows of ``job_id`` and the
    policy's metrics."""
    (tmp_path / "b.csv").write_text(budgets, encoding="utf-8")
    (tmp_path / "t.csv").write_text(trace, encoding="utf-8")
    out, report = tmp_path / f"s{len(extra)}", tmp_path / f"m{len(extra)}.json"
    assert main(["--trace", str(tmp_path / "t.csv"), "--nodes", nodes, "--budgets", str(tmp_path / "b.csv"),
                 "--policy", "budget", "--days", "2", "--schedule", str(out), "--json", str(report), *extra]) == 0
    with open(out / "budget.csv", encoding="utf-8") as fh:
        rows = [r for r in csv.DictReader(fh) if r["job_id"] == job_id]
    return rows, json.loads(report.read_text())["policies"]["budget"]


def test_a_gang_larger_than_its_team_is_owed_runs_on_its_turn_and_never_without(tmp_path, capsys):
    """lab/b (40%: 12.8 of 32 GPUs) runs one small job and asks for 24 GPUs; lab/a fills the rest with jobs of two
    days (the long contract: 24 h protected). With turns the gang takes the three nodes without lab/b's own job as
    soon as lab/a's protection ends there (and the victims' checkpoint is saved); with --no-gang-turns it never
    starts: it is neither owed whole nor half owed, and no one else's jobs end."""
    case = ("team,gpu_hours\nlab,100000\nlab/a,60000\nlab/b,40000\n",
            "job_id,submit_s,team,gpus,duration_s\nb0,0,lab/b,1,172800\n"
            + "".join(f"a{i},0,lab/a,1,172800\n" for i in range(31)) + "big,600,lab/b,24,3600\n",
            "4x8:H100", "big")
    (run,), _ = _replay_for(tmp_path, *case)
    assert 86400 <= float(run["start_s"]) <= 86400 + 700 and run["end_reason"] == "completed"
    assert "h100-000" not in run["placement"]  # the node of lab/b's own job
    assert _replay_for(tmp_path, *case, "--no-gang-turns")[0] == []
    capsys.readouterr()


def test_the_jobs_a_team_is_owed_start_before_a_larger_job_that_borrows(tmp_path, capsys):
    """lab/a (2 of 16 GPUs) and lab/b (14) each submit at once: a an 8-GPU job, b ten 1-GPU jobs, while b's eight
    jobs of two days fill one node. b's six jobs within its share start first and a's job, 6 GPUs beyond a's share,
    waits; with --no-guaranteed-first a, furthest below its share, takes the free node at once (docs/policy.md §4)."""
    case = ("team,gpu_hours\nlab,100000\nlab/a,12500\nlab/b,87500\n",
            "job_id,submit_s,team,gpus,duration_s\n" + "".join(f"r{i},0,lab/b,1,172800\n" for i in range(8))
            + "big,600,lab/a,8,3600\n" + "".join(f"b{i},600,lab/b,1,172800\n" for i in range(10)),
            "2x8:H100", "big")
    rows, _ = _replay_for(tmp_path, *case)
    assert rows and all(float(r["start_s"]) > 600 for r in rows)
    rows, _ = _replay_for(tmp_path, *case, "--no-guaranteed-first")
    assert float(rows[0]["start_s"]) == 600
    capsys.readouterr()


def test_a_job_of_one_node_of_a_team_that_runs_nothing_gets_its_turn_after_a_day(tmp_path, capsys):
    """lab/b (a quarter: 4 of 16 GPUs) asks for 8 GPUs on one node; lab/a fills both nodes with 1-GPU jobs of two
    days. No claim can free a node (lab/a would fall 4 below its share for lab/b's gain of 4), so without turns
    lab/b runs nothing for the whole window; with them its job takes a node once it has waited a day (and lab/a's
    24 hours of protection are over), and the longest starvation the replay reports is that day."""
    case = ("team,gpu_hours\nlab,100000\nlab/a,75000\nlab/b,25000\n",
            "job_id,submit_s,team,gpus,duration_s\n"
            + "".join(f"a{i},0,lab/a,1,172800\n" for i in range(16)) + "eight,600,lab/b,8,3600\n",
            "2x8:H100", "eight")
    (run,), m = _replay_for(tmp_path, *case)
    assert 86400 + 600 <= float(run["start_s"]) <= 86400 + 600 + 700 and run["end_reason"] == "completed"
    assert m["longest_starved_team"] == "lab/b" and 86400 <= m["longest_starved_s"] <= 86400 + 1300
    rows, m = _replay_for(tmp_path, *case, "--no-gang-turns")
    assert rows == [] and m["longest_starved_s"] == pytest.approx(2 * 86400 - 600)
    capsys.readouterr()


def test_without_days_the_demand_ratio_is_the_traces_whatever_the_policies(tmp_path, budgets_file, capsys):
    """The demand ratio is over the trace's own span (to the end of the last job's work, had every job started at
    its submit), the same for one policy or all; each policy's metrics run to its own end (its ``window_s``)."""
    trace = tmp_path / "t.csv"
    trace.write_text("submit_s,team,gpus,duration_s\n0,lab/a,8,100\n" + "".join(
        f"{i * 10},lab/{'ab'[i % 2]},{1 + i % 8},{300 + 50 * i}\n" for i in range(1, 30)), encoding="utf-8")
    reports = {}
    for policy in ("budget", "all"):
        out = tmp_path / f"{policy}.json"
        assert main(["--trace", str(trace), "--nodes", "1x8", "--budgets", str(budgets_file), "--policy", policy,
                     "--json", str(out)]) == 0
        reports[policy] = json.loads(out.read_text())
    capsys.readouterr()
    span = max(i * 10 + 300 + 50 * i for i in range(1, 30))
    demand = (8 * 100 + sum((1 + i % 8) * (300 + 50 * i) for i in range(1, 30))) / (8 * span)
    for report in reports.values():
        assert report["demand_ratio"] == pytest.approx(demand) and report["meta"]["window_s"] == span
    ends = {name: m["window_s"] for name, m in reports["all"]["policies"].items()}
    assert ends["budget"] == reports["budget"]["policies"]["budget"]["window_s"] and min(ends.values()) >= span
    one = tmp_path / "one.csv"
    one.write_text("submit_s,team,gpus,duration_s\n0,lab/a,8,100\n", encoding="utf-8")
    report = main_json(tmp_path, ["--trace", str(one), "--nodes", "1x8", "--budgets", str(budgets_file),
                                  "--policy", "budget"])
    assert report["demand_ratio"] == 1.0 and report["meta"]["window_s"] == 100
    assert report["policies"]["budget"]["occupancy"] == 1.0 and report["policies"]["budget"]["window_s"] == 100


def main_json(tmp_path, args: list[str]) -> dict:
    out = tmp_path / "report.json"
    assert main([*args, "--json", str(out)]) == 0
    return json.loads(out.read_text())


def test_every_output_path_is_checked_before_the_replay(tmp_path, budgets_file, tiny_trace, capsys):
    """A schedule folder under a file, a POLICY.csv that is a folder, a --json folder where no file can be created:
    each stops the command before the replay, nothing written (they used to fail after it, some files written)."""
    base = ["--trace", str(tiny_trace), "--nodes", "2x8:H100", "--budgets", str(budgets_file), "--days", "1",
            "--policy", "fifo-backfill,quota-borrowing"]
    code = main([*base, "--schedule", str(tiny_trace / "sub")])
    captured = capsys.readouterr()
    assert code == 2 and f"{tiny_trace} is not a folder" in captured.err and captured.out == ""
    sched = tmp_path / "sched"
    (sched / "quota-borrowing.csv").mkdir(parents=True)
    code = main([*base, "--schedule", str(sched)])
    captured = capsys.readouterr()
    assert code == 2 and f"--schedule {sched / 'quota-borrowing.csv'}: is a folder" in captured.err
    assert captured.out == ""
    assert not (sched / "fifo-backfill.csv").exists()
    if os.path.isdir("/proc/self"):  # a folder that exists but takes no new file, whoever runs the test
        new = tmp_path / "new"
        code = main([*base, "--schedule", str(new), "--json", "/proc/self/r.json"])
        captured = capsys.readouterr()
        assert code == 2 and captured.out == ""
        assert "--json /proc/self/r.json: cannot create files in /proc/self (No such file or directory)" in captured.err
        assert not new.exists()
        code = main([*base, "--schedule", "/proc/self/new"])
        assert code == 2 and "--schedule /proc/self/new: cannot create files in /proc/self (No such file or " \
            "directory)" in capsys.readouterr().err
    # devices (written last, the files after them still written), new folders
    assert main([*base, "--teams-csv", os.devnull, "--json", os.devnull, "--schedule", str(tmp_path / "a" / "b")]) == 0
    assert sorted(os.listdir(tmp_path / "a" / "b")) == ["fifo-backfill.csv", "quota-borrowing.csv"]


def test_a_failed_write_leaves_no_output_half_written(tmp_path, budgets_file, tiny_trace, capsys, monkeypatch):
    """A write that fails after the replay (a full disk) leaves none of the outputs, nor a temporary file."""
    from scheduling.simulation import cli

    def full_disk(fh, report):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(cli, "report_json", full_disk)
    sched, out = tmp_path / "deep" / "sched", tmp_path / "r.json"
    code = main(["--trace", str(tiny_trace), "--nodes", "2x8:H100", "--budgets", str(budgets_file), "--days", "1",
                 "--policy", "fifo-backfill", "--schedule", str(sched), "--json", str(out)])
    assert code == 2 and f"--json {out}: cannot be written (No space left on device)" in capsys.readouterr().err
    assert sorted(os.listdir(tmp_path)) == sorted([budgets_file.name, tiny_trace.name])  # no folder, no file


def test_a_temporary_file_that_cannot_be_created_is_named_like_any_failed_write(tmp_path, budgets_file, tiny_trace,
                                                                                capsys):
    """The outputs are written beside their targets first; when that file cannot even be created (here a folder
    stands at its name), the message is the usual one, and the cleanup of a file never made does not mask it."""
    out = tmp_path / "r.json"
    (tmp_path / f".r.json.{os.getpid()}.tmp").mkdir()
    code = main(["--trace", str(tiny_trace), "--nodes", "2x8:H100", "--budgets", str(budgets_file), "--days", "1",
                 "--policy", "fifo-backfill", "--json", str(out)])
    assert code == 2 and f"error: --json {out}: cannot be written (Is a directory)" in capsys.readouterr().err
    assert not out.exists()


def test_a_start_of_zero_and_an_output_file_already_there_are_fine(budgets_file, tiny_trace, tmp_path, capsys):
    out = tmp_path / "r.json"
    out.write_text("an earlier run's report", encoding="utf-8")
    code = main(["--trace", str(tiny_trace), "--nodes", "2x8:H100", "--budgets", str(budgets_file), "--start=0",
                 "--policy", "fifo-backfill", "--json", str(out)])
    assert code == 0 and json.loads(out.read_text())["policies"]["fifo-backfill"]["jobs"] == 8
    capsys.readouterr()


def test_side_by_side_replays_count_the_cores_this_process_may_use_not_the_hosts(monkeypatch):
    """A container or CI job pinned to one core of a 64-core host runs one replay at a time (--workers' default)."""
    from scheduling.simulation import cli

    monkeypatch.setattr(cli.os, "cpu_count", lambda: 64)
    monkeypatch.setattr(cli.os, "sched_getaffinity", lambda pid: {3}, raising=False)
    assert cli.usable_cores() == 1
    monkeypatch.delattr(cli.os, "sched_getaffinity")  # (no such call on macOS: the host's count)
    assert cli.usable_cores() == 64
    monkeypatch.setattr(cli.os, "cpu_count", lambda: None)  # (unknown)
    assert cli.usable_cores() == 1


def test_a_trace_with_no_rows_says_so(budgets_file, tmp_path, capsys):
    empty = tmp_path / "t.csv"
    empty.write_text("job_id,submit_s,team,gpus,duration_s\n", encoding="utf-8")
    for extra in ([], ["--days", "2"]):
        code = main(["--trace", str(empty), "--nodes", "2x8:H100", "--budgets", str(budgets_file), *extra])
        window = " in --days 2" if extra else ""
        assert code == 2 and f"{empty}: no job submitted{window} (the file has no rows)" in capsys.readouterr().err
    empty.write_text("timestamp,duration,num_gpus,gpu_time,cluster\n", encoding="utf-8")  # (it said "at ?")
    code = main(["--trace", str(empty), "--format", "philly", "--start", "2017-10-01", "--nodes", "2x8:H100",
                 "--budgets", str(budgets_file)])
    assert code == 2
    assert capsys.readouterr().err == (
        f"error: {empty}: no job submitted from --start 2017-10-01 (the file has no rows)\n")


@pytest.mark.parametrize(("value", "words"), [
    ("-inf", "--start must be a finite number of seconds >= 0 for a normalized trace, got -inf"),
    ("nan", "--start must be a finite number of seconds >= 0 for a normalized trace, got nan"),
    ("-5", "got -5"),
    ("soon", "--start: normalized traces take seconds, got 'soon'"),
])
def test_a_start_that_is_not_a_time_is_a_usage_error(budgets_file, tiny_trace, capsys, value, words):
    """--start=-inf ran, with NaN metrics and a JSON file that JSON readers refuse."""
    code = main(["--trace", str(tiny_trace), "--nodes", "2x8:H100", "--budgets", str(budgets_file),
                 f"--start={value}"])
    captured = capsys.readouterr()
    assert code == 2 and words in captured.err and captured.out == ""


@pytest.mark.parametrize("arg", ["", ",", " , "])
def test_a_policy_list_naming_no_policy_is_a_usage_error(budgets_file, tiny_trace, capsys, arg):
    code = main(["--trace", str(tiny_trace), "--nodes", "2x8:H100", "--budgets", str(budgets_file), "--policy", arg])
    captured = capsys.readouterr()
    assert code == 2 and "--policy: no policy named" in captured.err and captured.out == ""


def test_a_debug_pool_larger_than_the_cluster_is_a_usage_error(budgets_file, tiny_trace, capsys):
    args = ["--trace", str(tiny_trace), "--nodes", "2x8:H100", "--budgets", str(budgets_file), "--days", "1"]
    assert main([*args, "--debug-pool", "3"]) == 2
    assert "--debug-pool 3: more than the 2 node(s) of --nodes 2x8:H100" in capsys.readouterr().err
    assert main([*args, "--debug-pool", "2", "--policy", "fifo-backfill"]) == 0


def test_sessions_that_alone_ask_for_more_than_half_the_cluster_are_announced(tmp_path, budgets_file, capsys):
    """A trace whose debug sessions hold 10 of 16 GPUs on average: no pool can start them in seconds, and the
    replay says so before the debug p95 does. A light session load is not announced."""
    trace = tmp_path / "t.csv"
    rows = [f"s{i},{i * 1800},lab/a,5,3600,debug" for i in range(48)]  # 5 GPUs x 2 sessions at once, all day
    trace.write_text("job_id,submit_s,team,gpus,duration_s,kind\n" + "\n".join(rows) + "\n", encoding="utf-8")
    args = ["--trace", str(trace), "--nodes", "2x8", "--budgets", str(budgets_file), "--policy", "fifo-backfill",
            "--days", "1"]
    assert main(args) == 0
    assert ("warning: the trace's 48 debug sessions hold 10 GPUs on average, 62% of the 16 of --nodes 2x8; a debug "
            "pool holds at most half the nodes, so sessions will wait for batch work to end, not seconds\n") in (
        capsys.readouterr().err)
    for gpus in (3, 1):  # 6 of 16 GPUs (37%) and 2 (12%): a pool can serve them
        light = [row.replace(",5,", f",{gpus},") for row in rows]
        trace.write_text("job_id,submit_s,team,gpus,duration_s,kind\n" + "\n".join(light) + "\n", encoding="utf-8")
        assert main(args) == 0
        assert "debug sessions hold" not in capsys.readouterr().err


def test_a_trace_that_begins_late_or_runs_for_years_is_announced(tmp_path, budgets_file, capsys):
    """A normalized trace whose jobs begin far from 0 (an epoch time) without --start: the empty lead-in counts in
    the window, so the replay says where the jobs begin; a run of over a year is probably in milliseconds."""
    trace = tmp_path / "t.csv"
    trace.write_text("job_id,submit_s,team,gpus,duration_s\na,1700000000,lab/a,1,100\n"
                     "b,1700000100,lab/b,1,400000000\n", encoding="utf-8")
    args = ["--trace", str(trace), "--nodes", "1x8", "--budgets", str(budgets_file), "--policy", "fifo-backfill"]
    assert main([*args, "--days", "20000"]) == 0
    err = capsys.readouterr().err
    assert f"warning: {trace}: the jobs begin at submit_s 1700000000 (19675.9d)" in err
    assert "--start 1700000000 starts it at the first job" in err
    assert "1 job(s) run longer than a year (first: b, line 3, duration_s 4e+08)" in err
    assert main([*args, "--start", "1700000000", "--days", "1"]) == 0
    assert "jobs begin" not in capsys.readouterr().err
    assert main([*args, "--days", "7"]) == 2
    assert f"{trace}: no job submitted in --days 7; its first job is at submit_s 1700000000" in capsys.readouterr().err
    trace.write_text("job_id,submit_s,team,gpus,duration_s\na,172800,lab/a,1,100\n", encoding="utf-8")  # day 2
    assert main([*args, "--days", "3"]) == 0
    assert "the jobs begin at submit_s 172800 (2.0d)" in capsys.readouterr().err
    assert main([*args, "--start", "0", "--days", "3"]) == 0  # (a start the user gave, even 0, is not questioned)
    assert "jobs begin" not in capsys.readouterr().err


def test_json_is_strict_a_metric_that_is_not_a_number_is_written_as_null(tmp_path, budgets_file, tiny_trace,
                                                                         capsys, monkeypatch):
    """JSON has no NaN: were a metric ever to come out NaN or infinite, the file stays readable by strict readers
    (null, as for 0/0) and the replay says which value it was."""
    from scheduling.simulation import cli

    monkeypatch.setattr(cli, "demand_ratio", lambda *a: float("nan"))
    out = tmp_path / "r.json"
    code = main(["--trace", str(tiny_trace), "--nodes", "2x8:H100", "--budgets", str(budgets_file), "--days", "1",
                 "--policy", "fifo-backfill", "--json", str(out)])
    assert code == 0
    assert "--json: demand_ratio is nan, not a number; written as null" in capsys.readouterr().err

    def refuse(name):
        raise ValueError(name)

    report = json.loads(out.read_text(), parse_constant=refuse)
    assert report["demand_ratio"] is None and report["policies"]["fifo-backfill"]["jobs"] == 8


def test_a_cluster_without_gpu_types_replays_a_typed_trace_with_any_gpu(tmp_path, budgets_file, write_file, capsys):
    """``--nodes 16x8`` models no GPU types, so a trace's types (a loader's A100, V100) are ignored, with a warning
    that counts them; a cluster given with types that names none of a job's stops at that job's line."""
    trace = write_file(tmp_path / "typed.csv", "job_id,submit_s,team,gpus,duration_s,gpu_type\n"
                       "a,0,lab/a,8,3600,A100\nb,0,lab/b,4,3600,V100\nc,0,lab/a,2,3600,\nd,10,lab/b,1,60,A100\n")
    sched = tmp_path / "s"
    code = main(["--trace", str(trace), "--nodes", "2x8", "--budgets", str(budgets_file), "--policy", "budget",
                 "--schedule", str(sched)])
    captured = capsys.readouterr()
    assert code == 0
    assert ("warning: --nodes 2x8 gives no GPU type, so the trace's gpu_type is ignored: 3 job(s) ask for one (A100 2, "
            "V100 1); they take any GPU. --nodes COUNTxGPUS:TYPE,... models the types\n") in captured.err
    with open(sched / "budget.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert {r["job_id"] for r in rows} == {"a", "b", "c", "d"} and all(r["end_reason"] == "completed" for r in rows)
    code = main(["--trace", str(trace), "--nodes", "2x8:H100,1x8:B200", "--budgets", str(budgets_file), "--policy",
                 "budget"])
    assert code != 0
    assert "typed.csv:2: gpu_type: no node of type 'A100' in --nodes 2x8:H100,1x8:B200 (types: B200, H100)" in (
        capsys.readouterr().err)


def test_the_teams_file_gives_each_teams_share_of_the_report(tmp_path, write_file, capsys):
    """``--teams-csv``: one row per policy and team. The teams' received and wanted GPU-hours add up to the report's
    impact, their jobs, started and preempted jobs and held GPU-hours to the report's; a team whose budget is far
    too small for its work runs out (and says when), the other does not; the implied root, which holds no budget
    of its own and runs nothing, has no row."""
    budgets = write_file(tmp_path / "b.csv", "team,gpu_hours\nlab/big,2000\nlab/small,2\n")
    rows = ["job_id,submit_s,team,gpus,duration_s"]
    for i in range(40):  # both teams ask for more than the 16 GPUs: the budget policy preempts for its shares
        team = "lab/big" if i % 3 else "lab/small"
        rows.append(f"j{i},{i * 600},{team},{(1, 2, 4, 8)[i % 4]},{7200 + 900 * (i % 5)}")
    trace = write_file(tmp_path / "t.csv", "\n".join(rows) + "\n")
    out = tmp_path / "teams.csv"
    report = main_json(tmp_path, ["--trace", str(trace), "--nodes", "2x8", "--budgets", str(budgets), "--days", "1",
                                  "--policy", "budget,static-priority", "--teams-csv", str(out), "--debug-rate", "2"])
    capsys.readouterr()
    with open(out, newline="") as fh:
        table = list(csv.DictReader(fh))
    assert [(r["policy"], r["team"]) for r in table] == [
        ("budget", "lab/big"), ("budget", "lab/small"), ("static-priority", "lab/big"),
        ("static-priority", "lab/small")]
    for name, m in report["policies"].items():
        mine = {r["team"]: r for r in table if r["policy"] == name}
        received = sum(float(r["received_gpu_hours"]) for r in mine.values())
        wanted = sum(float(r["wanted_gpu_hours"]) for r in mine.values())
        assert received / wanted == pytest.approx(m["impact"], abs=1e-4)
        for key in ("jobs", "started_jobs", "preempted_jobs"):
            assert sum(int(r[key]) for r in mine.values()) == m[key]
        assert sum(float(r["held_gpu_hours"]) for r in mine.values()) == pytest.approx(
            m["delivered_gpu_hours"], abs=0.01)
        assert mine["lab/small"]["ran_out_s"] != "" and mine["lab/big"]["ran_out_s"] == ""
        assert float(mine["lab/small"]["spent_gpu_hours"]) >= 2.0 and mine["lab/small"]["budget_gpu_hours"] == "2.000"
    assert int(report["policies"]["budget"]["preempted_jobs"]) > 0  # (the sums above are not all zero)


@pytest.mark.parametrize(("flag", "writer"), [("--json", "report_json"), ("--teams-csv", "team_rows"),
                                             ("--timeline", "timeline_rows"), ("--schedule", "schedule_rows")])
def test_an_output_that_cannot_be_written_is_named_by_its_option(tmp_path, budgets_file, tiny_trace, capsys,
                                                                 monkeypatch, flag, writer):
    """Before the replay, a file whose folder does not exist; after it, a write that fails (a full disk): each
    message names the option and the path the user gave, and nothing is left written."""
    from scheduling.simulation import cli

    base = ["--trace", str(tiny_trace), "--nodes", "2x8:H100", "--budgets", str(budgets_file), "--days", "1",
            "--policy", "fifo-backfill"]
    if flag != "--schedule":  # (a --schedule folder is created: that it cannot be is the test above's)
        missing = tmp_path / "missing" / "out.csv"
        assert main([*base, flag, str(missing)]) == 2
        captured = capsys.readouterr()
        assert f"error: {flag} {missing}: folder {missing.parent} does not exist" in captured.err
        assert captured.out == ""
        under_a_file = tiny_trace / "out.csv"
        assert main([*base, flag, str(under_a_file)]) == 2
        assert f"error: {flag} {under_a_file}: folder {tiny_trace} is not a folder" in capsys.readouterr().err

    def full_disk(fh, *rows):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(cli, writer, full_disk)
    out = tmp_path / "out"
    path = out / "fifo-backfill.csv" if flag == "--schedule" else out
    assert main([*base, flag, str(out)]) == 2
    assert f"error: {flag} {path}: cannot be written (No space left on device)" in capsys.readouterr().err
    assert sorted(os.listdir(tmp_path)) == sorted([budgets_file.name, tiny_trace.name])


def test_policies_replayed_side_by_side_give_what_they_give_one_after_the_other(tmp_path, budgets_file, tiny_trace,
                                                                               capsys):
    """``--workers 2`` replays the policies in two processes: the same report and the same schedules as
    ``--workers 1``, in the same order."""
    base = ["--trace", str(tiny_trace), "--nodes", "1x4:H100", "--budgets", str(budgets_file), "--days", "1",
            "--policy", "all", "--debug-rate", "2"]
    reports = {}
    for workers in ("1", "2"):
        reports[workers] = main_json(tmp_path, [*base, "--workers", workers, "--schedule", str(tmp_path / workers)])
        for m in reports[workers]["policies"].values():
            m.pop("wall_s")
    capsys.readouterr()
    assert reports["1"] == reports["2"] and list(reports["2"]["policies"]) == list(reports["1"]["policies"])
    for name in reports["1"]["policies"]:
        assert (tmp_path / "1" / f"{name}.csv").read_bytes() == (tmp_path / "2" / f"{name}.csv").read_bytes()


def test_a_policy_bug_in_a_replay_of_its_own_process_is_reported(tmp_path, budgets_file, tiny_trace, capsys,
                                                                 monkeypatch):
    from scheduling.simulation.baselines import QuotaBorrowing
    from scheduling.simulation.model import SimulationError

    def broken(self, snapshot):
        raise SimulationError("quota-borrowing: a GPU given twice")

    monkeypatch.setattr(QuotaBorrowing, "plan", broken)
    code = main(["--trace", str(tiny_trace), "--nodes", "2x8:H100", "--budgets", str(budgets_file), "--days", "1",
                 "--policy", "fifo-backfill,quota-borrowing", "--workers", "2"])
    assert code == 1 and "policy bug: quota-borrowing: a GPU given twice" in capsys.readouterr().err


@pytest.mark.parametrize("value", ["0", "-1"])
def test_workers_below_one_is_a_usage_error(budgets_file, tiny_trace, capsys, value):
    code = main(["--trace", str(tiny_trace), "--nodes", "2x8:H100", "--budgets", str(budgets_file),
                 "--workers", value])
    assert code == 2 and "--workers must be > 0" in capsys.readouterr().err


def test_a_replay_process_that_dies_is_reported_not_a_traceback(tmp_path, budgets_file, tiny_trace, capsys,
                                                                monkeypatch):
    from scheduling.simulation.baselines import QuotaBorrowing

    def killed(self, snapshot):
        os._exit(9)  # as the kernel's out-of-memory killer would end it

    monkeypatch.setattr(QuotaBorrowing, "plan", killed)
    code = main(["--trace", str(tiny_trace), "--nodes", "2x8:H100", "--budgets", str(budgets_file), "--days", "1",
                 "--policy", "fifo-backfill,quota-borrowing", "--workers", "2", "--json", str(tmp_path / "r.json")])
    err = capsys.readouterr().err
    assert code == 1 and "ended without a result" in err and "--workers 1" in err
    assert not (tmp_path / "r.json").exists()


def test_explain_splits_the_budget_policys_loss_by_waiting_reason(budgets_file, tiny_trace, tmp_path, capsys):
    """``--explain``: the budget policy writes its waiting reasons, and the report says why the teams went without
    what they were owed; the baselines give no reasons, so they get no such split."""
    out = tmp_path / "r.json"
    code = main(["simulate", "--trace", str(tiny_trace), "--nodes", "1x4:H100", "--budgets", str(budgets_file),
                 "--policy", "budget,fifo-backfill", "--days", "1", "--explain", "--json", str(out), "--workers", "1"])
    assert code == 0
    table = capsys.readouterr().out
    budget, fifo = (json.loads(out.read_text())["policies"][n] for n in ("budget", "fifo-backfill"))
    why = budget["impact_lost_by_reason"]
    assert why and sum(why.values()) == pytest.approx(1 - budget["impact"])
    assert "impact_lost_by_reason" not in fifo
    assert "why the teams went without what they were owed, budget (--explain)" in table
    assert f"{next(iter(why))}" in table.split("why the teams went without")[1]
    # and, per job size, how many in-budget jobs never started under each policy
    sizes = table.split("in-budget batch jobs that never started, by size (--explain)")[1].split("\n\n")[0]
    rows = {line.split()[0]: line.split()[2:] for line in sizes.splitlines()[1:]}
    assert set(rows) == set(budget["waits_by_gpus"]) | set(fifo["waits_by_gpus"])
    for g, cells in rows.items():
        assert cells == ["-" if (c := m["waits_by_gpus"].get(g)) is None else f"{c['never_started']}/{c['jobs']}"
                         for m in (budget, fifo)]
    # and, under every policy, where the idle GPUs sat
    idle = table.split("where the idle GPUs sat (--explain)")[1].split("\n\n")[0]
    rows = {line.split()[0]: line.split()[1:] for line in idle.splitlines()[1:]}
    assert list(rows) == ["debug-pool", "reserved", "elsewhere"]
    for place, cells in rows.items():
        assert cells == [f"{m['occupancy_idle_by_place'][place]:.3f}" for m in (budget, fifo)]
