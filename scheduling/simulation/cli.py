"""Command-line front ends, shared by ``python -m scheduling.simulation`` and the Django management commands.

``simulate``: replay a trace under one or all policies and print the pyramid side by side.
``bench``: time one scheduling cycle (``policy.plan``) on synthetic snapshots of growing queue size.
"""

from __future__ import annotations

import argparse
import csv
import math
import os
import statistics
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Sequence
from contextlib import suppress
from dataclasses import replace
from typing import TextIO

from scheduling.policy import BudgetPolicy
from scheduling.policy.types import PolicyConfig
from scheduling.simulation.baselines import BASELINES, FifoBackfill, QuotaBorrowing, StaticPriority
from scheduling.simulation.model import (
    DEBUG_SESSION_MINUTES,
    DEFAULT_CONTRACTS,
    SimConfig,
    SimulationError,
    cluster_fits,
    demand_ratio,
    oversized_session,
    session_gpus,
)
from scheduling.simulation.output import (
    METRIC_KEYS,
    finite_report,
    format_table,
    human_duration,
    report_json,
    schedule_rows,
    targets,
    team_rows,
    timeline_rows,
)
from scheduling.simulation.output import write_line as _line
from scheduling.simulation.parallel import ReplayProcessDied, replay_all
from scheduling.simulation.trace import (
    DAY_S,
    DEFAULT_GPU_TYPE,
    TraceError,
    TraceJob,
    load_budgets,
    load_philly,
    load_trace,
    parse_nodes,
)

POLICIES = ("budget", *BASELINES)


class UsageError(ValueError):
    """Bad command-line arguments (exit code 2)."""


def make_policy(name: str, jobs: Sequence[TraceJob] = (), static_preempt: bool = False):
    if name == "budget":
        return BudgetPolicy()
    if name == "fifo-backfill":
        return FifoBackfill()
    if name == "static-priority":
        return StaticPriority({j.id: j.priority for j in jobs if j.priority}, preempt=static_preempt)
    if name == "quota-borrowing":
        return QuotaBorrowing()
    raise UsageError(f"--policy: unknown policy {name!r} (choose from {', '.join(POLICIES)} or all)")


def policy_names(arg: str) -> list[str]:
    """The policies ``--policy`` names, in its order (``all``: the four)."""
    if arg == "all":
        return list(POLICIES)
    names = [n.strip() for n in arg.split(",") if n.strip()]
    if not names:  # "" or ",": a run of nothing would print an empty table and exit 0
        raise UsageError(f"--policy: no policy named in {arg!r} (choose from {', '.join(POLICIES)} or all)")
    for n in names:
        if n not in POLICIES:
            raise UsageError(f"--policy: unknown policy {n!r} (choose from {', '.join(POLICIES)} or all)")
    return names


# ---- simulate -----------------------------------------------------------------------------------------------


