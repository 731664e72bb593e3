"""What the ``simulate`` command writes: the side-by-side table and the targets under it, the ``--json`` report as
strict JSON, the ``--schedule`` files (one row per allocation interval), the ``--teams-csv`` file (each team's
figures under each policy) and the ``--timeline`` file (the same, interval by interval). Formatting only: the
command (cli.py) decides what goes where and writes every file or none.
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Sequence
from typing import NamedTuple, TextIO

from scheduling.simulation.report import IDLE_PLACES

# the report's keys the issue names, first in the table and in every policy's --json entry
METRIC_KEYS = (
    "availability", "occupancy", "occupancy_ceiling", "impact", "impact_ceiling", "utilization", "wait_p50_s",
    "wait_p95_s", "debug_wait_p95_s", "preemptions", "lost_gpu_hours", "completed_jobs", "jobs", "never_started",
)
# Impact (as a fraction of its ceiling) within this of the best baseline's is a tie, not a miss: a difference the
# table's three decimals cannot show (docs/simulation.md, "Outputs").
IMPACT_TIE = 1e-4
# Where the rest of impact went (scheduling/pyramid.py, PyramidAccumulator.impact_loss): with impact they sum to 1.
IMPACT_LOSS_KEYS = ("impact_lost_over_share", "impact_lost_out_of_budget", "impact_lost_idle")


def write_line(stream: TextIO, text: str) -> None:
    """One write per line (Django's OutputWrapper appends its own newline to each write otherwise)."""
    stream.write(text + "\n")
    stream.flush()


def report_json(fh: TextIO, report: dict) -> None:
    """Strict JSON (RFC 8259 has no NaN or Infinity, and most readers reject Python's ``NaN``): ``json_output``
    passes the report through ``finite_report`` first."""
    json.dump(report, fh, indent=2, sort_keys=False, allow_nan=False)
    fh.write("\n")


def finite_report(report, err: TextIO, path: str = ""):
    """``report`` with every float that is not finite written as None (null: nothing to measure), each one named
    on ``err``. No metric is known to give one; this keeps a future bug from writing a file readers refuse."""
    if isinstance(report, dict):
        return {k: finite_report(v, err, f"{path}.{k}" if path else str(k)) for k, v in report.items()}
    if isinstance(report, (list, tuple)):
        return [finite_report(v, err, f"{path}[{i}]") for i, v in enumerate(report)]
    if isinstance(report, float) and not math.isfinite(report):
        write_line(err, f"warning: --json: {path} is {report!r}, not a number; written as null")
        return None
    return report


TEAM_COLUMNS = (
    "budget_gpu_hours", "spent_gpu_hours", "ran_out_s", "wanted_gpu_hours", "received_gpu_hours", "impact",
    "held_gpu_hours", "jobs", "started_jobs", "preempted_jobs", "wait_p50_s", "wait_p95_s", "longest_starved_s",
)


def team_rows(fh: TextIO, teams: dict[str, dict[str, dict]]) -> None:
    """``--teams-csv``: one row per policy and team. ``impact`` is the team's received / wanted GPU-hours (its own
    entitlement served, DESIGN §5 for one team; empty when it wanted none); an empty ``ran_out_s`` means the team
    never ran out of budget, an empty wait that it had no job in budget."""
    w = csv.writer(fh)
    w.writerow(("policy", "team", *TEAM_COLUMNS))
    for name, by_team in teams.items():
        for team in sorted(by_team):
            row = dict(by_team[team])
            wanted = row["wanted_gpu_hours"]
            row["impact"] = row["received_gpu_hours"] / wanted if wanted > 1e-9 else None
            w.writerow((name, team, *(_cell(k, row[k]) for k in TEAM_COLUMNS)))


def _cell(key: str, v) -> str:
    if v is None:
        return ""
    if isinstance(v, float):  # GPU-hours to the thousandth: on a small cluster a team's figures are a few GPU-hours
        return f"{v:.4f}" if key == "impact" else f"{v:.1f}" if key.endswith("_s") else f"{v:.3f}"
    return str(v)


TIMELINE_COLUMNS = ("policy", "start_s", "team", "entitled_gpus", "demand_gpus", "allocated_gpus", "received_gpus",
                    "scavenger_gpus", "spent_gpu_hours")


def timeline_rows(fh: TextIO, timelines: dict[str, list[tuple]]) -> None:
    """``--timeline``: one row per policy, interval and team (report.Timeline.rows): over the interval, the GPUs
    the team was entitled to, wanted in budget, held in budget, received of its entitlement and held as scavenger
    work out of budget, each time-averaged; and the GPU-hours charged to it by the interval's end."""
    w = csv.writer(fh)
    w.writerow(TIMELINE_COLUMNS)
    for name, rows in timelines.items():
        for start, team, *figures, spent in rows:
            w.writerow((name, f"{start:.0f}", team, *(f"{x:.3f}" for x in figures), f"{spent:.3f}"))


def write_schedule(path: str, rows: Sequence[tuple]) -> None:
    with open(path, "w", newline="", encoding="utf-8") as fh:
        schedule_rows(fh, rows)


def schedule_rows(fh: TextIO, rows: Sequence[tuple]) -> None:
    w = csv.writer(fh)
    w.writerow(("job_id", "team", "gpus", "placement", "start_s", "end_s", "end_reason"))
    for job_id, team, gpus, placement, start, end, reason in sorted(rows, key=lambda r: (r[4], r[5], r[0])):
        w.writerow((job_id, team, gpus, placement, f"{start:.3f}", f"{end:.3f}", reason))


def _fmt(key: str, v) -> str:
    if v is None:
        return "-"
    if isinstance(v, float) and math.isnan(v):
        return "nan"
    if isinstance(v, str):
        return v.rsplit("/", 1)[-1]  # a team: its own name
    if key.endswith("_s") and not key.startswith("wall"):
        return human_duration(v)
    if isinstance(v, int):
        return str(v)
    if key == "lost_gpu_hours":
        return f"{v:,.1f}"
    if key == "wall_s":
        return f"{v:.1f}s"
    return f"{v:.3f}"


def human_duration(s: float) -> str:
    if s < 120:
        return f"{s:.0f}s"
    if s < 7200:
        return f"{s / 60:.1f}m"
    if s < 2 * 86400:
        return f"{s / 3600:.1f}h"
    return f"{s / 86400:.1f}d"


# Ratios the bars are set on (docs/policy.md, "Results on real traces"), under the table: name,
# numerator, denominator.
BAR_RATIOS = (
    ("occupancy/ceiling", "occupancy", "occupancy_ceiling"),
    ("impact/ceiling", "impact", "impact_ceiling"),
    ("impact/whole-job ceiling", "impact", "impact_ceiling_whole_jobs"),
    ("preempted/started", "preempted_jobs", "started_jobs"),
    ("lost/delivered", "lost_gpu_hours", "delivered_gpu_hours"),
)


def shown_at_most(bound: float, bar: float) -> str:
    """An upper ``bound`` below ``bar``, rounded up (an upper bound stays one) to three decimals, or four where
    three would show the bar itself (0.9495 of a 0.95 bar: "0.9496", not "0.950")."""
    for digits in (3, 4, 6):
        shown = math.ceil(bound * 10 ** digits - 1e-9) / 10 ** digits  # (a ratio of 0.003 may be 0.0030000000000000005)
        if shown < bar:
            break
    return f"{shown:.{digits}f}"


def ratio(m: dict, num: str, den: str) -> float | None:
    """``m[num] / m[den]``, None when either is missing or the denominator is zero (nothing to measure)."""
    a, b = m.get(num), m.get(den)
    return a / b if a is not None and b else None


def format_table(report: dict) -> str:
    pols = report["policies"]
    names = list(pols)
    rows = list(METRIC_KEYS)
    at = rows.index("impact_ceiling") + 1
    # (the ceiling of whole jobs, then where the rest of impact went, under it)
    rows[at:at] = ("impact_ceiling_whole_jobs", *IMPACT_LOSS_KEYS)
    rows += ["wait_jobs", "longest_starved_s", "longest_starved_team", "preemptions_drain", "preemptions_debug",
             "preemptions_turn", "failure_stops", "squatting_flags", "debug_sessions", "debug_as_batch", "rejected",
             "wall_s"]
    width = max(12, *(len(n) + 2 for n in names)) if names else 12
    label = max(len(k) for k in rows) + 2
    lines = [f"demand_ratio: {_fmt('ratio', report.get('demand_ratio'))}",
             f"{'metric':<{label}}" + "".join(f"{n:>{width}}" for n in names)]
    for key in rows:
        lines.append(f"{key:<{label}}" + "".join(f"{_fmt(key, pols[n].get(key)):>{width}}" for n in names))
    for name, num, den in BAR_RATIOS:
        lines.append(f"{name:<{label}}" + "".join(f"{_fmt(name, ratio(pols[n], num, den)):>{width}}" for n in names))
    why = {n: pols[n]["impact_lost_by_reason"] for n in names if pols[n].get("impact_lost_by_reason")}
    for n, shares in why.items():
        lines += ["", f"why the teams went without what they were owed, {n} (--explain), over impact's denominator:"]
        # (kinds that would print as 0.000 are left out; the JSON has them all)
        lines += [f"  {code:<{label}}{v:.3f}" for code, v in shares.items() if v >= 0.0005]
    if why:
        lines += ["", "in-budget batch jobs that never started, by size (--explain): never started / jobs"]
        lines += _by_size_rows(pols, names, label, width)
    idle = {n: pols[n].get("occupancy_idle_by_place") or {} for n in names}
    if any(idle.values()):
        lines += ["", "where the idle GPUs sat (--explain), over the healthy GPU-time (1 - occupancy in all):"]
        lines += [f"  {place:<{label - 2}}" + "".join(f"{_fmt('ratio', idle[n].get(place)):>{width}}" for n in names)
                  for place in IDLE_PLACES]
    checks = targets(report)
    if checks:
        lines += ["", "targets of the budget policy (docs/policy.md, \"Results on real traces\"):"]
        label_width = max(len(t.label) for t in checks)
        shown_width = max(34, *(len(t.shown) + 2 for t in checks))
        for t in checks:
            verdict = "-" if t.met is None else "met" if t.met else "NOT MET"
            lines.append(f"  {t.label:<{label_width}}  {t.shown:<{shown_width}}{verdict}")
    return "\n".join(lines)


def _by_size_rows(pols: dict, names: list[str], label: int, width: int) -> list[str]:
    """One row per job size: each policy's in-budget batch jobs of that size that never started, of how many
    (``waits_by_gpus``; "-" where a policy had none of that size)."""
    by = {n: pols[n].get("waits_by_gpus") or {} for n in names}
    rows = []
    for gpus in sorted({int(k) for sizes in by.values() for k in sizes}):
        cells = [by[n].get(str(gpus)) for n in names]
        shown = ["-" if c is None else f"{c['never_started']}/{c['jobs']}" for c in cells]
        name = f"{gpus} GPU" + ("s" if gpus != 1 else "")
        rows.append(f"  {name:<{label - 2}}" + "".join(f"{x:>{width}}" for x in shown))
    return rows


BASELINE_NAMES = ("fifo-backfill", "static-priority", "quota-borrowing")


class Target(NamedTuple):
    """One of the budget policy's targets checked on a replay: ``value`` against ``bar`` (a fixed bar, or a
    baseline's figure, ``baseline`` naming it); ``met`` is None when there is nothing to measure."""

    name: str
    label: str
    value: float | None
    bar: float | None
    met: bool | None
    shown: str  # the figures as the table prints them
    baseline: str | None = None
    reachable: float | None = None  # impact: the most whole jobs allow, as a fraction of the ceiling (--explain)

    def as_json(self) -> dict:
        out = {"target": self.name, "value": self.value, "bar": self.bar, "met": self.met}
        if self.baseline is not None:
            out["baseline"] = self.baseline
        if self.reachable is not None:
            out["reachable"] = self.reachable
        return out


def targets(report: dict) -> list[Target]:
    """The budget policy's targets (issue #3's bars) checked on this replay. Empty when ``budget`` was not
    replayed; a target that compares with a baseline (impact above every baseline's, the p95 wait against
    static-priority's) or needs debug sessions is left out when the replay had none."""
    pols = report["policies"]
    m = pols.get("budget")
    if m is None:
        return []
    out: list[Target] = []

    def at_least(name: str, label: str, value: float | None, bar: float) -> None:
        out.append(Target(name, label, value, bar, None if value is None else value >= bar - 1e-12,
                          _fmt("ratio", value)))

    def at_most(name: str, label: str, value: float | None, bar: float) -> None:
        shown = "-" if value is None else f"{100 * value:.1f}%"
        out.append(Target(name, label, value, bar, None if value is None else value <= bar + 1e-12, shown))

    at_least("occupancy", "occupancy >= 0.97 of its ceiling", ratio(m, "occupancy", "occupancy_ceiling"), 0.97)
    impact = ratio(m, "impact", "impact_ceiling")
    at_least("impact", "impact >= 0.95 of its ceiling", impact, 0.95)
    reachable = ratio(m, "impact_ceiling_whole_jobs", "impact_ceiling")
    if impact is not None and reachable is not None:
        shown, bar = out[-1].shown, out[-1].bar
        if reachable < bar:  # no allocation of whole jobs reaches the bar on this demand (job_ceiling.py): say so
            shown = f"{shown} (whole jobs allow at most {shown_at_most(reachable, bar)})"
        out[-1] = out[-1]._replace(reachable=reachable, shown=shown)
    baselines = [(n, ratio(pols[n], "impact", "impact_ceiling")) for n in BASELINE_NAMES if n in pols]
    baselines = [(n, v) for n, v in baselines if v is not None]
    if baselines and impact is not None:
        best, value = max(baselines, key=lambda nv: nv[1])
        # A tie counts as met: on a cluster that serves every job, every policy reaches its ceiling, up to the
        # seconds a job waits for the next cycle; and which of those waits count depends on how long each team stays
        # in budget, which the policies' charges move (borrowed work costs less under ``budget``).
        tie = value - IMPACT_TIE <= impact < value
        out.append(Target("impact_above_baselines", "impact above every baseline's", impact, value,
                          impact >= value - IMPACT_TIE,
                          f"{impact:.3f} vs {value:.3f} ({best}{'; a tie' if tie else ''})", best))
    static = pols.get("static-priority")
    if static is not None and m.get("wait_p95_s") is not None and static.get("wait_p95_s") is not None:
        mine, theirs = m["wait_p95_s"], static["wait_p95_s"]
        out.append(Target("wait_p95", "p95 wait <= static-priority's", mine, theirs, mine <= theirs,
                          f"{human_duration(mine)} vs {human_duration(theirs)}", "static-priority"))
    if m.get("debug_sessions"):
        p95 = m.get("debug_wait_p95_s")
        out.append(Target("debug_wait_p95", "debug p95 wait <= 60 s", p95, 60.0, None if p95 is None else p95 <= 60,
                          _fmt("debug_wait_p95_s", p95)))
    at_most("lost_work", "lost work <= 2% of delivered", ratio(m, "lost_gpu_hours", "delivered_gpu_hours"), 0.02)
    at_most("preempted_jobs", "preempted batch jobs <= 5% of started",
            ratio(m, "preempted_batch_jobs", "started_batch_jobs"), 0.05)
    return out
