"""Replay the cases docs/simulation.md reports, each under all four policies, and print issue #3's bars for each.

The shared case (Philly October 1-14 on 16 x 8, with and without ``--debug-rate 4``), 17 other Philly windows and
cluster sizes (two of them again with ``--debug-rate 4``) and 9 clusters with GPU types (``philly_typed.py``): one
row per case with the budget policy's impact (a fraction of its ceiling), where the rest of its impact went
(docs/simulation.md, "The pyramid"), its occupancy (a fraction of its ceiling), the best baseline's impact, the
p95 waits of in-budget jobs under ``budget`` and static-priority, the debug p95, the preempted batch jobs and the
targets the replay misses (the ``targets`` block under ``simulate``'s table, docs/simulation.md, "Outputs").
Inputs are written to a temporary folder: the Philly cases read the shared trace with
``docs/examples/philly-budgets.csv`` (the other windows with VC 23dbec added at 500 GPU-hours, scaled with the
capacity where the case says so), the typed ones a trace and budgets ``philly_typed.py`` writes. Deterministic:
the same options print the same table (but the wall times).

    python docs/examples/bars.py --list
    python docs/examples/bars.py --cases shared,shared-debug --seed 3
    python docs/examples/bars.py --out /tmp/bars.md          # every Philly case: about 7 minutes on 2 cores
    python docs/examples/bars.py --cases sessions            # 12 Philly windows with --debug-rate 4: 3 minutes
    python docs/examples/bars.py --cases labs                # the synthetic labs: about 12 minutes
    python docs/examples/bars.py --cases random              # 24 random labs (a holdout): about 25 minutes
    python docs/examples/bars.py --cases teams               # 100 and 150 teams, 3 days each: about 5 minutes
    python docs/examples/bars.py --cases random --policies budget,static-priority --jobs 2 --json /tmp/r.json  # 6 min
    python docs/examples/bars.py --cases random --policies budget --jobs 2 --compare /tmp/r.json   # after a change
    python docs/examples/bars.py --cases sessions --policies budget --jobs 2 --simulate "--debug-pool 2"  # a what-if
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import importlib.util
import io
import json
import random
import shlex
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
PHILLY = ROOT.parent / "shared" / "traces" / "philly" / "philly-sep-oct-2017.csv"
TYPES_2 = "H100:0.7,B200:0.3"
TYPES_3 = "H100:2,B200:1,B300:1"
# simulate's options this script sets for every case; --simulate may not change them (nor their abbreviations)
_OWN_OPTIONS = ("--trace", "--format", "--start", "--budgets", "--nodes", "--days", "--policy", "--seed", "--json",
                "--no-progress", "--progress", "--explain", "--workers", "--schedule")


@dataclass(frozen=True)
class Case:
    label: str
    start: str
    nodes: str
    scale: float = 1.0  # budgets x this
    debug_rate: float = 0.0
    typed: float | None = None  # a philly_typed.py trace with this share of typed jobs (0: the VCs in groups)
    types: str = TYPES_2
    shared_budgets: bool = False  # docs/examples/philly-budgets.csv as it is (the shared case)
    synthetic: tuple[str, ...] | None = None  # a synthetic_trace.py lab with these options (``--nodes`` added)
    days: float = 14  # the replay's length (a synthetic lab's trace is written for 14 days regardless)


CASES = {
    "shared": Case("Oct 1-14, 16x8 (the shared case)", "2017-10-01", "16x8:H100", shared_budgets=True),
    "shared-debug": Case("Oct 1-14, 16x8, --debug-rate 4", "2017-10-01", "16x8:H100", debug_rate=4,
                         shared_budgets=True),
    "oct15": Case("Oct 15-29, 16x8", "2017-10-15", "16x8:H100"),
    "oct8": Case("Oct 8-22, 16x8", "2017-10-08", "16x8:H100"),
    "oct17": Case("Oct 17-31, 16x8", "2017-10-17", "16x8:H100"),
    "groups-oct1": Case("Oct 1-14, 16x8, three groups", "2017-10-01", "16x8:H100", typed=0),
    "groups-oct15": Case("Oct 15-29, 16x8, three groups", "2017-10-15", "16x8:H100", typed=0),
    "sep22": Case("Sep 22-Oct 6, 16x8", "2017-09-22", "16x8:H100"),
    "oct1-32x8": Case("Oct 1-14, 32x8, budgets x2", "2017-10-01", "32x8:H100", scale=2),
    "oct1-32x8-half": Case("Oct 1-14, 32x8, budgets for half", "2017-10-01", "32x8:H100"),
    "sep15": Case("Sep 15-29, 16x8", "2017-09-15", "16x8:H100"),
    "oct8-8x8": Case("Oct 8-22, 8x8, budgets / 2", "2017-10-08", "8x8:H100", scale=0.5),
    "oct1-11x8": Case("Oct 1-14, 11x8, budgets x 88/128", "2017-10-01", "11x8:H100", scale=88 / 128),
    "oct8-11x8": Case("Oct 8-22, 11x8, budgets x 88/128", "2017-10-08", "11x8:H100", scale=88 / 128),
    "oct17-11x8": Case("Oct 17-31, 11x8, budgets x 88/128", "2017-10-17", "11x8:H100", scale=88 / 128),
    "sep22-debug": Case("Sep 22-Oct 6, 16x8, --debug-rate 4", "2017-09-22", "16x8:H100", debug_rate=4),
    "oct1-11x8-debug": Case("Oct 1-14, 11x8, budgets x 88/128, --debug-rate 4", "2017-10-01", "11x8:H100",
                            scale=88 / 128, debug_rate=4),
    "sep11": Case("Sep 11-25, 16x8", "2017-09-11", "16x8:H100"),
    "sep29": Case("Sep 29-Oct 13, 16x8", "2017-09-29", "16x8:H100"),
    "oct4": Case("Oct 4-18, 16x8", "2017-10-04", "16x8:H100"),
    "oct11": Case("Oct 11-25, 16x8", "2017-10-11", "16x8:H100"),
    "typed30": Case("Oct 1-14, 30% typed", "2017-10-01", "12x8:H100,4x8:B200", typed=0.3),
    "typed80": Case("Oct 1-14, 80% typed", "2017-10-01", "12x8:H100,4x8:B200", typed=0.8),
    "typed-oct15": Case("Oct 15-29, 50% typed", "2017-10-15", "12x8:H100,4x8:B200", typed=0.5),
    "typed-oct8": Case("Oct 8-22, 50% typed", "2017-10-08", "12x8:H100,4x8:B200", typed=0.5),
    "typed-oct17": Case("Oct 17-31, 50% typed", "2017-10-17", "12x8:H100,4x8:B200", typed=0.5),
    "typed-sep22": Case("Sep 22-Oct 6, 50% typed", "2017-09-22", "12x8:H100,4x8:B200", typed=0.5),
    "typed-3": Case("Oct 1-14, H100 + B200 + B300, 60% typed", "2017-10-01", "8x8:H100,4x8:B200,4x8:B300",
                    typed=0.6, types=TYPES_3),
    "typed-88": Case("Oct 1-14, 88 GPUs, 50% typed, budgets x 0.7", "2017-10-01", "8x8:H100,3x8:B200",
                     scale=0.7, typed=0.5),
    "typed-88-3": Case("Oct 1-14, 88 GPUs of 3 types, 60% typed, budgets x 0.7", "2017-10-01",
                       "6x8:H100,3x8:B200,2x8:B300", scale=0.7, typed=0.6, types=TYPES_3),
}
# The Philly windows of CASES on 16 x 8 again with ``--debug-rate 4`` (``--cases sessions``, with the three cases
# above that have sessions): the bars' debug target on every window, not only on the shared case. About 3 minutes
# on 2 cores with all four policies; ``--seed`` draws other sessions.
SESSIONS = {
    **{f"{name}-debug": replace(CASES[name], label=f"{CASES[name].label}, --debug-rate 4", debug_rate=4)
       for name in ("sep11", "sep15", "sep29", "oct4", "oct8", "oct11", "oct15", "oct17", "groups-oct1")},
    **{name: CASES[name] for name in ("shared-debug", "sep22-debug", "oct1-11x8-debug")},
}

# Synthetic labs (synthetic_trace.py: 13 teams, sessions of 1-8 GPUs, jobs of hours; lab5-minutes has Philly's run
# times, its sessions at the others' rate of about 3 an hour, and lab-25-teams smaller shares): lab 2 and the
# Helios-like lab miss the preempted-jobs bar by far (docs/policy.md, Known gaps, "Fewer, longer jobs"), the 25 teams
# the impact bar. Not in "all" (they take minutes each); ``--cases labs``.
LABS = {
    "lab2": Case("lab, seed 2, sessions and types", "", "24x8:H100,8x8:B200", synthetic=("--seed", "2")),
    "lab2-plain": Case("lab, seed 2, no sessions, untyped", "", "24x8:H100,8x8:B200",
                       synthetic=("--seed", "2", "--no-debug", "--untyped")),
    "lab5-minutes": Case("lab, seed 5, Philly's run times (minutes), sessions and types", "", "24x8:H100,8x8:B200",
                         synthetic=("--seed", "5", "--median-run-hours", "0.25", "--debug-share", "0.015")),
    "lab-25-teams": Case("25 teams, seed 2, Philly's run times, no sessions, untyped", "", "32x8:H100",
                         synthetic=("--seed", "2", "--teams", "25", "--median-run-hours", "0.25", "--no-debug",
                                    "--untyped")),
    "helios-1024": Case("Helios-like lab, seed 5, sessions, 128x8", "", "128x8:H100",
                        synthetic=("--seed", "5", "--mix", "helios")),
}


# Many small teams on a large cluster (docs/policy.md, Known gaps): the Helios-like mix with 6-minute runs, no
# sessions, most teams entitled to 2-8 GPUs, a few to 30-130; 3 days of a 14-day trace (426,585 jobs for the 150
# teams). ``--cases teams``: about 5 minutes for both on 2 cores, all four policies.
_MANY = ("--seed", "7", "--mix", "helios", "--untyped", "--no-debug", "--median-run-hours", "0.1", "--demand", "2.5")
TEAMS = {
    "teams-150": Case("150 teams on 1,024 GPUs, 6-minute runs, 3 days", "", "128x8:H100",
                      synthetic=(*_MANY, "--teams", "150"), days=3),
    "teams-100": Case("100 teams on 512 GPUs, 6-minute runs, 3 days", "", "64x8:H100",
                      synthetic=(*_MANY, "--teams", "100"), days=3),
}


def random_lab(i: int) -> Case:
    """Random lab ``i`` (``--cases random``): a synthetic_trace.py lab whose every knob is drawn from seed ``1000 + i``
    (cluster of 88-256 GPUs, typed or not, size mix, median run time 6 minutes to 3 hours, demand 1.5-3x, sessions
    of 1-8 GPUs in the trace or none, a ``--debug-rate 4`` stream or none, 13 named teams or 6-30). Cases the
    policy was not tuned on: docs/policy.md, "Results on real traces", reports them as a holdout. The trace's session
    share shrinks with the run time, as the demand in GPU-hours stays the same and the jobs multiply."""
    rnd = random.Random(1000 + i)
    nodes = rnd.choice(["11x8:H100", "16x8:H100", "12x8:H100,4x8:B200", "32x8:H100", "8x8:H100,3x8:B200"])
    mix = rnd.choice(["helios", "gangs"])
    hours = rnd.choice([0.1, 0.25, 0.5, 1, 3])
    demand = rnd.choice([1.5, 2, 2.5, 3])
    args = ["--seed", str(100 + i), "--mix", mix, "--median-run-hours", str(hours), "--demand", str(demand)]
    sessions = rnd.random() >= 0.5
    args += ["--debug-share", str(round(min(0.12, 0.18 * hours / 3), 4))] if sessions else ["--no-debug"]
    if "," not in nodes:
        args.append("--untyped")
    teams = rnd.choice([6, 20, 30]) if rnd.random() < 0.3 else 13
    if teams != 13:
        args += ["--teams", str(teams)]
    rate = rnd.choice([0, 0, 4])
    label = (f"random lab {i}: {nodes}, {mix}, {hours:g} h runs, {demand:g}x, {teams} teams"
             + (", trace sessions" if sessions else "") + (f", --debug-rate {rate}" if rate else ""))
    return Case(label, "", nodes, debug_rate=rate, synthetic=tuple(args))


RANDOM = {f"random{i}": random_lab(i) for i in range(24)}


def _module(name: str):
    spec = importlib.util.spec_from_file_location(name, HERE / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _scaled(src: Path, dst: Path, scale: float, extra: dict[str, float]) -> None:
    """``src``'s budgets plus ``extra`` teams, every grant x ``scale``; the root grant becomes the sum of its
    teams' (the file's root is that sum already)."""
    with open(src, newline="") as fh:
        rows = [(r["team"], float(r["gpu_hours"])) for r in csv.DictReader(fh)]
    rows += list(extra.items())
    root = rows[0][0]
    teams = [(t, h * scale) for t, h in rows if t != root]
    top = sum(h for t, h in teams if t.count("/") == root.count("/") + 1)
    with open(dst, "w", newline="") as fh:
        fh.write("team,gpu_hours\n")
        fh.write(f"{root},{top:.6f}\n")
        for t, h in teams:
            fh.write(f"{t},{h:.6f}\n")


def inputs(name: str, case: Case, folder: Path, philly: Path = PHILLY) -> list[str]:
    """The ``simulate`` arguments of the case, its input files written to ``folder``."""
    if case.synthetic is not None:
        trace, budgets = folder / f"{name}.csv", folder / f"{name}-budgets.csv"
        with contextlib.redirect_stdout(io.StringIO()):
            _module("synthetic_trace").main([*case.synthetic, "--days", "14", "--nodes", case.nodes,
                                             "--trace", str(trace), "--budgets", str(budgets)])
        return ["--trace", str(trace), "--budgets", str(budgets)]
    if case.typed is not None:
        trace, budgets = folder / f"{name}.csv", folder / f"{name}-budgets.csv"
        with contextlib.redirect_stdout(io.StringIO()):
            _module("philly_typed").main(["--philly", str(philly), "--start", case.start, "--typed", str(case.typed),
                                          "--types", case.types, "--trace", str(trace), "--budgets", str(budgets)])
        if case.scale != 1:
            _scaled(budgets, budgets, case.scale, {})
        return ["--trace", str(trace), "--budgets", str(budgets)]
    budgets = HERE / "philly-budgets.csv"
    if not case.shared_budgets:
        scaled = folder / f"{name}-budgets.csv"
        _scaled(budgets, scaled, case.scale, {"philly/23dbec": 500.0})
        budgets = scaled
    return ["--trace", str(philly), "--format", "philly", "--start", case.start, "--budgets", str(budgets)]


def simulate_argv(name: str, case: Case, folder: Path, seed: int, workers: int | None, out: Path,
                  philly: Path = PHILLY, policies: str = "all", explain: bool = False,
                  extra: tuple[str, ...] = ()) -> list[str]:
    """``simulate``'s arguments for the case under ``policies`` (``--policy``), its inputs written to ``folder``,
    the report to ``out``; ``extra`` (``--simulate``) last, so that it overrides the case's own options."""
    argv = ["simulate", *inputs(name, case, folder, philly), "--nodes", case.nodes, "--days", f"{case.days:g}",
            "--policy", policies, "--seed", str(seed), "--json", str(out), "--no-progress"]
    if case.debug_rate:
        argv += ["--debug-rate", str(case.debug_rate)]
    if explain:
        argv.append("--explain")
    if workers:
        argv += ["--workers", str(workers)]
    return argv + list(extra)