def add_simulate_arguments(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    p.add_argument("--trace", required=True, help="trace CSV (normalized format, or Philly with --format philly)")
    p.add_argument("--format", choices=("normalized", "philly"), default="normalized")
    p.add_argument("--nodes", required=True,
                   help="node groups COUNTxGPUS[:TYPE], e.g. 16x8:H100,4x8:B200 (no type: one generic type)")
    p.add_argument("--budgets", required=True, help="team,gpu_hours CSV")
    p.add_argument("--start", default=None,
                   help="window start: a date for --format philly (e.g. 2017-10-01), seconds for normalized")
    p.add_argument("--days", type=float, default=None, help="window length in days (default: the whole trace)")
    p.add_argument("--policy", default="all", help=f"{'|'.join(POLICIES)}|all, or a comma-separated list")
    p.add_argument("--debug-rate", type=float, default=0.0, help="interactive debug sessions per hour (Poisson)")
    p.add_argument("--debug-pool", type=int, default=None,
                   help="nodes kept for debug sessions first (the first N nodes; lent to batch work above a free "
                        "headroom). Default: sized to the expected debug load (at least one node in eight) when the "
                        "run has debug sessions, else none")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", default=None, help="write the metrics as JSON to this file")
    p.add_argument("--schedule", default=None, help="write DIR/POLICY.csv, one row per allocation interval")
    p.add_argument("--teams-csv", default=None, metavar="FILE",
                   help="write each team's figures under each policy (budget, spent, impact's share, jobs, "
                        "preempted jobs, waits) to this CSV file")
    p.add_argument("--timeline", default=None, metavar="FILE",
                   help="write each team's GPUs entitled, wanted, held and received, and its budget spent, "
                        "interval by interval under each policy, to this CSV file")
    p.add_argument("--timeline-hours", type=float, default=1.0, metavar="H",
                   help="the --timeline's interval (default 1 hour)")
    p.add_argument("--mtbf-hours", type=float, default=None, help="mean time between failures of each node")
    p.add_argument("--repair-hours", type=float, default=4.0, help="hours a failed node stays down")
    p.add_argument("--checkpoint-minutes", type=float, default=30.0, help="periodic checkpoint interval")
    p.add_argument("--checkpoint-save-seconds", type=float, default=60.0,
                   help="a preempted job exits this long after its signal (at most its grace); 0: it holds its "
                        "GPUs for the whole grace")
    p.add_argument("--squatters", type=int, default=0, help="idle placeholder jobs (utilization 0)")
    p.add_argument("--debug-forget", type=float, default=0.0, metavar="SHARE",
                   help="share of debug sessions left open after their work: idle until released or expired")
    p.add_argument("--debug-sessions-per-user", type=int, default=2, metavar="N",
                   help="open debug sessions one user may hold (the portal's limit): a trace session beyond it runs "
                        "as a batch job; 0: no limit")
    p.add_argument("--debug-sessions-per-team", type=int, default=0, metavar="N",
                   help="open debug sessions one team may hold (the portal's team limit): a trace or generated "
                        "session beyond it runs as a batch job; 0 (default): no limit")
    p.add_argument("--reclaim-after-gpu-hours", type=float, default=None, metavar="H",
                   help="budget: a team short of its share preempts only once it has gone without this many "
                        "GPU-hours of it (default 1; 0: as soon as its job has waited)")
    p.add_argument("--debug-headroom", type=int, default=None, metavar="GPUS",
                   help="budget: free debug-pool GPUs kept for the next sessions; batch work borrows the pool only "
                        "beyond them (docs/policy.md, section 8; default 3)")
    p.add_argument("--gang-turns", action=argparse.BooleanOptionalAction, default=True,
                   help="budget: a gang larger than what its team is owed gets a turn once its team's wait paid "
                        "for its protected time, and so does a job of one node that waited a day at the head of a "
                        "team that runs no batch work (docs/policy.md, section 7; default: on)")
    p.add_argument("--guaranteed-first", action=argparse.BooleanOptionalAction, default=True,
                   help="budget: give the free GPUs first to the jobs that start as their team's own work (within "
                        "its guaranteed part), then serve every job (docs/policy.md, section 4; default: on)")
    p.add_argument("--explain", action="store_true",
                   help="budget: write every waiting job's reason each cycle (a cycle costs about twice as much) "
                        "and report why the teams went without what they were owed, by the kind of reason "
                        "(impact_lost_by_reason); every policy: the impact ceiling of whole jobs, what any schedule "
                        "could reach when jobs are larger than their teams' shares (impact_ceiling_whole_jobs), and "
                        "where the idle GPUs sat: the debug pool, nodes reserved for a job, elsewhere "
                        "(occupancy_idle_by_place; docs/simulation.md)")
    p.add_argument("--static-preempt", action="store_true", help="static-priority: HIGH preempts LOW")
    p.add_argument("--workers", type=int, default=None, metavar="N",
                   help="policies replayed at once, each in its own process (default: one per core; 1: one after "
                        "the other, in this process)")
    p.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                   help="progress bar on stderr (default: only on a terminal)")
    return p


def with_policy_options(cfg: SimConfig, opts: argparse.Namespace) -> SimConfig:
    """``cfg`` with the policy settings the options change (the simulator's defaults for the others)."""
    changes = {}
    if opts.reclaim_after_gpu_hours is not None:
        changes["reclaim_after_gpu_s"] = opts.reclaim_after_gpu_hours * 3600
    if getattr(opts, "debug_headroom", None) is not None:
        changes["debug_headroom_gpus"] = opts.debug_headroom
    if not getattr(opts, "gang_turns", True):
        changes["gang_turns"] = False
    if not getattr(opts, "guaranteed_first", True):
        changes["guaranteed_first"] = False
    if not changes:
        return cfg
    return replace(cfg, policy_config=replace(cfg.policy_config, **changes))


# Numeric options and what each must be: (attribute, strictly positive, may be left unset). Each must be finite.
_POSITIVE = (
    ("days", True, True), ("mtbf_hours", True, True), ("repair_hours", True, False),
    ("checkpoint_minutes", True, False), ("debug_rate", False, False), ("checkpoint_save_seconds", False, False),
    ("debug_pool", False, True), ("squatters", False, False), ("debug_sessions_per_user", False, False),
    ("debug_sessions_per_team", False, False), ("workers", True, True), ("timeline_hours", True, True),
)


