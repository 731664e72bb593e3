"""The four-metric pyramid (DESIGN.md §5): one implementation, used by the simulator (and the one a portal dashboard
should read, so that both report the same figures).

Pure Python, no Django. Everything is computed from *piecewise-constant samples*: over an interval of
``duration_s`` seconds the cluster had ``healthy_gpus`` healthy GPUs out of ``total_gpus``, and each team had

- ``demand``     d_i: GPUs of its submitted-not-finished jobs (pending + running) while the team is in budget
                 (0 while it is out of budget),
- ``demand_all`` the same GPUs whatever the budget (used by the occupancy ceiling),
- ``allocated``  r_i: GPUs allocated to its in-budget work: all its running work while the team is in budget,
                 whether started protected or as borrowed (preemptible) work on idle GPUs,
- ``scavenger``  GPUs allocated to its work while it is out of budget (scavenger work),
- ``used``       utilization-weighted GPUs (sum over its jobs of GPUs x utilization).

Allocations are on healthy nodes (a job on a node that goes down stops at once).

The formulas (integrals are sums over samples of value x duration):

    availability      = Σ healthy·dt / Σ total·dt
    occupancy         = Σ Σ_i (r_i + s_i)·dt / Σ healthy·dt
    occupancy_ceiling = Σ min(healthy, Σ_i demand_all_i)·dt / Σ healthy·dt
    utilization       = Σ Σ_i used_i·dt / Σ Σ_i (r_i + s_i)·dt
    impact            = Σ Σ_i min(r_i, e_i)·dt / Σ Σ_i min(d_i, e_i)·dt
    impact_ceiling    = Σ Σ_i min(a_i, e_i)·dt / Σ Σ_i min(d_i, e_i)·dt
    impact_ceiling_whole_jobs = Σ max_x Σ_i min(x_i, e_i)·dt / Σ Σ_i min(d_i, e_i)·dt

with e_i = :func:`entitled` (hierarchical water-filling of the healthy capacity by budget shares, capped by
demand), a_i = :func:`apportion` (Hamilton apportionment of whole GPUs by e_i) and x_i a sum of whole jobs of
the team's demand (``TeamSample.sizes``), Σ_i x_i within the same GPUs (:mod:`scheduling.job_ceiling`: DESIGN's
ceiling ignores gang sizes, this one does not, and is never above it). A ratio whose denominator is
zero is ``None`` (nothing to measure), never a made-up 1.0.

Where the rest of impact went (:meth:`PyramidAccumulator.impact_loss`): at each moment the GPUs teams go without,
``Σ_i (min(d_i, e_i) - min(r_i, e_i))``, are split three ways, exactly (their sum over the window, over impact's
denominator, is ``1 - impact``):

    over_share     = Σ_i max(0, r_i - e_i)                GPUs of in-budget teams beyond their entitlements
    out_of_budget  = min(Σ_i s_i, the rest)               GPUs of out-of-budget (scavenger) work
    idle           = what is left                         GPUs free, or none that the waiting work could use

When every GPU is entitled (demand exceeds the capacity) the three are exactly those GPUs; when demand is below the
capacity no team is above its entitlement, and out-of-budget work counts only as far as in-budget work waited.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from scheduling.job_ceiling import Sizes, whole_job_best

EPS = 1e-9


# ---- entitlement -------------------------------------------------------------------------------------------


def water_fill(capacity: float, weights: Sequence[float], caps: Sequence[float]) -> list[float]:
    """Weighted max-min fair split of ``capacity`` among claimants, each capped at ``caps[k]``.

    Finds the level λ with Σ_k min(cap_k, λ·w_k) = min(capacity, Σ_k cap_k) and returns x_k = min(cap_k, λ·w_k):
    what a claimant does not want goes to the others in proportion to their weights. Claimants with weight 0 get
    nothing until every positive-weight claimant is capped; the rest is then split among them equally (the same
    water-filling with unit weights).
    """
    n = len(weights)
    out = [0.0] * n
    if capacity <= EPS or n == 0:
        return out
    positive = [k for k in range(n) if weights[k] > 0 and caps[k] > 0]
    left = _fill(capacity, positive, weights, caps, out)
    if left > EPS:
        zero = [k for k in range(n) if weights[k] <= 0 and caps[k] > 0]
        _fill(left, zero, [1.0] * n, caps, out)
    return out


def _fill(capacity: float, idx: list[int], weights: Sequence[float], caps: Sequence[float], out: list[float]) -> float:
    """Water-fill ``capacity`` over the claimants ``idx`` into ``out``; return what is left over."""
    if not idx:
        return capacity
    # Claimants saturate in order of cap/weight; walk them, lowering the capacity.
    order = sorted(idx, key=lambda k: caps[k] / weights[k])
    wsum = sum(weights[k] for k in order)
    left = capacity
    for pos, k in enumerate(order):
        level = left / wsum if wsum > 0 else 0.0
        if caps[k] <= level * weights[k] + EPS:
            out[k] = caps[k]
            left -= caps[k]
            wsum -= weights[k]
        else:
            # Nobody further saturates: everyone left gets level·w.
            for k2 in order[pos:]:
                out[k2] = level * weights[k2]
            return 0.0
    return max(0.0, left)


@dataclass(frozen=True)
class TeamTree:
    """The team tree for entitlement: ``parent[team]`` (None for a root) and ``grant[team]`` (budget grant).

    Several roots are allowed; they are siblings under an implicit top. A team that has children and its own
    work competes with its children through a virtual "own" member whose weight is its unsplit remainder
    (grant minus the children's grants, at least 0).
    """

    parent: Mapping[str, str | None]
    grant: Mapping[str, float]
    children: dict[str | None, list[str]] = field(default_factory=dict, compare=False)

    def __post_init__(self) -> None:
        kids: dict[str | None, list[str]] = {}
        for team in sorted(self.parent):
            kids.setdefault(self.parent[team], []).append(team)
        self.children.clear()
        self.children.update(kids)


def entitled(tree: TeamTree, capacity: float, demand: Mapping[str, float]) -> dict[str, float]:
    """e_i: the healthy ``capacity`` split down the tree by budget shares, capped by demand, redistributed.

    At each level the capacity a subtree received is water-filled (:func:`water_fill`) among its children with
    weights = their grants and caps = their subtree demand, and the team's own work with weight = its unsplit
    remainder and cap = its own demand. Fractional GPUs. Σ_i e_i = min(capacity, Σ_i d_i), and e_i <= d_i.
    """
    subtree: dict[str, float] = {}

    def subtree_demand(team: str) -> float:
        total = demand.get(team, 0.0)
        for child in tree.children.get(team, ()):
            total += subtree_demand(child)
        subtree[team] = total
        return total

    roots = tree.children.get(None, [])
    for root in roots:
        subtree_demand(root)
    out: dict[str, float] = {}

    def split(team: str | None, amount: float) -> None:
        kids = tree.children.get(team, [])
        own = demand.get(team, 0.0) if team is not None else 0.0
        weights = [tree.grant.get(k, 0.0) for k in kids]
        caps = [subtree[k] for k in kids]
        if team is not None:
            weights.append(max(0.0, tree.grant.get(team, 0.0) - sum(weights)))
            caps.append(own)
        shares = water_fill(amount, weights, caps)
        if team is not None and own > 0:
            out[team] = shares[-1]
        for k, share in zip(kids, shares):
            if subtree[k] > 0:
                split(k, share)

    split(None, capacity)
    return out


def _apportioned(entitlement: Mapping[str, float], healthy: float) -> int:
    """The whole GPUs the ceilings hand out: min(capacity, round(Σ e_i))."""
    return min(int(math.floor(healthy + EPS)), round(sum(entitlement.values())))


def apportion(entitlement: Mapping[str, float], capacity: int) -> dict[str, int]:
    """a_i: whole GPUs by the largest-remainder (Hamilton) method.

    Each team gets floor(e_i); the whole GPUs left, round(Σ e_i) - Σ floor(e_i) (never more than ``capacity``
    minus the floors), go one each to the largest fractional parts (ties by team id). Gang sizes are ignored.
    """
    floors = {t: math.floor(e + EPS) for t, e in entitlement.items()}
    total = min(capacity, round(sum(entitlement.values())))
    left = max(0, total - sum(floors.values()))
    for team in sorted(entitlement, key=lambda t: (-(entitlement[t] - floors[t]), t))[:left]:
        floors[team] += 1
    return floors


# ---- samples and the report --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TeamSample:
    demand: float = 0.0  # d_i, in-budget demand (GPUs)
    allocated: float = 0.0  # r_i, GPUs given to in-budget (non-scavenger) work
    scavenger: float = 0.0  # GPUs given to scavenger work
    used: float = 0.0  # utilization-weighted GPUs
    demand_all: float | None = None  # demand whatever the budget (None: same as demand)
    # the jobs that make up ``demand``, as (GPUs, count) pairs by GPUs, for the ceiling of whole jobs (empty:
    # unknown, counted as jobs of one GPU)
    sizes: Sizes = ()


@dataclass(frozen=True, slots=True)
class Sample:
    duration_s: float
    healthy_gpus: float
    total_gpus: float
    teams: Mapping[str, TeamSample]


def _ratio(num: float, den: float) -> float | None:
    return num / den if den > EPS else None


class PyramidAccumulator:
    """Streaming sums for the pyramid; ``add`` samples in any order, read ``result()``.

    Entitlements are computed once per distinct (healthy capacity, demand vector) and cached, and the last one is
    reused while a new demand vector cannot move the water levels (``_same_fill``), so replaying long runs of
    similar moments stays cheap.
    """

    def __init__(self, tree: TeamTree, per_team: bool = False, whole_jobs: bool = False) -> None:
        """``per_team``: also keep each team's own Σ min(r, e) and Σ min(d, e) (``team_received``, ``team_wanted``),
        whose sums over the teams are impact's numerator and denominator. ``whole_jobs``: also the ceiling of whole
        jobs (``impact_ceiling_whole_jobs``, from the samples' ``sizes``; a knapsack per sample, so on request)."""
        self.tree = tree
        self.whole_jobs = whole_jobs
        self.team_received: dict[str, float] | None = {} if per_team else None
        self.team_wanted: dict[str, float] | None = {} if per_team else None
        self.total = 0.0
        self.healthy = 0.0
        self.allocated = 0.0  # in-budget + scavenger
        self.used = 0.0
        self.occ_ceiling = 0.0
        self.received = 0.0  # Σ min(r, e)
        self.wanted = 0.0  # Σ min(d, e)
        self.best = 0.0  # Σ min(a, e)
        self.best_jobs = 0.0  # the same for whole jobs (job_ceiling.whole_job_best)
        self._jobs_last: tuple[object, tuple, float] | None = None  # (e, the teams' sizes, best of whole jobs) last
        # Σ min(d, e) - Σ min(r, e), split by where the GPUs went (impact_loss)
        self.lost_over = 0.0
        self.lost_out_of_budget = 0.0
        self.lost_idle = 0.0
        # (Σ min(d, e), Σ min(a, e), e, the whole GPUs the ceilings hand out) per distinct demand
        self._cache: dict[tuple, tuple[float, float, dict[str, float], int]] = {}
        self._last: tuple[float, float, dict[str, float], int] | None = None
        self._last_healthy = -1.0
        self._last_demand: dict[str, float] = {}
        self.last_entitled: Mapping[str, float] = {}  # e of the last sample added (read, never change it)

    def _same_fill(self, healthy: float, demand: dict[str, float]) -> bool:
        """Would the water-fill of the last sample give the same entitlements for ``demand``? Exactly when the same
        teams want GPUs on the same capacity, every team that got all it wanted (e = d) wants the same, and every
        other team still wants at least what it got: the water levels, level by level, do not move. Then Σ min(d, e)
        and the ceiling do not move either. With many teams few demand vectors repeat, and this O(teams) check
        replaces most water-fills of a long replay."""
        last = self._last_demand
        if self._last is None or healthy != self._last_healthy or len(demand) != len(last):
            return False
        e = self._last[2]
        for team, d in demand.items():
            old = last.get(team)
            if old is None:
                return False
            et = e.get(team, 0.0)
            if et >= old - EPS:  # it got all it wanted: the same demand, or the levels move
                if d != old:
                    return False
            elif d < et - EPS:
                return False
        return True

    def add(self, sample: Sample) -> None:
        dt = sample.duration_s
        if dt <= 0:
            return
        healthy = sample.healthy_gpus
        self.total += sample.total_gpus * dt
        self.healthy += healthy * dt
        demand_all = 0.0
        alloc = used = scavenger = 0.0
        demand: dict[str, float] = {}
        for team, s in sample.teams.items():
            alloc += s.allocated + s.scavenger
            scavenger += s.scavenger
            used += s.used
            demand_all += s.demand if s.demand_all is None else s.demand_all
            if s.demand > 0:
                # Demand beyond the capacity cannot change any entitlement: clamp it (more cache hits, same e).
                demand[team] = s.demand if s.demand < healthy else healthy
        self.allocated += alloc * dt
        self.used += used * dt
        self.occ_ceiling += min(healthy, demand_all) * dt
        if not demand:
            self.last_entitled = {}
            return
        cached = self._last if self._same_fill(healthy, demand) else None
        if cached is None:
            key = (healthy, tuple(sorted(demand.items())))
            cached = self._cache.get(key)
        if cached is None:
            e = entitled(self.tree, healthy, demand)
            total = _apportioned(e, healthy)
            a = apportion(e, total)
            wanted = sum(min(demand[t], e[t]) for t in e)
            best = sum(min(a[t], e[t]) for t in e)
            if len(self._cache) > 200_000:
                self._cache.clear()
            cached = self._cache[key] = (wanted, best, e, total)
        self._last, self._last_healthy, self._last_demand = cached, healthy, demand
        wanted, best, e, total = cached
        self.last_entitled = e
        if self.whole_jobs:
            self.best_jobs += self._best_of_jobs(sample.teams, e, best, total) * dt
        got = over = 0.0
        teams = sample.teams
        for team, et in e.items():
            r = teams[team].allocated
            if r < et:
                got += r
            else:
                got += et
                over += r - et
        if self.team_received is not None:
            self._add_per_team(e, demand, teams, dt)
        self.wanted += wanted * dt
        self.best += best * dt
        self.received += got * dt
        short = max(0.0, wanted - got)
        over = min(over, short)
        out_of_budget = min(scavenger, short - over)
        self.lost_over += over * dt
        self.lost_out_of_budget += out_of_budget * dt
        self.lost_idle += (short - over - out_of_budget) * dt

    def _best_of_jobs(self, teams: Mapping[str, TeamSample], e: Mapping[str, float], best: float, total: int
                      ) -> float:
        """The sample's ceiling of whole jobs over the ``total`` GPUs the Hamilton ceiling hands out (at most its
        ``best``), reused while the entitlements and the teams' jobs stand (a job that starts or stops moves
        neither)."""
        sizes = tuple([teams[t].sizes for t in e])
        last = self._jobs_last
        if last is not None and last[0] is e and last[1] == sizes:
            return last[2]
        jobs = min(best, whole_job_best(e, dict(zip(e, sizes)), total))
        self._jobs_last = (e, sizes, jobs)
        return jobs

    def _add_per_team(self, e: Mapping[str, float], demand: Mapping[str, float], teams: Mapping[str, TeamSample],
                      dt: float) -> None:
        received, wanted = self.team_received, self.team_wanted
        for team, et in e.items():
            received[team] = received.get(team, 0.0) + min(teams[team].allocated, et) * dt
            wanted[team] = wanted.get(team, 0.0) + min(demand[team], et) * dt

    def impact_loss(self) -> dict[str, float | None]:
        """Where the part of impact's denominator that teams went without went (the module docstring): GPU-time
        given to in-budget teams beyond their entitlements, to out-of-budget work, and left idle, each over impact's
        denominator; with impact they sum to 1 (None when nothing was wanted)."""
        return {
            "impact_lost_over_share": _ratio(self.lost_over, self.wanted),
            "impact_lost_out_of_budget": _ratio(self.lost_out_of_budget, self.wanted),
            "impact_lost_idle": _ratio(self.lost_idle, self.wanted),
        }

    def result(self) -> dict[str, float | None]:
        """availability, occupancy, occupancy_ceiling, impact, impact_ceiling, utilization (None when 0/0)."""
        return {
            "availability": _ratio(self.healthy, self.total),
            "occupancy": _ratio(self.allocated, self.healthy),
            "occupancy_ceiling": _ratio(self.occ_ceiling, self.healthy),
            "impact": _ratio(self.received, self.wanted),
            "impact_ceiling": _ratio(self.best, self.wanted),
            "utilization": _ratio(self.used, self.allocated),
            **({"impact_ceiling_whole_jobs": _ratio(self.best_jobs, self.wanted)} if self.whole_jobs else {}),
        }


def pyramid(tree: TeamTree, samples: Iterable[Sample]) -> dict[str, float | None]:
    """The pyramid ratios of :class:`PyramidAccumulator` over ``samples`` (see the module docstring)."""
    acc = PyramidAccumulator(tree)
    for sample in samples:
        acc.add(sample)
    return acc.result()


# ---- waits and demand --------------------------------------------------------------------------------------


def percentile(values: Sequence[float], p: float) -> float | None:
    """The p-th percentile (0..100) by linear interpolation between closest ranks; None for no values."""
    if not values:
        return None
    xs = sorted(values)
    if len(xs) == 1:
        return float(xs[0])
    pos = (len(xs) - 1) * p / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def censored_waits(jobs: Iterable[tuple[float, float | None]], window_end_s: float) -> list[float]:
    """Waits (submit -> first start) of ``(submit_s, first_start_s or None)`` pairs.

    A job never started by ``window_end_s`` counts with the wait it has had so far, window_end - submit
    (censored, never dropped: a policy that starves jobs must not look good).
    """
    out = []
    for submit, start in jobs:
        if start is None or start > window_end_s:
            out.append(max(0.0, window_end_s - submit))
        else:
            out.append(max(0.0, start - submit))
    return out


def wait_percentiles(
    jobs: Iterable[tuple[float, float | None]], window_end_s: float
) -> tuple[float | None, float | None]:
    """(p50, p95) of :func:`censored_waits`."""
    waits = censored_waits(jobs, window_end_s)
    return percentile(waits, 50), percentile(waits, 95)


def demand_ratio(jobs: Iterable[tuple[float, float, int]], capacity_gpus: float, window_s: float) -> float | None:
    """Σ_jobs gpus x (the part of its run time between its submit and the window end) / (capacity x window).

    ``jobs`` are ``(submit_s, duration_s, gpus)`` with times relative to the window start.
    """
    num = 0.0
    for submit, duration, gpus in jobs:
        if submit < window_s:
            num += gpus * max(0.0, min(duration, window_s - submit))
    return _ratio(num, capacity_gpus * window_s)