def replay(name: str, case: Case, folder: Path, seed: int, workers: int | None, philly: Path = PHILLY,
           policies: str = "all", explain: bool = False, extra: tuple[str, ...] = ()) -> dict:
    from scheduling.simulation.cli import main

    out = folder / f"{name}.json"
    with contextlib.redirect_stdout(io.StringIO()):
        code = main(simulate_argv(name, case, folder, seed, workers, out, philly, policies, explain, extra))
    if code != 0:
        raise SystemExit(f"{name}: simulate exited with {code}")
    return json.loads(out.read_text())


def replays(names: list[str], cases: dict[str, Case], folder: Path, opts: argparse.Namespace) -> Iterator[dict]:
    """Each case's report, in ``names``' order: replayed here one by one, or with ``opts.jobs`` > 1 that many at a
    time, each in a ``python -m scheduling.simulation`` process of its own (its inputs written here first)."""
    philly = Path(opts.philly)
    if opts.jobs <= 1:
        for name in names:
            yield replay(name, cases[name], folder, opts.seed, opts.workers, philly, opts.policies, opts.explain,
                         opts.extra)
        return
    argvs = {name: simulate_argv(name, cases[name], folder, opts.seed, opts.workers or 1, folder / f"{name}.json",
                                 philly, opts.policies, opts.explain, opts.extra) for name in names}
    procs: dict[str, subprocess.Popen] = {}
    todo = list(names)
    try:
        for name in names:
            while todo and len(procs) < opts.jobs:
                nxt = todo.pop(0)
                procs[nxt] = subprocess.Popen([sys.executable, "-m", "scheduling.simulation", *argvs[nxt]],
                                              cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
            proc = procs.pop(name)
            _, err = proc.communicate()
            if proc.returncode != 0:
                raise SystemExit(f"{name}: simulate exited with {proc.returncode}: {err.strip()[-500:]}")
            yield json.loads((folder / f"{name}.json").read_text())
    finally:  # a failed case, or a reader that stops early (Ctrl-C): no replay is left running
        for other in procs.values():
            other.kill()
            other.wait()


def missed_targets(report: dict) -> list[str]:
    """The targets the replay misses (``simulate``'s targets under its table)."""
    return [label for label, met in _verdicts(report).items() if not met]


def row(case: Case, report: dict, missed: list[str]) -> str:
    from scheduling.simulation.output import IMPACT_LOSS_KEYS, human_duration, ratio, shown_at_most

    pols = report["policies"]
    m, static = pols["budget"], pols.get("static-priority")
    best = max((n for n in pols if n != "budget"), key=lambda n: ratio(pols[n], "impact", "impact_ceiling") or 0,
               default=None)
    preempted = ratio(m, "preempted_batch_jobs", "started_batch_jobs")
    debug = "-" if m.get("debug_wait_p95_s") is None else human_duration(m["debug_wait_p95_s"])
    lost = [m.get(k) for k in IMPACT_LOSS_KEYS]
    impact = f"{ratio(m, 'impact', 'impact_ceiling'):.3f}"
    reachable = ratio(m, "impact_ceiling_whole_jobs", "impact_ceiling")
    if reachable is not None and reachable < 0.95:
        impact += f" (whole jobs: at most {shown_at_most(reachable, 0.95)})"
    cells = [
        case.label, f"{report['demand_ratio']:.1f}x", impact,
        "-" if None in lost else " / ".join(f"{x:.3f}" for x in lost),
        f"{ratio(m, 'occupancy', 'occupancy_ceiling'):.3f}",
        "-" if best is None else f"{ratio(pols[best], 'impact', 'impact_ceiling'):.3f} ({best})",
        f"{human_duration(m['wait_p95_s'])} / {'-' if static is None else human_duration(static['wait_p95_s'])}",
        debug,
        "-" if preempted is None else f"{100 * preempted:.1f}%", "; ".join(missed) or "none",
    ]
    return "| " + " | ".join(cells) + " |"


def _verdicts(report: dict) -> dict[str, bool]:
    """The targets the replay could check, by label: met or not."""
    from scheduling.simulation.output import targets

    return {t.label: t.met for t in targets(report) if t.met is not None}


def compare(before: dict[str, dict], after: dict[str, dict]) -> list[str]:
    """The budget policy's impact and preempted jobs per case, ``before`` (an earlier ``--json``) against ``after``,
    for the cases both hold, and the targets whose verdict changed (of those both runs could check: a run without
    the baselines checks fewer): a table, then how many cases are unchanged (every figure of the policy the same
    but its wall time), how many newly miss or meet a target, and the mean changes, in points."""
    from scheduling.simulation.output import ratio

    lines = ["| case | impact before -> after | preempted batch jobs before -> after | targets now missed / now met |",
             "|---|---|---|---|"]
    same = missed = met = 0
    changes: list[tuple[float, float]] = []
    for name, report in after.items():
        if name not in before:
            continue
        old, new = ({k: v for k, v in r["policies"]["budget"].items() if k != "wall_s"}  # (the one figure that varies)
                    for r in (before[name], report))
        fig = [(ratio(m, "impact", "impact_ceiling") or 0.0, ratio(m, "preempted_batch_jobs", "started_batch_jobs")
                or 0.0) for m in (old, new)]
        same += old == new
        changes.append((fig[1][0] - fig[0][0], fig[1][1] - fig[0][1]))
        was, now = _verdicts(before[name]), _verdicts(report)
        both = [label for label in now if label in was and was[label] != now[label]]
        lost = [label for label in both if not now[label]]
        won = [label for label in both if now[label]]
        missed += bool(lost)
        met += bool(won)
        mark = " (unchanged)" if old == new else ""
        lines.append(f"| {name}{mark} | {fig[0][0]:.4f} -> {fig[1][0]:.4f} | "
                     f"{100 * fig[0][1]:.2f}% -> {100 * fig[1][1]:.2f}% | "
                     f"{'; '.join(lost) or '-'} / {'; '.join(won) or '-'} |")
    if not changes:
        return ["No case in common with the earlier run."]
    n = len(changes)
    lines += ["", f"{n} case(s) compared, {same} unchanged, {missed} newly missing a target, {met} newly meeting one; "
                  f"mean change: impact {100 * sum(c[0] for c in changes) / n:+.3f} points, preempted batch jobs "
                  f"{100 * sum(c[1] for c in changes) / n:+.3f} points."]
    return lines


HEADER = ("| case | demand | impact | impact lost: beyond shares / out of budget / idle | occupancy | "
          "best baseline impact | p95 wait budget / static-priority | debug p95 | preempted batch jobs | "
          "targets missed |\n|---|---|---|---|---|---|---|---|---|---|")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cases", default="all", help="comma-separated case names (--list), all (the Philly cases), "
                                                    "sessions (the Philly windows with --debug-rate 4), labs (the "
                                                    "synthetic labs), random (24 random labs) or teams (100 and 150 "
                                                    "teams on 512 and 1,024 GPUs)")
    p.add_argument("--list", action="store_true", help="list the cases and stop")
    p.add_argument("--seed", type=int, default=0, help="the replays' seed (debug sessions)")
    p.add_argument("--workers", type=int, default=None, help="simulate's --workers (default: one per core)")
    p.add_argument("--policies", default="all",
                   help="simulate's --policy (default: all four; budget must be one): fewer replay faster, and the "
                        "targets that compare with a baseline are checked against those replayed")
    p.add_argument("--jobs", type=int, default=1,
                   help="cases replayed at a time, each in a process of its own (default 1: one by one, the policies "
                        "side by side)")
    p.add_argument("--explain", action="store_true",
                   help="simulate's --explain: the impact column adds the ceiling of whole jobs (what any schedule "
                        "could reach, as a fraction of the impact ceiling) where it is below 0.95; slower")
    p.add_argument("--out", default=None, help="also write the table to this file")
    p.add_argument("--json", default=None, help="write every case's simulate report to this file ({case: report})")
    p.add_argument("--compare", default=None, metavar="EARLIER_JSON",
                   help="after the table, the budget policy's impact and preempted jobs per case against an earlier "
                        "run's --json (the cases both hold)")
    p.add_argument("--philly", default=str(PHILLY), help="the Philly per-job CSV")
    p.add_argument("--simulate", default="", metavar="OPTIONS",
                   help="more simulate options for every case, in one quoted string (e.g. \"--debug-pool 2 "
                        "--reclaim-after-gpu-hours 0\"; one alone as --simulate=--no-gang-turns): a what-if on the "
                        "same cases; not those the script sets itself (" + ", ".join(_OWN_OPTIONS) + ")")
    opts = p.parse_args(argv)
    try:
        opts.extra = tuple(shlex.split(opts.simulate))
    except ValueError as exc:
        p.error(f"--simulate {opts.simulate}: {exc}")
    named = {o.split("=")[0] for o in opts.extra}  # "--nodes=4x8" names --nodes; a value names nothing of ours
    own = sorted(n for n in named if len(n) > 2 and any(x.startswith(n) for x in _OWN_OPTIONS))
    if own:
        p.error(f"--simulate: {', '.join(own)} {'is' if len(own) == 1 else 'are'} set by this script (--cases, "
                f"--policies, --seed, --workers, --explain, --json and --philly choose them)")
    every = {**CASES, **SESSIONS, **LABS, **RANDOM, **TEAMS}
    if opts.list:
        for name, case in every.items():
            print(f"{name:<18} {case.label}")
        return 0
    groups = {"all": list(CASES), "sessions": list(SESSIONS), "labs": list(LABS), "random": list(RANDOM),
              "teams": list(TEAMS)}
    names = [n for part in opts.cases.split(",") if part.strip() for n in groups.get(part.strip(), [part.strip()])]
    unknown = [n for n in names if n not in every]
    if unknown:
        p.error(f"unknown case(s): {', '.join(unknown)} (see --list)")
    if opts.policies != "all" and "budget" not in [x.strip() for x in opts.policies.split(",")]:
        p.error(f"--policies {opts.policies}: the table is the budget policy's; name budget too")
    if opts.jobs < 1:
        p.error(f"--jobs {opts.jobs}: at least 1")
    before = None
    if opts.compare:
        try:
            before = json.loads(Path(opts.compare).read_text())
        except (OSError, ValueError) as exc:
            p.error(f"--compare {opts.compare}: {exc}")
    sys.path.insert(0, str(ROOT))
    lines = [HEADER]
    print(HEADER, flush=True)
    missed: dict[str, int] = {}
    reports: dict[str, dict] = {}
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        for name, report in zip(names, replays(names, every, Path(tmp), opts)):
            reports[name] = report
            case_missed = missed_targets(report)
            lines.append(row(every[name], report, case_missed))
            for label in case_missed:
                missed[label] = missed.get(label, 0) + 1
            print(lines[-1], flush=True)
            print(f"  ({name}: {time.perf_counter() - t0:.0f} s)", file=sys.stderr, flush=True)
            t0 = time.perf_counter()
    summary = "; ".join(f"{label}: {n}" for label, n in missed.items()) or "none"
    lines += ["", f"Targets missed over {len(names)} case(s): {summary}."]
    print("\n".join(lines[-2:]), flush=True)
    if opts.out:
        Path(opts.out).write_text("\n".join(lines) + "\n")
    if opts.json:
        Path(opts.json).write_text(json.dumps(reports, indent=1) + "\n")
    if before is not None:
        print("\n" + "\n".join(compare(before, reports)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