def check_options(opts: argparse.Namespace, names: Sequence[str] = ()) -> None:
    """Every numeric option finite and in range, and the output paths writable, before anything runs: a bad value
    must stop the command at once, not after a long replay (nor give NaN metrics, or silently switch a model off).
    ``names``: the policies to run, whose ``--schedule`` files are checked too."""
    for name, strict, optional in _POSITIVE:
        value = getattr(opts, name, None)
        if value is None and optional:
            continue
        flag = "--" + name.replace("_", "-")
        if value is None or not math.isfinite(value):
            raise UsageError(f"{flag} must be a finite number, got {value}")
        if value < 0 or (strict and value == 0):
            raise UsageError(f"{flag} must be {'>' if strict else '>='} 0, got {value}")
    if opts.format != "philly" and opts.start:
        normalized_start(opts.start)
    for flag, path in (("--trace", opts.trace), ("--budgets", opts.budgets)):
        if os.path.isdir(path):
            raise UsageError(f"{flag} {path}: is a folder, not a CSV file")
    check_outputs(opts, names)


def normalized_start(raw: str) -> float:
    """``--start`` of a normalized trace: seconds, finite and >= 0 (submit times are; a window from -inf has no
    length, and its metrics are NaN)."""
    try:
        start = float(raw)
    except ValueError:
        raise UsageError(f"--start: normalized traces take seconds, got {raw!r}") from None
    if not math.isfinite(start) or start < 0:
        raise UsageError(f"--start must be a finite number of seconds >= 0 for a normalized trace, got {raw}")
    return start


def check_outputs(opts: argparse.Namespace, names: Sequence[str]) -> None:
    """``--json``, ``--teams-csv``, ``--timeline`` and ``--schedule`` (the folder and each POLICY.csv in it)
    writable, before the replay: a path that cannot be written must not be found after it, with some outputs written
    and others not."""
    for flag, path in (("--json", opts.json), ("--teams-csv", getattr(opts, "teams_csv", None)),
                       ("--timeline", getattr(opts, "timeline", None))):
        if not path:
            continue
        folder = os.path.dirname(os.path.abspath(path))
        if not os.path.isdir(path) and not os.path.isdir(folder):
            what = "is not a folder" if os.path.exists(folder) else "does not exist"
            raise UsageError(f"{flag} {path}: folder {folder} {what}")
        _check_output_file(flag, path)
    if getattr(opts, "schedule", None):  # (bench has no --schedule)
        if os.path.exists(opts.schedule) and not os.path.isdir(opts.schedule):
            raise UsageError(f"--schedule {opts.schedule}: exists and is not a folder")
        base = _existing_ancestor(opts.schedule)
        if not os.path.isdir(base):
            raise UsageError(f"--schedule {opts.schedule}: {base} is not a folder")
        _check_writable("--schedule", opts.schedule, base)
        for name in names:
            _check_output_file("--schedule", os.path.join(opts.schedule, f"{name}.csv"))


def _check_output_file(flag: str, path: str) -> None:
    """A file the command will write: not a folder, and creatable (or, for a device such as /dev/null, writable)."""
    if os.path.isdir(path):
        raise UsageError(f"{flag} {path}: is a folder")
    if os.path.exists(path) and not os.path.isfile(path):
        if not os.access(path, os.W_OK):
            raise UsageError(f"{flag} {path}: cannot be written")
        return
    folder = _existing_ancestor(os.path.dirname(os.path.abspath(path)))
    if os.path.isdir(folder):  # a --schedule folder still to be created: its ancestor was checked
        _check_writable(flag, path, folder)


def _existing_ancestor(path: str) -> str:
    """``path`` or its nearest ancestor that exists."""
    path = os.path.abspath(path)
    while not os.path.exists(path) and os.path.dirname(path) != path:
        path = os.path.dirname(path)
    return path


def _check_writable(flag: str, path: str, folder: str) -> None:
    """Create (and remove) a file in ``folder``: permissions are not the only refusal (read-only mounts, /proc)."""
    try:
        fd, probe = tempfile.mkstemp(dir=folder, prefix=".simulate-probe-")
        os.close(fd)
        os.remove(probe)
    except OSError as exc:
        raise UsageError(f"{flag} {path}: cannot create files in {folder} ({exc.strerror or exc})") from None


