"""Three baseline policies, honest versions of what labs run today, behind the same Policy protocol.

- :class:`FifoBackfill` (``fifo-backfill``): first come, first served with EASY backfill, like Slurm's
  ``sched/backfill`` when users give no time limits.
- :class:`StaticPriority` (``static-priority``): HIGH before LOW, FIFO within a level, greedy (whatever fits
  starts); optionally HIGH preempts LOW (Slurm ``PreemptType=preempt/qos`` with ``PreemptExemptTime``).
- :class:`QuotaBorrowing` (``quota-borrowing``): nominal whole-GPU quotas from budget shares, idle quota may be
  borrowed, a team under its quota reclaims by preempting borrowers (Kueue ClusterQueues in one cohort with
  ``reclaimWithinCohort: Any``). No memory of past usage.

None of them knows budgets (Start.scavenger is always False) or trace durations (a real scheduler does not).
They never preempt a job inside a grace, and give every preempted job its contract's grace.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from operator import attrgetter

from scheduling.policy.types import (
    HEALTHY,
    Contract,
    PendingJob,
    Plan,
    Preempt,
    Reservation,
    RunningJob,
    Snapshot,
    Start,
    run_limit_s,
)
from scheduling.simulation.placement import FreeMap

_submit = attrgetter("submit_s")
# FIFO with ties in the queue order of the snapshot's tuples (rank, submit_s, id): what ``_fifo`` gives on them
_fifo_key = attrgetter("submit_s", "rank", "id")
_gpus = attrgetter("gpus")


def _fifo(pending: tuple[PendingJob, ...]) -> list[PendingJob]:
    """Submit order; a stable sort, so equal submit times keep their queue order (deterministic per snapshot)."""
    return sorted(pending, key=_submit)


def _contracts(snapshot: Snapshot) -> dict[str, Contract]:
    return {c.name: c for c in snapshot.contracts}


# ---- FIFO + EASY backfill -----------------------------------------------------------------------------------


class FifoBackfill:
    """First come first served by submit time, with EASY backfill.

    Walk the queue in submit order and start each job that fits. The first job that does not fit is the head:
    it gets a reservation, nodes chosen by most free GPUs (kept from cycle to cycle through
    ``Plan.reservations`` while it stays the head), and the free GPUs of those nodes are held for it as they
    drain. Later jobs backfill only on GPUs the reservation does not need; a job with a known maximum run time
    (its own time limit or its contract's ``max_runtime_s``: ``run_limit_s``) may also use held GPUs if it ends
    before the head's shadow time, which is known only when every job on the reserved nodes has a known maximum
    run time. Trace durations are never used: a real scheduler does not know them.
    """

    name = "fifo-backfill"

    def plan(self, snapshot: Snapshot) -> Plan:
        fm = FreeMap(snapshot.nodes, snapshot.running)
        prev = {r.job_id: r for r in snapshot.reservations}
        if fm.free_total() == 0 or not snapshot.pending:
            return Plan(reservations=snapshot.reservations if snapshot.pending else ())
        contracts = _contracts(snapshot)
        now = snapshot.now_s
        ttl = snapshot.config.reservation_ttl_s
        actions: list = []
        reservation: Reservation | None = None
        held: dict[str, int] = {}
        shadow = None
        for job in _fifo(snapshot.pending):
            total = fm.free_total(job.gpu_type)
            if reservation is None:
                if not fm.can_ever_fit(job.gpus, job.gpu_type, job.gpus_per_node):
                    continue  # a real scheduler would reject it; never let it block the queue
                p = fm.place(job.gpus, job.gpu_type, job.gpus_per_node)
                if p is not None:
                    fm.take(p)
                    actions.append(Start(job.id, p))
                    continue
                reservation = self._reserve(job, fm, prev.get(job.id), now, ttl)
                for node, g in reservation.placement:
                    h = min(g, fm.free[node])
                    if h:
                        held[node] = h
                        fm.take(((node, h),))
                shadow = self._shadow(snapshot, reservation, contracts)
                continue
            lendable = shadow is not None and any(held.values())  # held GPUs a job that ends in time may use
            if total == 0 and not lendable:
                if fm.free_total() == 0:
                    break
                continue
            p = fm.place(job.gpus, job.gpu_type, job.gpus_per_node)
            if p is None and held and shadow is not None:
                c = contracts.get(job.contract)
                limit = run_limit_s(job, c) if c is not None else job.time_limit_s
                if limit is not None and now + limit <= shadow:
                    avail = dict(fm.free)
                    for node, h in held.items():
                        avail[node] += h
                    p = fm.place(job.gpus, job.gpu_type, job.gpus_per_node, avail=avail)
                    if p is not None:
                        for node, g in p:  # take from the free part first, then from the held part
                            from_free = min(g, fm.free[node])
                            if from_free:
                                fm.take(((node, from_free),))
                            if g - from_free:
                                held[node] -= g - from_free
                        actions.append(Start(job.id, p))
                        continue
            if p is not None:
                fm.take(p)
                actions.append(Start(job.id, p))
        return Plan(actions=tuple(actions), reservations=(reservation,) if reservation else ())

    @staticmethod
    def _reserve(job: PendingJob, fm: FreeMap, prev: Reservation | None, now: float, ttl: float) -> Reservation:
        if prev is not None and all(node in fm.free for node, _ in prev.placement):
            return Reservation(job.id, prev.placement, now + ttl)
        nodes = sorted(
            (n for n in fm.size if job.gpu_type is None or fm.type[n] == job.gpu_type),
            key=lambda n: (-fm.free[n], n),
        )
        per = job.gpus_per_node
        out = []
        need = job.gpus
        # A job that fits on one node reserves one node: the one with the most free GPUs among those big enough.
        single = [n for n in nodes if fm.size[n] >= job.gpus] if per is None else []
        if single:
            out = [(single[0], job.gpus)]
        else:
            for n in nodes:
                if per is not None and fm.size[n] < per:
                    continue
                g = min(fm.size[n] if per is None else per, need)
                out.append((n, g))
                need -= g
                if need <= 0:
                    break
        return Reservation(job.id, tuple(sorted(out)), now + ttl)

    @staticmethod
    def _shadow(snapshot: Snapshot, res: Reservation, contracts: Mapping[str, Contract]) -> float | None:
        nodes = {n for n, _ in res.placement}
        shadow = snapshot.now_s
        for r in snapshot.running:
            if any(n in nodes for n, _ in r.placement):
                c = contracts.get(r.contract)
                limit = run_limit_s(r, c) if c is not None else r.time_limit_s
                if r.preempting and r.preempt_deadline_s is not None:
                    end = r.preempt_deadline_s
                elif limit is not None:
                    end = r.started_s + limit
                else:
                    return None
                shadow = max(shadow, end)
        return shadow


# ---- preemption helper --------------------------------------------------------------------------------------


def _soon_free(running: tuple[RunningJob, ...], fm: FreeMap) -> dict[str, int]:
    """GPUs per node held by jobs inside their grace: free soon, not yet."""
    soon: dict[str, int] = {}
    for r in running:
        if r.preempting:
            for node, g in r.placement:
                if node in fm.free:
                    soon[node] = soon.get(node, 0) + g
    return soon


def _claim(job: PendingJob, fm: FreeMap, soon: dict[str, int]) -> bool:
    """If free + soon-free GPUs can host ``job``, claim them (it waits for them) and return True."""
    if not soon:
        return False
    avail = {n: fm.free[n] + soon.get(n, 0) for n in fm.free}
    p = fm.place(job.gpus, job.gpu_type, job.gpus_per_node, avail=avail)
    if p is None:
        return False
    for node, g in p:
        from_free = min(g, fm.free[node])
        if from_free:
            fm.take(((node, from_free),))
        if g - from_free:
            soon[node] -= g - from_free
    return True


def _preempt_for(
    job: PendingJob, victims: list[RunningJob], fm: FreeMap, soon: dict[str, int], contracts: Mapping[str, Contract],
    reason: str,
) -> list[Preempt]:
    """Add victims in the given order until free + soon-free + victims' GPUs can host ``job``; preempt those.

    Returns [] (and preempts nothing) when even all victims are not enough. The GPUs freed are claimed for
    ``job`` so that other pending jobs do not preempt for them again.
    """
    avail = {n: fm.free[n] + soon.get(n, 0) for n in fm.free}
    chosen: list[RunningJob] = []
    for v in victims:
        for node, g in v.placement:
            if node in avail:
                avail[node] += g
        chosen.append(v)
        p = fm.place(job.gpus, job.gpu_type, job.gpus_per_node, avail=avail)
        if p is None:
            continue
        # Keep only the victims on nodes the placement uses (the others were not needed).
        used = {n for n, _ in p}
        chosen = [v for v in chosen if any(n in used for n, _ in v.placement)]
        for v in chosen:
            victims.remove(v)
            for node, g in v.placement:
                if node in fm.free:
                    soon[node] = soon.get(node, 0) + g
        _claim(job, fm, soon)
        return [
            Preempt(v.id, contracts[v.contract].grace_s if v.contract in contracts else 0, reason, for_job=job.id)
            for v in chosen
        ]
    return []


# ---- static priority ----------------------------------------------------------------------------------------


class StaticPriority:
    """HIGH then LOW, FIFO within a level; every job that fits starts (no reservation, so big jobs can starve).

    The level comes from the trace's ``priority`` column, handed over as ``priorities`` (job id -> "high" or
    "low"); a job without one is HIGH, as everything ends up being under priority inflation. With ``preempt``,
    a HIGH job that does not fit preempts LOW jobs (newest first, only past their protected time, with their
    contract's grace), only when that lets it start.
    """

    name = "static-priority"

    def __init__(self, priorities: Mapping[str, str] | None = None, preempt: bool = False) -> None:
        self.priorities = dict(priorities or {})
        self.preempt = preempt

    def _level(self, job_id: str) -> int:
        return 1 if self.priorities.get(job_id) == "low" else 0

    def plan(self, snapshot: Snapshot) -> Plan:
        fm = FreeMap(snapshot.nodes, snapshot.running)
        preempt = self.preempt and any(self._level(r.id) for r in snapshot.running)
        if not snapshot.pending or (fm.free_total() == 0 and not preempt):
            return Plan()
        contracts = _contracts(snapshot)
        level = self._level
        if self.priorities:
            order = sorted(snapshot.pending, key=lambda j: (level(j.id), j.submit_s, j.id))
        else:
            order = _fifo(snapshot.pending)
        actions: list = []
        soon = _soon_free(snapshot.running, fm) if preempt else {}
        victims: list[RunningJob] = []
        if preempt:
            now = snapshot.now_s
            victims = [
                r for r in snapshot.running
                if level(r.id) == 1 and not r.preempting
                and now >= r.started_s + (contracts[r.contract].protected_s if r.contract in contracts else 0)
            ]
            victims.sort(key=lambda r: (-r.started_s, r.id))
        victim_gpus = sum(v.gpus for v in victims)
        for job in order:
            if fm.free_total(job.gpu_type) >= job.gpus:
                p = fm.place(job.gpus, job.gpu_type, job.gpus_per_node)
                if p is not None:
                    fm.take(p)
                    actions.append(Start(job.id, p))
                    continue
            if not preempt or level(job.id) == 1:
                if fm.free_total() == 0 and not preempt:
                    break
                continue
            if _claim(job, fm, soon):
                continue
            if victim_gpus + fm.free_total() + sum(soon.values()) < job.gpus:
                continue
            acts = _preempt_for(job, victims, fm, soon, contracts, "priority")
            victim_gpus = sum(v.gpus for v in victims)
            actions.extend(acts)
        return Plan(actions=tuple(actions))


# ---- quota with borrowing -----------------------------------------------------------------------------------


def nominal_quotas(snapshot: Snapshot) -> dict[str, int]:
    """Whole-GPU nominal quota per team: its share of the healthy capacity (grant / sibling grants, multiplied
    down the tree; a parent's unsplit remainder is its own share), apportioned by largest remainder."""
    kids: dict[str | None, list] = {}
    for t in snapshot.teams:
        kids.setdefault(t.parent, []).append(t)
    shares: dict[str, float] = {}

    def walk(parent: str | None, share: float, own_grant: float | None) -> None:
        children = kids.get(parent, [])
        total = sum(c.grant_gpu_hours for c in children)
        denom = max(total, own_grant or 0.0)
        if parent is not None and own_grant is not None and own_grant > total and denom > 0:
            shares[parent] = share * (own_grant - total) / denom
        for c in children:
            s = share * (c.grant_gpu_hours / denom if denom > 0 else 1.0 / len(children))
            if kids.get(c.id):
                walk(c.id, s, c.grant_gpu_hours)
            else:
                shares[c.id] = s

    walk(None, 1.0, None)
    capacity = sum(n.gpus for n in snapshot.nodes if n.health == HEALTHY)
    exact = {t: s * capacity for t, s in shares.items()}
    out = {t: math.floor(e) for t, e in exact.items()}
    left = capacity - sum(out.values())
    for t in sorted(exact, key=lambda t: (-(exact[t] - out[t]), t))[: max(0, left)]:
        out[t] += 1
    return out


class QuotaBorrowing:
    """Kueue-like: each team has a nominal quota of whole GPUs; idle quota may be borrowed.

    Each cycle: (1) in submit order, start jobs that fit inside their team's quota; (2) in submit order, start
    the rest where GPUs are free (borrowing); (3) for each team under its quota whose first waiting job would
    fit inside the quota, preempt jobs of teams above their quota (newest first, with their contract's grace,
    no protected time: Kueue has none) when that lets the job start. No memory of past usage.
    """

    name = "quota-borrowing"

    def __init__(self) -> None:
        self._quota_key: tuple | None = None
        self._quota: dict[str, int] = {}
        self._team_cache: dict[str, tuple[tuple, list[PendingJob], int]] = {}

    def _quotas(self, snapshot: Snapshot) -> dict[str, int]:
        key = (
            tuple((t.id, t.parent, t.grant_gpu_hours) for t in snapshot.teams),
            tuple((n.id, n.gpus, n.health) for n in snapshot.nodes),
        )
        if key != self._quota_key:
            self._quota_key, self._quota = key, nominal_quotas(snapshot)
        return self._quota

    def _teams_fifo(self, snapshot: Snapshot) -> dict[str, tuple[tuple, list[PendingJob], int]]:
        """Each waiting team's jobs in FIFO order and its smallest job's GPUs, derived again only when the caller
        hands over a new tuple for the team (``Snapshot.pending_by_team``, as the simulator does). The quota walk
        (1) and the reclaim (3) read these lists instead of searching the whole queue for each team's jobs, and
        the borrowing walk (2) runs only when the free GPUs could take the smallest waiting job."""
        groups = snapshot.pending_by_team
        if groups is None:
            grouped: dict[str, list[PendingJob]] = {}
            for job in snapshot.pending:
                grouped.setdefault(job.team, []).append(job)
            groups = grouped
        vouched = snapshot.pending_by_team is not None
        cache, out = self._team_cache, {}
        for team, jobs in groups.items():
            if not jobs:
                continue
            hit = cache.get(team)
            if hit is None or hit[0] is not jobs:  # (the cache holds the tuple: its id cannot be reused meanwhile)
                # a tuple in queue order (rank, submit_s, id) whose ranks are all equal is in FIFO order already
                fifo = jobs if vouched and jobs[0].rank == jobs[-1].rank else sorted(jobs, key=_fifo_key)
                hit = (jobs, fifo, min(map(_gpus, jobs)))
            out[team] = hit
        self._team_cache = out
        return out

    def plan(self, snapshot: Snapshot) -> Plan:
        if not snapshot.pending:
            return Plan()
        fm = FreeMap(snapshot.nodes, snapshot.running)
        quota = self._quotas(snapshot)
        usage: dict[str, int] = {}
        for r in snapshot.running:
            usage[r.team] = usage.get(r.team, 0) + r.gpus
        contracts = _contracts(snapshot)
        actions: list = []
        started: set[str] = set()

        def start(job) -> None:
            """Start the job if it fits now, counting it against its team's usage."""
            p = fm.place(job.gpus, job.gpu_type, job.gpus_per_node)
            if p is not None:
                fm.take(p)
                started.add(job.id)
                usage[job.team] = usage.get(job.team, 0) + job.gpus
                actions.append(Start(job.id, p))

        teams = self._teams_fifo(snapshot)
        waiting_teams = sorted(teams)
        lending = any(u > quota.get(t, 0) for t, u in usage.items())
        if fm.free_total() == 0 and not (
            lending and any(usage.get(t, 0) < quota.get(t, 0) for t in waiting_teams)
        ):
            return Plan()  # nothing can start and nobody under its quota waits: nothing to do
        if fm.free_total() > 0:
            # (1) inside the quota, in submit order across teams.
            cands: list[PendingJob] = []
            for t in waiting_teams:
                room = quota.get(t, 0) - usage.get(t, 0)
                _, fifo, smallest = teams[t]
                if room < smallest:
                    continue
                for job in fifo:
                    if job.gpus <= room:
                        cands.append(job)
                        room -= job.gpus
                        if room <= 0:
                            break
            cands.sort(key=_fifo_key)
            for job in cands:
                if fm.free_total() == 0:
                    break
                if usage.get(job.team, 0) + job.gpus > quota.get(job.team, 0):
                    continue
                start(job)
            # (2) borrowing, in submit order (no job smaller than the free GPUs: none can start).
            if fm.free_total() >= min(smallest for _, _, smallest in teams.values()):
                for job in _fifo(snapshot.pending):
                    if fm.free_total() == 0:
                        break
                    if fm.free_total(job.gpu_type) < job.gpus or job.id in started:
                        continue
                    start(job)
        # (3) reclaim: the first waiting job of each team under its quota.
        if not any(usage.get(t, 0) > quota.get(t, 0) for t in usage):
            return Plan(actions=tuple(actions))
        claimants = []
        for t in waiting_teams:
            if usage.get(t, 0) >= quota.get(t, 0):
                continue
            first = next((j for j in teams[t][1] if j.id not in started), None)
            if first is not None:
                claimants.append(first)
        claimants.sort(key=_fifo_key)
        claimants = [j for j in claimants if usage.get(j.team, 0) + j.gpus <= quota.get(j.team, 0)]
        if not claimants:
            return Plan(actions=tuple(actions))
        soon = _soon_free(snapshot.running, fm)
        taken: set[str] = set()  # the cycle's victims so far: a job is stopped once, for one claimant
        for job in claimants:
            if _claim(job, fm, soon):
                continue
            victims = [
                r for r in snapshot.running
                if not r.preempting and r.id not in taken and r.team != job.team
                and usage.get(r.team, 0) > quota.get(r.team, 0)
            ]
            victims.sort(key=lambda r: (-r.started_s, r.id))
            # Do not push a lender's victim team below its own quota.
            pruned = []
            over = {t: usage.get(t, 0) - quota.get(t, 0) for t in {v.team for v in victims}}
            for v in victims:
                if over[v.team] > 0:
                    pruned.append(v)
                    over[v.team] -= v.gpus
            acts = _preempt_for(job, pruned, fm, soon, contracts, "reclaim")
            for a in acts:
                v = next(r for r in snapshot.running if r.id == a.job_id)
                usage[v.team] -= v.gpus
                taken.add(v.id)
            actions.extend(acts)
        return Plan(actions=tuple(actions))


BASELINES = ("fifo-backfill", "static-priority", "quota-borrowing")
