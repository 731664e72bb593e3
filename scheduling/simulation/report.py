"""What a replay reports: its metrics (the four-metric pyramid of DESIGN §5 with the waits, preemptions, lost work
and counts beside it), each team's share of them (``--teams-csv``), the starved stretches both read (how long a
team in budget with work waiting ran nothing at all), and, when the policy explains itself, why teams went without
what they were owed; with ``--explain``, where the idle GPUs sat.

Pure Python, no Django. The replay that gathers what these read is engine.py.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING

from scheduling import pyramid
from scheduling.policy.fairshare import OWED_TOL
from scheduling.policy.types import PendingJob
from scheduling.simulation.model import HOUR, SimJob

if TYPE_CHECKING:
    from scheduling.simulation.engine import Simulator


class OwedReasons:
    """Why teams went without what they were owed, when the policy says why its jobs wait (``Plan.waiting_code``;
    ``simulate --explain``). At each moment a team in budget is owed ``e - r`` GPUs (its entitlement less what it
    runs, as impact counts them); those GPU-seconds go to the kind of the waiting reason of its first waiting job
    (in its team's order) that it is owed whole (``gpus <= e - r + OWED_TOL``): ``larger-than-owed`` when every
    waiting job is larger, ``larger-than-entitled`` when every one is larger than the team's whole entitlement too
    (no schedule serves it within its share; the ceiling of whole jobs counts that loss), ``part-of-a-gpu`` when
    it is owed less than that tolerance below one GPU, ``not-planned-yet`` when its jobs arrived after the last
    cycle (cycles are at least ``SimConfig.cycle_s`` apart), ``unexplained`` when the policy gave no reason.
    Summed over the window they are impact's denominator less its numerator."""

    def __init__(self) -> None:
        # team -> its waiting jobs' (GPUs, reason kind), each one smaller than every job before it in the team's
        # order: the first job of at most g GPUs is the first entry of at most g
        self.firsts: dict[str, tuple[tuple[int, str], ...]] = {}
        self.sums: dict[str, float] = {}

    def after_cycle(self, team_pending: Mapping[str, list[PendingJob]], codes: Mapping[str, str]) -> None:
        """The reasons of the cycle just planned, which hold until the next one."""
        firsts = {}
        for team, jobs in team_pending.items():
            low, least = [], math.inf
            for j in jobs:
                if j.gpus < least:
                    least = j.gpus
                    low.append((j.gpus, codes.get(j.id, "unexplained")))
                    if least <= 1:
                        break
            if low:
                firsts[team] = tuple(low)
        self.firsts = firsts

    def add(self, teams: Mapping[str, pyramid.TeamSample], entitled: Mapping[str, float],
            firsts: Mapping[str, tuple[tuple[int, str], ...]], dt: float) -> None:
        """A sample of ``dt`` seconds: each owed team's GPUs, by the reason that held during it (``firsts``)."""
        sums = self.sums
        for team, e in entitled.items():
            owed = e - teams[team].allocated
            if owed <= 0:
                continue
            why = "not-planned-yet" if team not in firsts else (
                "part-of-a-gpu" if owed + OWED_TOL < 1 else
                "larger-than-entitled" if firsts[team][-1][0] > e + OWED_TOL else "larger-than-owed")
            for gpus, code in firsts.get(team, ()):
                if gpus <= owed + OWED_TOL:
                    why = code
                    break
            sums[why] = sums.get(why, 0.0) + owed * dt

    def shares(self, wanted: float) -> dict[str, float]:
        """Each reason's GPU-seconds over impact's denominator, the largest first."""
        if wanted <= 0:
            return {}
        return {k: v / wanted for k, v in sorted(self.sums.items(), key=lambda kv: (-kv[1], kv[0]))}


IDLE_PLACES = ("debug-pool", "reserved", "elsewhere")
_HOLDS_NOTHING = ("turn-wait",)  # the budget policy's paid turn that keeps no nodes yet (policy/turns.py)


class IdleByPlace:
    """Where the healthy GPUs nothing ran on sat (``simulate --explain``, occupancy's loss split): GPU-seconds free
    on the debug pool's nodes (the headroom kept for sessions, and pieces no batch job fits), on the other nodes the
    last plan reserved for a job (a gang reservation draining nodes, GPUs held through victims' grace, a turn), and
    elsewhere (free GPUs no waiting job could use: the wrong type, too few on one node, no work, or freed since the
    last cycle). Over the healthy GPU-time the three sum to one minus occupancy."""

    def __init__(self, pool_nodes) -> None:
        self.pool = tuple(pool_nodes)
        self.gpu_s = dict.fromkeys(IDLE_PLACES, 0.0)

    def add(self, free: Mapping[str, int], reservations, dt: float) -> None:
        """Count ``dt`` seconds of ``free`` (GPUs per node, 0 on unhealthy nodes) under the plan's ``reservations``."""
        pool = sum(free[n] for n in self.pool)
        held = {n for r in reservations if r.kind not in _HOLDS_NOTHING for n, _ in r.placement}
        held.difference_update(self.pool)
        reserved = sum(free[n] for n in held)
        gpu_s = self.gpu_s
        gpu_s["debug-pool"] += pool * dt
        gpu_s["reserved"] += reserved * dt
        gpu_s["elsewhere"] += (sum(free.values()) - pool - reserved) * dt

    def shares(self, healthy_gpu_s: float) -> dict[str, float]:
        """Each place's idle GPU-time over the healthy GPU-time (empty when there was none)."""
        if healthy_gpu_s <= 0:
            return {}
        return {place: v / healthy_gpu_s for place, v in self.gpu_s.items()}


class Starvation:
    """Since when each team in budget with work waiting has run nothing, and the longest such stretches: the
    replay's (``longest``: length and team) and each team's (``per_team``)."""

    def __init__(self) -> None:
        self.since: dict[str, float] = {}
        self.longest: tuple[float, str | None] = (0.0, None)
        self.per_team: dict[str, float] = {}

    def track(self, teams: dict[str, pyramid.TeamSample], start: float) -> None:
        """Follow, over the sample that began at ``start``, the teams in budget with work waiting that run nothing
        at all (not even borrowed work): a stretch ends when the team runs something, its work is gone or its
        budget is spent."""
        since = self.since
        for team in [t for t in since if not _starved(teams.get(t))]:
            self.end(team, start)
        for team, ts in teams.items():
            if team not in since and _starved(ts):
                since[team] = start

    def end(self, team: str, end: float) -> None:
        length = end - self.since.pop(team)
        if length > self.per_team.get(team, 0.0):
            self.per_team[team] = length
        if length > self.longest[0]:
            self.longest = (length, team)

    def close(self, end: float) -> None:
        """End every stretch still open at the replay's end."""
        for team in sorted(self.since):
            self.end(team, end)


class Timeline:
    """Each team's figures interval by interval (``--timeline``): over each interval of ``step_s`` from the start,
    the time-averaged GPUs the team was entitled to (e, the pyramid's water-fill of DESIGN §5), wanted in budget
    (d), held while in budget (r), received of its entitlement (min(r, e)) and held as scavenger work while out of
    budget, and the GPU-hours charged to it by the interval's end (its burn-down). The replay's samples are constant
    over their span; one that straddles intervals is split at their bounds."""

    FIGURES = ("entitled_gpus", "demand_gpus", "allocated_gpus", "received_gpus", "scavenger_gpus")

    def __init__(self, step_s: float) -> None:
        self.step = step_s
        self.sums: dict[int, dict[str, list[float]]] = {}  # interval -> team -> GPU-seconds of each figure
        self.spent: dict[int, dict[str, float]] = {}  # interval -> the teams' spend at its end

    def add(self, start: float, dt: float, teams: Mapping[str, pyramid.TeamSample],
            entitled: Mapping[str, float]) -> None:
        """A sample of ``dt`` seconds from ``start``."""
        end = start + dt
        k = int(start // self.step)
        while start < end:
            piece = min(end, (k + 1) * self.step) - start
            if piece > 0:
                bucket = self.sums.setdefault(k, {})
                for team, ts in teams.items():
                    e = entitled.get(team, 0.0)
                    got = bucket.get(team)
                    if got is None:
                        got = bucket[team] = [0.0, 0.0, 0.0, 0.0, 0.0]
                    got[0] += e * piece
                    got[1] += ts.demand * piece
                    got[2] += ts.allocated * piece
                    got[3] += min(ts.allocated, e) * piece
                    got[4] += ts.scavenger * piece
            start = (k + 1) * self.step
            k += 1

    def spend_until(self, now: float, t: float, spend: Mapping[str, float], rate: Mapping[str, float]) -> None:
        """Note the teams' spend at every interval end in (now, t], their charge rates constant meanwhile (call
        before the spend moves on to ``t``)."""
        k = int(now // self.step) + 1
        while k * self.step <= t:
            at = k * self.step - now
            self.spent[k - 1] = {team: x + rate.get(team, 0.0) * at for team, x in spend.items()}
            k += 1

    def rows(self, end: float, spend: Mapping[str, float]) -> list[tuple]:
        """(interval start, team, the ``FIGURES`` as time-averaged GPUs over the interval's part before ``end``,
        GPU-hours spent by its end) for every interval and team with a sample in it; ``spend``: the spend at
        ``end``, that of the one interval whose end ``spend_until`` never reached (the last, partial one)."""
        out = []
        for k in sorted(self.sums):
            length = min(self.step, end - k * self.step)
            if length <= 0:
                continue
            spent = self.spent.get(k, spend)
            for team in sorted(self.sums[k]):
                figures = [x / length for x in self.sums[k][team]]
                out.append((k * self.step, team, *figures, spent.get(team, 0.0)))
        return out


def _starved(ts: pyramid.TeamSample | None) -> bool:
    """A team in budget with work waiting that runs nothing (its in-budget demand counts its running work too)."""
    return ts is not None and ts.demand > 0 and ts.allocated == 0


def _waits_by_gpus(by_gpus: dict[int, list[tuple[float, float | None]]], end: float) -> dict[str, dict]:
    """Per GPU count (a string key, ascending): the in-budget batch jobs of that size, how many never started, and
    their censored p50 / p95 waits."""
    out = {}
    for gpus in sorted(by_gpus):
        jobs = by_gpus[gpus]
        p50, p95 = pyramid.wait_percentiles(jobs, end)
        out[str(gpus)] = {"jobs": len(jobs), "never_started": sum(1 for _, first in jobs if first is None),
                          "wait_p50_s": p50, "wait_p95_s": p95}
    return out


def metrics(sim: Simulator, end: float) -> dict:
    """The report of a replay that ended at ``end`` (docs/simulation.md lists every key). Waits of jobs that never
    started are censored at ``end``."""
    m = sim.acc.result()
    m.update(sim.acc.impact_loss())
    if sim.owed_reasons is not None:
        m["impact_lost_by_reason"] = sim.owed_reasons.shares(sim.acc.wanted)
    if sim.idle_by_place is not None:
        m["occupancy_idle_by_place"] = sim.idle_by_place.shares(sim.acc.healthy)
    sim.starved.close(end)
    batch = [j for j in sim.job_list if j.kind != "debug"]
    debug = [j for j in sim.job_list if j.kind == "debug"]
    waits: list[tuple[float, float | None]] = []
    by_gpus: dict[int, list[tuple[float, float | None]]] = {}  # the same, by size
    for j in batch:
        if j.in_budget_at_submit:
            w = (j.submit_s, j.first_start_s)
            waits.append(w)
            by_gpus.setdefault(j.gpus, []).append(w)
    p50, p95 = pyramid.wait_percentiles(waits, end)
    dbg = [(j.submit_s, j.first_start_s) for j in debug]
    _, dp95 = pyramid.wait_percentiles(dbg, end) if dbg else (None, None)
    m.update(
        wait_p50_s=p50,
        wait_p95_s=p95,
        # the jobs those waits are over: a team that spends its budget sooner (under another policy) has fewer
        wait_jobs=len(waits),
        # the same jobs by size: a policy that serves its small jobs and starves its large ones shows here
        waits_by_gpus=_waits_by_gpus(by_gpus, end),
        debug_wait_p95_s=dp95,
        preemptions=sim.counts["preemptions"],
        # "preempted jobs <= 5% of started jobs" and "lost work <= 2% of delivered GPU-hours" read off these
        started_jobs=sum(1 for j in sim.job_list if j.first_start_s is not None),
        preempted_jobs=len(sim.preempted_ids),
        # the same for batch jobs alone (the bar is read on these: a session is never requeued)
        started_batch_jobs=sum(1 for j in batch if j.first_start_s is not None),
        preempted_batch_jobs=sum(1 for j in batch if j.id in sim.preempted_ids),
        delivered_gpu_hours=sum(row[2] * (row[5] - row[4]) for row in sim.schedule) / HOUR,
        lost_gpu_hours=sim.lost_gpu_s / HOUR,
        completed_jobs=sum(1 for j in batch if j.completed),
        jobs=len(batch),
        never_started=sum(1 for j in batch if j.first_start_s is None),
        debug_sessions=len(debug),
        debug_never_started=sum(1 for j in debug if j.first_start_s is None),
        rejected=sim.rejected,
        debug_as_batch=sim.debug_as_batch,
        debug_idle_gpu_hours=sim.debug_idle_gpu_s / HOUR,
        cycles=sim.cycles,
        # the longest time a team in budget, with work waiting, ran nothing at all (and which team)
        longest_starved_s=sim.starved.longest[0],
        longest_starved_team=sim.starved.longest[1],
    )
    for k, v in sim.counts.items():
        if k != "preemptions":
            m[k] = v
    return m


def team_report(sim: Simulator, end: float) -> dict[str, dict]:
    """Each team's share of the report, for every team but a group whose whole grant went to its teams and that
    has no job of its own: its budget (what it keeps after its children's grants), spent (its own jobs' charges,
    refunds deducted) and when it first ran out; impact's numerator and denominator for the team alone
    (``received`` and ``wanted``, GPU-hours: their sums over the teams give the report's impact); the GPU-hours its
    jobs held; its batch jobs, and its jobs started and preempted (debug sessions included, as in the report: its
    sums over the teams); the waits of its in-budget batch jobs (censored at ``end``, as the report's); the longest
    time it ran nothing while in budget with work waiting. Call after :func:`metrics`, which ends the starved
    stretches still open."""
    acc = sim.acc
    held: dict[str, float] = {}
    for _, team, gpus, _, start, stop, _ in sim.schedule:
        held[team] = held.get(team, 0.0) + gpus * (stop - start)
    jobs: dict[str, list[SimJob]] = {}  # every job, its debug sessions included
    for j in sim.job_list:
        jobs.setdefault(j.team, []).append(j)
    kids = set(sim.budgets.parent.values())
    out = {}
    for team in sim.teams:
        if team not in jobs and sim.own_grant[team] <= 0 and team in kids:
            continue  # a group whose whole grant went to its teams, with no job of its own
        mine = jobs.get(team, [])
        batch = [j for j in mine if j.kind != "debug"]
        p50, p95 = pyramid.wait_percentiles(
            [(j.submit_s, j.first_start_s) for j in batch if j.in_budget_at_submit], end)
        out[team] = {
            "budget_gpu_hours": sim.own_grant[team],
            "spent_gpu_hours": sim.spend[team],
            "ran_out_s": sim.ran_out.get(team),
            "wanted_gpu_hours": acc.team_wanted.get(team, 0.0) / HOUR,
            "received_gpu_hours": acc.team_received.get(team, 0.0) / HOUR,
            "held_gpu_hours": held.get(team, 0.0) / HOUR,
            "jobs": len(batch),
            "started_jobs": sum(1 for j in mine if j.first_start_s is not None),
            "preempted_jobs": sum(1 for j in mine if j.id in sim.preempted_ids),
            "wait_p50_s": p50,
            "wait_p95_s": p95,
            "longest_starved_s": sim.starved.per_team.get(team, 0.0),
        }
    return out