def load_inputs(opts: argparse.Namespace, names: Sequence[str] = (), warn: Callable[[str], None] | None = None):
    """Budgets, nodes and the jobs of the window, every option checked first; ``warn`` gets the loaders' doubts."""
    check_options(opts, names)
    if opts.reclaim_after_gpu_hours is not None and not opts.reclaim_after_gpu_hours >= 0:
        raise UsageError(f"--reclaim-after-gpu-hours must be >= 0, got {opts.reclaim_after_gpu_hours}")
    if opts.debug_headroom is not None and opts.debug_headroom < 0:
        raise UsageError(f"--debug-headroom must be >= 0 GPUs, got {opts.debug_headroom}")
    if not 0.0 <= opts.debug_forget <= 1.0:
        raise UsageError(f"--debug-forget must be a share between 0 and 1, got {opts.debug_forget}")
    budgets = load_budgets(opts.budgets)
    try:
        nodes = parse_nodes(opts.nodes)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    if opts.debug_pool is not None and opts.debug_pool > len(nodes):  # it would silently make every node the pool
        raise UsageError(f"--debug-pool {opts.debug_pool}: more than the {len(nodes)} node(s) of --nodes {opts.nodes}")
    if opts.format == "philly":
        try:
            jobs = load_philly(opts.trace, budgets.teams, start=opts.start, days=opts.days)
        except ValueError as exc:
            if isinstance(exc, TraceError):
                raise
            raise UsageError(str(exc)) from None
    else:
        start = normalized_start(opts.start) if opts.start else 0.0
        jobs = load_trace(opts.trace, budgets.teams, start_s=start, days=opts.days, warn=warn)
    types = {n.gpu_type for n in nodes}

    def unknown_type(j: TraceJob) -> bool:
        return j.gpu_type is not None and j.gpu_type not in types

    typed = [j for j in jobs if unknown_type(j)]
    if typed and types == {DEFAULT_GPU_TYPE}:
        # A cluster given without GPU types (``--nodes 16x8``) says nothing of them: the trace's types are not
        # wrong, only not modelled, so its jobs take any GPU (a typed cluster naming no such type is a mistake).
        if warn is not None:
            asked = Counter(j.gpu_type for j in typed)
            warn(f"warning: --nodes {opts.nodes} gives no GPU type, so the trace's gpu_type is ignored: "
                 f"{len(typed)} job(s) ask for one ({', '.join(f'{t} {n}' for t, n in sorted(asked.items()))}); "
                 "they take any GPU. --nodes COUNTxGPUS:TYPE,... models the types")
        jobs = [replace(j, gpu_type=None) if unknown_type(j) else j for j in jobs]
    elif typed:
        j = typed[0]
        raise TraceError(opts.trace, j.line, "gpu_type",
                         f"no node of type {j.gpu_type!r} in --nodes {opts.nodes} (types: {', '.join(sorted(types))})")
    return budgets, nodes, jobs


def first_timestamp(path: str) -> str | None:
    """The first row's timestamp of a Philly CSV (the file is sorted by it; its columns were checked when it was
    loaded), None when it has no row."""
    with open(path, newline="", encoding="utf-8-sig") as fh:
        row = next(csv.DictReader(fh), None)
    return None if row is None else row["timestamp"]


def first_job(opts: argparse.Namespace) -> str | None:
    """Where the file's jobs begin, for messages (None: the file has no job): the first row's timestamp of a Philly
    file, the earliest submit_s of a normalized trace (which need not be sorted; the file was read once already)."""
    if opts.format == "philly":
        return first_timestamp(opts.trace)
    first = min((j.submit_s for j in load_trace(opts.trace)), default=None)
    return None if first is None else f"submit_s {first:.15g} ({human_duration(first)})"


def trace_sessions(opts: argparse.Namespace, jobs: Sequence[TraceJob]) -> tuple[list[tuple[TraceJob, float]], float]:
    """The trace's debug sessions that the replay serves as sessions (not those too large, which run as batch
    jobs), each with how long it holds its GPUs (its run, ended at its own limit or the debug contract's), and the
    window their load is averaged over: ``--days``, else the span of the submits (an hour at least)."""
    sessions = [j for j in jobs if j.kind == "debug" and not oversized_session(j, PolicyConfig().debug_max_gpus)]
    if not sessions:
        return [], 0.0
    cap = next(c.max_runtime_s for c in DEFAULT_CONTRACTS if c.name == "debug") or math.inf
    window = (opts.days * DAY_S if opts.days is not None
              else max(3600.0, max(j.submit_s for j in jobs) - min(j.submit_s for j in jobs)))
    return [(j, min(j.duration_s, cap, j.time_limit_s or math.inf)) for j in sessions], window


def debug_pool_nodes(opts: argparse.Namespace, jobs: Sequence[TraceJob], nodes) -> tuple[str, ...]:
    """The debug pool's node ids: the first ``--debug-pool`` nodes, or by default a pool sized to the expected
    debug load (none without debug sessions).

    The load is what a lab sizing its pool would look at: the debug GPUs in use at once, on average ``m`` and
    with variance ``v`` (sessions arrive as a Poisson stream, so the GPUs in use are a compound Poisson sum:
    ``m = rate x E[g d]``, ``v = rate x E[g^2 d]``), per GPU type; sessions that take any type count on the type
    with the most GPUs. Each type's pool holds ``m + 3 sqrt(v)`` GPUs (nearly every moment's sessions), in whole
    nodes of that type from the front of ``nodes``, at most half of them; the pool as a whole has at least one node
    in eight. Its GPUs are lent to batch work while sessions leave them free, so a generous pool costs little
    occupancy. Where a type has nodes of several sizes, the pool takes the smallest that hold the largest session.
    """
    if opts.debug_pool is not None:
        return tuple(n.id for n in nodes[:opts.debug_pool])
    lo, hi = session_gpus(nodes)  # the synthetic stream: GPUs and minutes uniform, independent, any GPU type
    debug, window = trace_sessions(opts, jobs)
    if not (opts.debug_rate > 0 or debug):
        return ()
    by_type: dict[str, list] = {}
    for n in nodes:
        by_type.setdefault(n.gpu_type, []).append(n)
    # On nodes of different sizes, the smallest that hold the largest session: big nodes stay whole for gangs
    # (a pool on them, with its headroom, can keep a gang of nearly the whole type from ever starting).
    largest = max([hi if opts.debug_rate > 0 else 1] + [j.gpus for j, _ in debug])
    for group in by_type.values():
        group.sort(key=lambda n: (n.gpus < largest, n.gpus))  # stable: in --nodes order among equals
    main_type = max(by_type, key=lambda t: (sum(n.gpus for n in by_type[t]), -list(by_type).index(t)))
    sizes = range(lo, hi + 1)
    hours = sum(DEBUG_SESSION_MINUTES) / 2 / 60
    gd = dict.fromkeys(by_type, 0.0)
    g2d = dict.fromkeys(by_type, 0.0)
    gd[main_type] = opts.debug_rate * hours * sum(sizes) / len(sizes)
    g2d[main_type] = opts.debug_rate * hours * sum(g * g for g in sizes) / len(sizes)
    for j, held_s in debug:
        t = j.gpu_type if j.gpu_type in by_type else main_type
        gd[t] += j.gpus * held_s / window
        g2d[t] += j.gpus ** 2 * held_s / window
    taken: dict[str, int] = {}
    for t, group in by_type.items():
        want, k, held = gd[t] + 3 * math.sqrt(g2d[t]), 0, 0
        while gd[t] > 0 and k < max(1, len(group) // 2) and held < want:
            held += group[k].gpus
            k += 1
        taken[t] = k
    least = max(1, round(len(nodes) / 8))
    while sum(taken.values()) < least and taken[main_type] < len(by_type[main_type]):
        taken[main_type] += 1
    pool = {n.id for t, group in by_type.items() for n in group[:taken[t]]}
    return tuple(n.id for n in nodes if n.id in pool)


def simulate(opts: argparse.Namespace, out: TextIO | None = None, err: TextIO | None = None) -> dict:
    """Run the replay for every requested policy; print the table; write --json/--schedule. Returns the report.

    Raises TraceError / UsageError for bad input, SimulationError when a policy breaks a rule.
    """
    out, err = out or sys.stdout, err or sys.stderr
    names = policy_names(opts.policy)
    budgets, nodes, jobs = load_inputs(opts, names, lambda text: _line(err, text))
    if not jobs:
        raise no_jobs_error(opts)
    announce_inputs(opts, jobs, nodes, err)
    horizon = opts.days * DAY_S if opts.days is not None else None
    pool = debug_pool_nodes(opts, jobs, nodes)
    report: dict = {"demand_ratio": None, "policies": {}}
    schedules: dict[str, list[tuple]] = {}
    teams: dict[str, dict[str, dict]] = {}
    timelines: dict[str, list[tuple]] = {}
    configs = {name: with_policy_options(sim_config(opts, budgets, nodes, horizon, pool), opts) for name in names}
    if opts.explain and "budget" in configs:  # (the baselines give no reasons)
        cfg = configs["budget"]
        configs["budget"] = replace(cfg, policy_config=replace(cfg.policy_config, explain=True))
    results = replay_all(names, configs, jobs, lambda name: make_policy(name, jobs, opts.static_preempt),
                         opts.workers or usable_cores())
    for name in names:
        result = results[name]
        if result.teams is not None:
            teams[name] = result.teams
        if result.timeline is not None:
            timelines[name] = result.timeline
        entry = {**{k: result.metrics.get(k) for k in METRIC_KEYS},
                 **{k: v for k, v in result.metrics.items() if k not in METRIC_KEYS}}
        if horizon is None:  # each policy's metrics run to its own end; meta.window_s is the trace's
            entry["window_s"] = result.horizon_s
        report["policies"][name] = {**entry, "wall_s": round(result.wall_s, 3)}
        stuck = result.metrics.get("never_started") or 0
        if stuck and horizon is None:
            _line(err, f"note: {name}: {stuck} job(s) never started; without --days the window ends when nothing "
                       f"more can happen (at {human_duration(result.horizon_s)}), and their waits count up to then")
        schedules[name] = result.schedule
    window = demand_window(jobs, nodes, horizon)
    report["demand_ratio"] = demand_ratio(jobs, nodes, window)
    report["meta"] = {
        "trace": opts.trace, "format": opts.format, "nodes": opts.nodes, "gpus": sum(n.gpus for n in nodes),
        "window_s": window, "jobs_in_window": len(jobs), "seed": opts.seed,
    }
    report["targets"] = [t.as_json() for t in targets(report)]
    _line(out, format_table(report))
    write_outputs(output_files(opts, report, schedules, err, teams, timelines))
    return report


def usable_cores() -> int:
    """The cores this process may run on (a container's or a CI job's share, not the whole host's)."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return os.cpu_count() or 1


def sim_config(opts: argparse.Namespace, budgets, nodes, horizon: float | None, pool: tuple[str, ...]) -> SimConfig:
    """The replay's settings from the options (the policy's own: :func:`with_policy_options`)."""
    return SimConfig(
        nodes=nodes, budgets=budgets, horizon_s=horizon, seed=opts.seed, debug_rate_per_hour=opts.debug_rate,
        debug_pool_nodes=pool, mtbf_hours=opts.mtbf_hours, repair_hours=opts.repair_hours,
        checkpoint_minutes=opts.checkpoint_minutes,
        checkpoint_save_s=opts.checkpoint_save_seconds or None, squatters=opts.squatters, progress=opts.progress,
        debug_forget_share=opts.debug_forget, debug_sessions_per_user=opts.debug_sessions_per_user,
        debug_sessions_per_team=opts.debug_sessions_per_team, per_team=bool(opts.teams_csv),
        whole_jobs=opts.explain, idle_by_place=opts.explain,
        timeline_s=opts.timeline_hours * 3600 if opts.timeline else None,
    )


def demand_window(jobs: Sequence[TraceJob], nodes, horizon: float | None) -> float:
    """The window of the demand ratio: ``--days``, or without it the trace's own span, from 0 to the moment the last
    job's work would end had every job started at its submit. Each policy's replay without ``--days`` ends when
    nothing more can happen, at its own moment; a ratio over that would depend on the policies run."""
    if horizon is not None:
        return horizon
    fits = cluster_fits(nodes)
    return max((j.submit_s + j.duration_s for j in jobs if fits(j)), default=0.0) or 1.0


def no_jobs_error(opts: argparse.Namespace) -> UsageError:
    """No job in the window: say which window, and where the file's jobs begin."""
    window = ((f" from --start {opts.start}" if opts.start else "")
              + (f" in --days {opts.days:g}" if opts.days else ""))
    first = first_job(opts)
    if not window or first is None:
        return UsageError(f"{opts.trace}: no job submitted{window} (the file has no rows)")
    return UsageError(f"{opts.trace}: no job submitted{window}; its first job is at {first}")


YEAR_S = 365 * DAY_S


def announce_inputs(opts: argparse.Namespace, jobs: Sequence[TraceJob], nodes, err: TextIO) -> None:
    """Warnings and notes on stderr about jobs the replay treats specially, or inputs that look mistaken."""
    if opts.format == "philly" and not opts.start:
        _line(err, f"note: the window starts at the file's first job ({first_timestamp(opts.trace)}); "
                   "--start DATE picks another, e.g. --start 2017-10-01")
    first = min(j.submit_s for j in jobs)
    if opts.format != "philly" and not opts.start and first >= DAY_S:
        gap = human_duration(first)
        _line(err, f"warning: {opts.trace}: the jobs begin at submit_s {first:.15g} ({gap}); the window starts at 0, "
                   f"and the empty {gap} before them count in it (occupancy and the demand ratio are diluted); "
                   f"--start {first:.15g} starts it at the first job")
    fits = cluster_fits(nodes)
    too_big = [j for j in jobs if not fits(j)]
    if too_big:
        _line(err, f"warning: {len(too_big)} job(s) ask for more GPUs than --nodes {opts.nodes} has (first: "
                   f"{too_big[0].id}, {too_big[0].gpus} GPUs, line {too_big[0].line}); they are rejected at submit")
    cut = [j for j in jobs if j.time_limit_s is not None and j.time_limit_s < j.duration_s]
    if cut:
        _line(err, f"note: {len(cut)} job(s) run longer than their time_limit_s (first: {cut[0].id}, line "
                   f"{cut[0].line}); each run is stopped at its limit, as Slurm's TIMEOUT (`timeouts` in the JSON)")
    max_debug = PolicyConfig().debug_max_gpus
    big_debug = [j for j in jobs if oversized_session(j, max_debug)]
    if big_debug:
        _line(err, f"warning: {len(big_debug)} debug session(s) ask for more than {max_debug} GPUs (first: "
                   f"{big_debug[0].id}, line {big_debug[0].line}); they run as batch jobs, as the portal would ask")
    sessions, window = trace_sessions(opts, jobs)
    capacity = sum(n.gpus for n in nodes)
    if sessions and capacity:
        held = sum(j.gpus * held_s for j, held_s in sessions) / window
        if held > capacity / 2:  # the default pool takes at most half the nodes (debug_pool_nodes)
            _line(err, f"warning: the trace's {len(sessions)} debug sessions hold {held:.0f} GPUs on average, "
                       f"{100 * held / capacity:.0f}% of the {capacity} of --nodes {opts.nodes}; a debug pool holds at "
                       "most half the nodes, so sessions will wait for batch work to end, not seconds")
    years = [j for j in jobs if j.duration_s > YEAR_S]
    if years:  # replayed as given: a year-long job is odd, not impossible
        field = "duration" if opts.format == "philly" else "duration_s"
        _line(err, f"warning: {len(years)} job(s) run longer than a year (first: {years[0].id}, line {years[0].line},"
                   f" {field} {years[0].duration_s:g}); {field} is in seconds: are these milliseconds?")


def output_files(opts: argparse.Namespace, report: dict, schedules: dict[str, list[tuple]], err: TextIO,
                 teams: dict[str, dict[str, dict]] | None = None, timelines: dict[str, list[tuple]] | None = None):
    """(option, path, writer) of each output file the options ask for."""
    files = []
    if getattr(opts, "teams_csv", None):
        files.append(("--teams-csv", opts.teams_csv, lambda fh: team_rows(fh, teams or {})))
    if getattr(opts, "timeline", None):
        files.append(("--timeline", opts.timeline, lambda fh: timeline_rows(fh, timelines or {})))
    if opts.schedule:
        for name, rows in schedules.items():
            files.append(("--schedule", os.path.join(opts.schedule, f"{name}.csv"),
                          lambda fh, rows=rows: schedule_rows(fh, rows)))
    if opts.json:
        files.append(json_output(opts.json, report, err))
    return files


def json_output(path: str, report: dict, err: TextIO) -> tuple[str, str, Callable[[TextIO], None]]:
    """The ``--json`` file for ``write_outputs``: the report as strict JSON (``finite_report`` names on ``err``
    any value written as null)."""
    clean = finite_report(report, err)
    return "--json", path, lambda fh: report_json(fh, clean)


def write_outputs(files: Sequence[tuple[str, str, Callable[[TextIO], None]]]) -> None:
    """Write every output or none: each to a temporary file beside it, renamed into place once all are written, so
    that a failure (a full disk, a path that changed during the replay) leaves no output half written. A device
    such as /dev/null is written in place, last. A failure is a UsageError naming the option and path."""
    staged: list[tuple[str, str, str]] = []  # (option, temporary file, target)
    made: list[str] = []  # folders created for the outputs, removed again on failure
    flag, path = "", ""
    try:
        for flag, path, write in files:
            if os.path.exists(path) and not os.path.isfile(path):
                continue
            folder = os.path.dirname(os.path.abspath(path))
            made += _make_folders(folder)
            tmp = os.path.join(folder, f".{os.path.basename(path)}.{os.getpid()}.tmp")
            staged.append((flag, tmp, path))
            with open(tmp, "w", newline="", encoding="utf-8") as fh:
                write(fh)
        for flag, tmp, path in staged:
            os.replace(tmp, path)
        for flag, path, write in files:
            if os.path.exists(path) and not os.path.isfile(path):
                with open(path, "w", newline="", encoding="utf-8") as fh:
                    write(fh)
    except BaseException as exc:  # an interrupt too: no temporary file is left behind
        for _, tmp, _ in staged:
            with suppress(OSError):
                os.remove(tmp)
        for folder in reversed(made):
            with suppress(OSError):
                os.rmdir(folder)
        if isinstance(exc, OSError):
            raise UsageError(f"{flag} {path}: cannot be written ({exc.strerror or exc})") from None
        raise


def _make_folders(folder: str) -> list[str]:
    """Create ``folder`` and its missing ancestors; the ones created, outermost first."""
    missing = []
    while not os.path.isdir(folder):
        missing.append(folder)
        folder = os.path.dirname(folder)
    for f in reversed(missing):
        os.mkdir(f)
    return missing[::-1]


def run_simulate(argv: Sequence[str] | None, out: TextIO | None = None, err: TextIO | None = None) -> int:
    out, err = out or sys.stdout, err or sys.stderr
    parser = add_simulate_arguments(argparse.ArgumentParser(prog="simulate", description=__doc__))
    opts = parser.parse_args(argv)
    return guarded(lambda: simulate(opts, out, err), err)


def guarded(fn, err: TextIO) -> int:
    """Run ``fn``; print input errors as ``error: FILE:LINE: field: message`` and return 2 (1 for policy bugs).

    The Django commands use :func:`command_errors` itself, turning the same exceptions into ``CommandError``."""
    code, message = command_errors(fn)
    if code:
        _line(err, f"error: {message}")
    return code


def command_errors(fn):
    """Run ``fn`` and map input errors to (returncode, message) for Django's CommandError; (0, "") when fine."""
    try:
        fn()
    except (TraceError, UsageError) as exc:
        return 2, str(exc)
    except FileNotFoundError as exc:
        return 2, f"{exc.filename}: file not found"
    except SimulationError as exc:
        return 1, f"policy bug: {exc}"
    except ReplayProcessDied as exc:
        return 1, str(exc)
    return 0, ""


# ---- bench --------------------------------------------------------------------------------------------------


def add_bench_arguments(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    p.add_argument("--gpus", type=int, default=1024)
    p.add_argument("--teams", type=int, default=30)
    p.add_argument("--pending", default="1000,10000,100000", help="comma-separated pending-queue sizes")
    p.add_argument("--users", type=int, default=150)
    p.add_argument("--policy", default="all", help=f"{'|'.join(POLICIES)}|all, or a comma-separated list")
    p.add_argument("--repeat", type=int, default=None,
                   help="cycles timed per size (default: 20 up to 10k pending, fewer above)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--guaranteed-first", action=argparse.BooleanOptionalAction, default=True,
                   help="budget: time the cycle with its first batch pass for the teams' own work (docs/policy.md, "
                        "section 4; default: on), or without it")
    p.add_argument("--json", default=None)
    return p


def synthetic_snapshot(gpus: int, teams: int, pending: int, users: int = 150, seed: int = 0):
    from scheduling.policy.synthetic import synthetic_snapshot as make  # the policy engineer's generator

    return make(gpus, teams, pending, users=users, seed=seed)


def bench(opts: argparse.Namespace, out: TextIO | None = None, err: TextIO | None = None) -> dict:
    out, err = out or sys.stdout, err or sys.stderr
    names = policy_names(opts.policy)
    try:
        sizes = [int(s) for s in str(opts.pending).split(",") if s.strip()]
    except ValueError:
        raise UsageError(f"--pending: expected comma-separated integers, got {opts.pending!r}") from None
    if not sizes or any(s < 0 for s in sizes):
        raise UsageError("--pending: give at least one size >= 0")
    if opts.gpus < 1 or opts.teams < 1:
        raise UsageError("--gpus and --teams must be >= 1")
    check_outputs(opts, ())  # a bad --json path stops the bench now, not after minutes of timing
    report: dict = {"policies": {n: {} for n in names}}
    for size in sizes:
        snap = synthetic_snapshot(opts.gpus, opts.teams, size, users=opts.users, seed=opts.seed)
        if not getattr(opts, "guaranteed_first", True):
            snap = replace(snap, config=replace(snap.config, guaranteed_first=False))
        repeat = opts.repeat or (20 if size <= 10_000 else 3)
        for name in names:
            policy = make_policy(name)
            policy.plan(snap)  # warm-up, untimed (first-call caches)
            times = []
            for _ in range(repeat):
                t0 = time.perf_counter()
                policy.plan(snap)
                times.append((time.perf_counter() - t0) * 1000)
            times.sort()
            p95 = times[min(len(times) - 1, math.ceil(0.95 * len(times)) - 1)]
            report["policies"][name][str(size)] = {
                "p50_ms": round(statistics.median(times), 3), "p95_ms": round(p95, 3), "repeat": repeat,
            }
            _line(out, f"{name:<16} pending={size:>7}  p50={statistics.median(times):9.2f} ms  p95={p95:9.2f} ms"
                       f"  (n={repeat})")
    if opts.json:
        write_outputs([json_output(opts.json, report, err)])
    return report


def run_bench(argv: Sequence[str] | None, out: TextIO | None = None, err: TextIO | None = None) -> int:
    out, err = out or sys.stdout, err or sys.stderr
    parser = add_bench_arguments(argparse.ArgumentParser(prog="bench", description="time one scheduling cycle"))
    opts = parser.parse_args(argv)
    return guarded(lambda: bench(opts, out, err), err)


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "bench":
        return run_bench(argv[1:])
    if argv and argv[0] == "simulate":
        argv = argv[1:]
    return run_simulate(argv)
