"""The discrete-event replay: a job trace on a simulated cluster, driven by any Policy, cycle by cycle.

Pure Python (only the policy package and scheduling.pyramid). Its inputs, job records and result are model.py, the
jobs it runs workload.py, what it reports report.py; see docs/simulation.md for the model.
"""

from __future__ import annotations

import bisect
import contextlib
import gc
import heapq
import math
import random
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import replace
from itertools import chain
from operator import attrgetter

from scheduling import pyramid
from scheduling.policy.types import (
    DOWN,
    HEALTHY,
    FlagSquatting,
    NodeState,
    PendingJob,
    Plan,
    Policy,
    Preempt,
    Release,
    Reservation,
    RunningJob,
    Shortfall,
    Snapshot,
    Start,
    TeamState,
    run_limit_s,
)
from scheduling.policy.usage import decay as _decay
from scheduling.simulation.model import HOUR, SimConfig, SimJob, SimResult, SimulationError
from scheduling.simulation.trace import TraceJob
from scheduling.simulation import report
from scheduling.simulation.report import IdleByPlace, OwedReasons, Starvation, Timeline
from scheduling.simulation.workload import batch_contract, build_jobs


@contextlib.contextmanager
def _collector_for_replay() -> Iterator[None]:
    """A replay allocates millions of short-lived objects (snapshots, plans) beside a heap of long-lived ones (the
    trace's jobs, the schedule), which every full collection walks again: the heap built so far is frozen out of the
    collector, and the young generation is collected every 20,000 allocations instead of 700. The policy keeps no
    reference cycles from one cycle to the next, so this only saves time (on the Philly case eight times over,
    237 -> 196 s; a month of a 1,024-GPU lab 68 -> 65 s). Both are restored when the replay ends."""
    thresholds = gc.get_threshold()
    gc.freeze()
    gc.set_threshold(20_000, 20, 50)
    try:
        yield
    finally:
        gc.set_threshold(*thresholds)
        gc.unfreeze()


# Event kinds, in the order they are handled at the same instant (the cycle comes last).
_END, _GRACE, _FAIL, _REPAIR, _ARRIVE, _CYCLE = range(6)

# A pending job's queue key (SimJob.key): submit time, then id
_queue_key = attrgetter("submit_s", "id")


class PendingView(Sequence):
    """``Snapshot.pending`` of a replay while no policy has read it: the pending jobs in queue order (submit time,
    then id), made from the snapshot's per-team tuples (``Snapshot.pending_by_team``, which it keeps) only when read.
    ``len()`` costs nothing; the first read sorts the tuples' jobs together once (a merge of sorted runs) and calls
    ``on_read``, so that the simulator keeps the whole queue in order itself from then on (the baselines read it
    every cycle). The budget policy reads only the per-team tuples and the length: for it no global queue is kept,
    which cost an O(pending) insert and delete per job and an O(pending) copy per cycle."""

    __slots__ = ("_by_team", "_len", "_jobs", "_on_read")

    def __init__(self, by_team: Mapping[str, tuple[PendingJob, ...]], length: int,
                 on_read: Callable[[], None] | None = None) -> None:
        self._by_team = by_team
        self._len = length
        self._jobs: tuple[PendingJob, ...] | None = None
        self._on_read = on_read

    def _tuple(self) -> tuple[PendingJob, ...]:
        if self._jobs is None:
            self._jobs = tuple(sorted(chain.from_iterable(self._by_team.values()), key=_queue_key))
            if self._on_read is not None:
                on_read, self._on_read = self._on_read, None
                on_read()
        return self._jobs

    def __len__(self) -> int:
        return self._len

    def __getitem__(self, index):
        return self._tuple()[index]

    def __iter__(self) -> Iterator[PendingJob]:
        return iter(self._tuple())

    def __eq__(self, other) -> bool:
        if isinstance(other, (tuple, PendingView)):
            return len(other) == self._len and tuple(other) == self._tuple()
        return NotImplemented

    def __repr__(self) -> str:
        return f"PendingView({self._tuple()!r})"


class Simulator:
    """One replay of ``jobs`` under ``policy``. ``run()`` returns a :class:`SimResult`."""

    def __init__(self, config: SimConfig, jobs: list[TraceJob], policy: Policy) -> None:
        self.cfg = config
        self.policy = policy
        self.contracts = {c.name: c for c in config.contracts}
        for needed in ("standard", "long", "debug", "scavenger"):
            if needed not in self.contracts:
                raise ValueError(f"contract {needed!r} missing")
        self.budgets = config.budgets
        self.teams = config.budgets.teams
        self.tree = pyramid.TeamTree(parent=config.budgets.parent, grant=config.budgets.grant)
        nodes = list(config.nodes)
        pool = config.debug_pool_nodes
        if pool:
            ids = {n.id for n in nodes[:pool]} if isinstance(pool, int) else set(pool)
            nodes = [NodeState(n.id, n.gpu_type, n.gpus, n.health, debug_pool=n.id in ids) for n in nodes]
        self.nodes = {n.id: n for n in nodes}
        self.node_order = [n.id for n in nodes]
        self.nodes_tuple = tuple(nodes)
        self.free = {n.id: (n.gpus if n.health == HEALTHY else 0) for n in nodes}
        self.on_node: dict[str, set[str]] = {n.id: set() for n in nodes}
        self.total_gpus = sum(n.gpus for n in nodes)
        self.healthy_gpus = sum(n.gpus for n in nodes if n.health == HEALTHY)
        self.horizon = config.horizon_s
        end = self.horizon if self.horizon is not None else max((j.submit_s for j in jobs), default=0.0)
        work = build_jobs(config, jobs, nodes, end)
        self.rejected, self.debug_as_batch = work.rejected, work.debug_as_batch
        self.jobs = {j.id: j for j in work.jobs}
        if len(self.jobs) != len(work.jobs):
            raise ValueError("duplicate job ids")
        self.job_list = work.jobs

        # team counters
        T = self.teams
        self.pend_g = dict.fromkeys(T, 0)
        self.run_g = dict.fromkeys(T, 0)  # in-budget (non-scavenger) GPUs, preempting included
        self.scav_g = dict.fromkeys(T, 0)
        # team -> {GPUs: its jobs of that size, pending or running}: the jobs of its demand (pyramid's ceiling of
        # whole jobs)
        self.sizes: dict[str, dict[int, int]] = {t: {} for t in T}
        self.used = dict.fromkeys(T, 0.0)
        self.charge_rate = dict.fromkeys(T, 0.0)  # normalised GPU-hours per second (budget)
        self.usage_rate = dict.fromkeys(T, 0.0)  # normalised GPU-seconds per second (usage)
        self.spend = dict.fromkeys(T, 0.0)  # GPU-hours charged to the team itself
        self.usage = dict.fromkeys(T, 0.0)
        self.ran_out: dict[str, float] = {}  # team -> when its budget first ran out
        self._charging: list[str] | None = None  # _charging_teams(), None when a rate changed
        self._refunded: set[str] = set()  # teams refunded since the last budget-flag update
        # A team's own grant: what it keeps after splitting to its children (the portal's budgets.selectors.balance
        # is this minus its own charges). A team is in budget while that balance is positive.
        kids_grant = dict.fromkeys(T, 0.0)
        for t in T:
            p = self.budgets.parent.get(t)
            if p in kids_grant:
                kids_grant[p] += self.budgets.grant[t]
        self.own_grant = {t: self.budgets.grant[t] - kids_grant[t] for t in T}
        self.in_budget = {t: self.own_grant[t] > 1e-9 for t in T}
        for t in T:
            if not self.in_budget[t]:
                self.ran_out[t] = 0.0

        # the pending queue per team (Snapshot.pending_by_team), each team's tuple rebuilt only when its queue changes
        self.team_keys: dict[str, list[tuple]] = {t: [] for t in T}
        self.team_pending: dict[str, list[PendingJob]] = {t: [] for t in T}
        self.team_tuple: dict[str, tuple[PendingJob, ...]] = {}
        self.pending_count = 0
        # the whole queue in order (Snapshot.pending), kept only once a policy has read it (PendingView; None before)
        self.pending_keys: list[tuple] | None = None
        self.pending_list: list[PendingJob] | None = None
        self.pending_tuple: tuple[PendingJob, ...] | None = None  # Snapshot.pending, kept while the queue stands
        self.running: dict[str, RunningJob] = {}
        # the running jobs' ids in order, so that Snapshot.running comes sorted by id (the policy sorts it: on a
        # sorted input that is one pass, where the start order cost a full sort every cycle)
        self.running_ids: list[str] = []
        self.reservations: tuple[Reservation, ...] = ()
        # teams short of their shares, handed from plan to snapshot (empty: kept from the start, nobody short yet)
        self.shortfall: Shortfall | None = Shortfall(as_of_s=0.0)
        self.heap: list[tuple] = []
        self.seq = 0
        self.now = 0.0
        self.last_cycle = -math.inf
        # teams whose work, use or budget flag moved since the last sample was made (_team_samples)
        self._moved: set[str] = set()
        self.next_cycle: float | None = None
        self.cycles = 0
        self.dirty = True
        self.acc = pyramid.PyramidAccumulator(self.tree, per_team=config.per_team, whole_jobs=config.whole_jobs)
        self._sample: pyramid.Sample | None = None
        self._sample_dt = 0.0
        self.starved = Starvation()
        # why teams went without what they were owed, when the policy says why its jobs wait (report.OwedReasons)
        self.owed_reasons = OwedReasons() if config.policy_config.explain else None
        self._sample_firsts: dict = {}  # the reasons that held over the current sample (OwedReasons.firsts)
        # where the idle GPUs sit (--explain)
        self.idle_by_place = (IdleByPlace(n.id for n in nodes if n.debug_pool) if config.idle_by_place else None)
        self.timeline = Timeline(config.timeline_s) if config.timeline_s else None
        self.schedule: list[tuple] = []
        self.ckpt_heap: list[tuple[float, str]] = []  # (next periodic checkpoint, job id) of running jobs
        self.counts = {
            "preemptions": 0, "preemptions_drain": 0, "preemptions_debug": 0, "preemptions_turn": 0,
            "preempted_in_protected": 0,
            "failure_stops": 0, "releases": 0, "squatting_flags": 0, "squatters_flagged": 0, "node_failures": 0,
            "debug_over_user_limit": 0,
            "debug_over_team_limit": 0,
            "timeouts": 0,  # runs stopped at their run limit with work left (the job ends, as Slurm's TIMEOUT)
        }
        self.user_sessions: dict[str, list[SimJob]] = {}  # user -> debug sessions submitted and maybe still open
        self.team_sessions: dict[str, list[SimJob]] = {}  # team -> the same (only with a team limit)
        self.lost_gpu_s = 0.0
        self.debug_idle_gpu_s = 0.0  # GPU-time forgotten debug sessions held while idle
        self.preempted_ids: set[str] = set()  # jobs preempted at least once (drains excluded)
        self.nonfail_events = 0  # events other than cycles waiting in the heap

    # ---- events -------------------------------------------------------------------------------------------

    def _push(self, t: float, kind: int, what, token: int = 0) -> None:
        self.seq += 1
        heapq.heappush(self.heap, (t, kind, self.seq, what, token))
        if kind != _CYCLE:
            self.nonfail_events += 1

    def _request_cycle(self, t: float, immediate: bool = False) -> None:
        target = t if immediate else max(t, self.last_cycle + self.cfg.cycle_s)
        if self.next_cycle is not None and self.next_cycle <= target:
            return
        self.next_cycle = target
        self._push(target, _CYCLE, None)

    # ---- time ---------------------------------------------------------------------------------------------

    def _advance(self, t: float) -> None:
        dt = t - self.now
        if dt <= 0:
            return
        # One sample for [now, t): the state is constant over it.
        if self.dirty or self._sample is None:
            self._flush_sample()
            self._sample = pyramid.Sample(0.0, self.healthy_gpus, self.total_gpus, self._team_samples())
            if self.owed_reasons is not None:
                self._sample_firsts = self.owed_reasons.firsts
            self.dirty = False
        self._sample_dt += dt
        if self.idle_by_place is not None:
            self.idle_by_place.add(self.free, self.reservations, dt)
        # Budgets and decayed usage.
        factor = _decay(1.0, dt, self.cfg.policy_config.usage_half_life_s)  # u * factor == _decay(u, dt, hl)
        spend, charge_rate, usage_rate = self.spend, self.charge_rate, self.usage_rate
        charging = self._charging_teams()
        if self.timeline is not None:
            self.timeline.spend_until(self.now, t, spend, charge_rate)
        for team in charging:
            spend[team] += charge_rate[team] * dt
        # (u * factor + 0.0 is u * factor, bit for bit: teams with no usage and no rate stay at 0.0)
        self.usage = {team: u * factor + usage_rate[team] * dt for team, u in self.usage.items()}
        if charging:
            self._update_budget_flags(t)
        self.now = t

    def _team_samples(self) -> dict[str, pyramid.TeamSample]:
        """Each team with work (pending, running or scavenger) and its sample, in team order: the last sample's
        teams, with those whose counters moved since (``_moved``) sampled anew, or all in team order again when a
        team's work begins (a dict keeps its order when entries are replaced or removed, not when one is added).
        The same samples as sampling every team each time, for the few teams an event touches."""
        moved = self._moved
        last = self._sample.teams if self._sample is not None else None
        if last is not None:
            if not moved:
                return last  # (nobody changes a sample's dict)
            teams = dict(last)
            for team in moved:
                ts = self._team_sample(team)
                if ts is None:
                    teams.pop(team, None)
                elif team in teams:
                    teams[team] = ts
                else:
                    break
            else:
                moved.clear()
                return teams
        teams = {}
        for team in self.teams:
            ts = self._team_sample(team) if last is None or team in moved else last.get(team)
            if ts is not None:
                teams[team] = ts
        moved.clear()
        return teams

    def _team_sample(self, team: str) -> pyramid.TeamSample | None:
        """The team's sample of the state now (None: it has no work)."""
        pend, run, scav = self.pend_g[team], self.run_g[team], self.scav_g[team]
        if not (pend or run or scav):
            return None
        ok = self.in_budget[team]
        # While the team is in budget, all its running work is its in-budget work, whether the policy started it
        # protected or as borrowed (preemptible) work on idle GPUs.
        return pyramid.TeamSample(
            demand=float(pend + run + scav) if ok else 0.0,
            allocated=float(run + scav) if ok else 0.0,
            scavenger=0.0 if ok else float(scav + run),
            used=self.used[team],
            demand_all=float(pend + run + scav),
            sizes=tuple(sorted(self.sizes[team].items())) if ok and self.acc.whole_jobs else (),
        )

    def balance(self, team: str) -> float:
        """The team's own balance: own grant minus what its own jobs were charged (may be negative)."""
        return self.own_grant[team] - self.spend[team]

    def _charging_teams(self) -> list[str]:
        """The teams whose budget is charged now (running work), in team order; kept until a rate changes."""
        if self._charging is None:
            self._charging = [t for t, rate in self.charge_rate.items() if rate]
        return self._charging

    def _update_budget_flags(self, at: float) -> None:
        """Flags of the teams whose spend moved: those charged now and those refunded since the last update
        (every other team's spend, hence flag, is as it was when last checked)."""
        teams = self._charging_teams()
        if self._refunded:
            teams = teams + sorted(self._refunded.difference(teams))
            self._refunded.clear()
        for team in teams:
            ok = self.own_grant[team] - self.spend[team] > 1e-9
            if ok != self.in_budget[team]:
                self.in_budget[team] = ok
                self._moved.add(team)
                self.dirty = True
                if not ok:
                    self.ran_out.setdefault(team, at)

    def _flush_sample(self) -> None:
        if self._sample is not None and self._sample_dt > 0:
            s = self._sample
            self.acc.add(pyramid.Sample(self._sample_dt, s.healthy_gpus, s.total_gpus, s.teams))
            if self.owed_reasons is not None:
                self.owed_reasons.add(s.teams, self.acc.last_entitled, self._sample_firsts, self._sample_dt)
            if self.timeline is not None:
                self.timeline.add(self.now - self._sample_dt, self._sample_dt, s.teams, self.acc.last_entitled)
            self.starved.track(s.teams, self.now - self._sample_dt)
        self._sample_dt = 0.0

    # ---- job transitions ----------------------------------------------------------------------------------

    def _enqueue(self, job: SimJob) -> None:
        job.state = "pending"
        job.pending_obj = PendingJob(
            id=job.id, team=job.team, gpus=job.gpus, contract=job.contract, submit_s=job.submit_s,
            gpu_type=job.gpu_type, user=job.user, runs=job.runs, time_limit_s=job.time_limit_s,
        )
        if self.pending_keys is not None:
            i = bisect.bisect_left(self.pending_keys, job.key)
            self.pending_keys.insert(i, job.key)
            self.pending_list.insert(i, job.pending_obj)
            self.pending_tuple = None
        self.pending_count += 1
        keys = self.team_keys[job.team]
        i = bisect.bisect_left(keys, job.key)
        keys.insert(i, job.key)
        self.team_pending[job.team].insert(i, job.pending_obj)
        self.team_tuple.pop(job.team, None)
        self.pend_g[job.team] += job.gpus
        self._count_size(job, 1)
        self._moved.add(job.team)
        self.dirty = True

    def _dequeue(self, job: SimJob) -> None:
        keys = self.team_keys[job.team]
        i = bisect.bisect_left(keys, job.key)
        if i >= len(keys) or keys[i] != job.key:  # pragma: no cover - invariant
            raise SimulationError(f"job {job.id} not in the pending queue")
        del keys[i]
        del self.team_pending[job.team][i]
        self.team_tuple.pop(job.team, None)
        self.pending_count -= 1
        if self.pending_keys is not None:
            i = bisect.bisect_left(self.pending_keys, job.key)
            del self.pending_keys[i]
            del self.pending_list[i]
            self.pending_tuple = None
        self.pend_g[job.team] -= job.gpus
        self._count_size(job, -1)
        self._moved.add(job.team)
        job.pending_obj = None

    def _count_size(self, job: SimJob, k: int) -> None:
        """``k`` more (or fewer) jobs of the job's size in its team's demand (``self.sizes``)."""
        sizes = self.sizes[job.team]
        n = sizes.get(job.gpus, 0) + k
        if n:
            sizes[job.gpus] = n
        else:
            del sizes[job.gpus]

    def _arrive(self, job: SimJob) -> None:
        team = job.team
        if job.kind == "debug" and (job.user and self.cfg.debug_sessions_per_user or self.cfg.debug_sessions_per_team):
            self._admit_session(job)
        job.in_budget_at_submit = self.balance(team) > 1e-9
        self._enqueue(job)
        # A batch job arriving on a full cluster cannot start, nor preempt before it has waited (the policy's
        # preempt_after_s is longer than the heartbeat): the next heartbeat serves it. Debug sessions and
        # arrivals that find free GPUs get their cycle now.
        if job.kind == "debug" or any(self.free.values()):
            self._request_cycle(self.now, immediate=job.kind == "debug")

    def _admit_session(self, job: SimJob) -> None:
        """The portal's session limits, per person and per team: a session beyond either is refused, and its
        user submits the work as a batch job instead (as for a session larger than the portal accepts)."""
        per_user = self.cfg.debug_sessions_per_user if job.user else 0
        per_team = self.cfg.debug_sessions_per_team
        mine = [j for j in self.user_sessions.get(job.user, ()) if j.state != "done"] if per_user else []
        ours = [j for j in self.team_sessions.get(job.team, ()) if j.state != "done"] if per_team else []
        over = ("user" if per_user and len(mine) >= per_user else
                "team" if per_team and len(ours) >= per_team else None)
        if over is not None:
            job.kind = "train"
            job.contract = batch_contract(self.cfg, job.duration_s)
            job.forgotten = False
            self.debug_as_batch += 1
            self.counts[f"debug_over_{over}_limit"] += 1
        if per_user:
            self.user_sessions[job.user] = mine + [job] if over is None else mine
        if per_team:
            self.team_sessions[job.team] = ours + [job] if over is None else ours

    def _job_price(self, job: SimJob, gpu_type_factor: float) -> float:
        c = self.contracts["scavenger" if job.scavenger else job.contract]
        return gpu_type_factor * c.price_factor

    def _start(self, act: Start) -> None:
        job = self.jobs.get(act.job_id)
        if job is None or job.state != "pending":
            raise SimulationError(
                f"{self.policy.name}: Start of job {act.job_id!r} which is not pending "
                f"({'unknown' if job is None else job.state}) at t={self.now:.0f}"
            )
        total = 0
        prev = None
        for node, g in act.placement:
            n = self.nodes.get(node)
            if n is None:
                raise SimulationError(f"{self.policy.name}: Start of {job.id} on unknown node {node!r}")
            if prev is not None and node <= prev:
                raise SimulationError(f"{self.policy.name}: placement of {job.id} not sorted/unique: {act.placement}")
            prev = node
            if n.health != HEALTHY:
                raise SimulationError(f"{self.policy.name}: Start of {job.id} on {n.health} node {node}")
            if job.gpu_type is not None and n.gpu_type != job.gpu_type:
                raise SimulationError(f"{self.policy.name}: {job.id} wants {job.gpu_type}, got {node} ({n.gpu_type})")
            if g < 1 or g > self.free[node]:
                raise SimulationError(
                    f"{self.policy.name}: double booking: Start of {job.id} puts {g} GPUs on {node} "
                    f"which has {self.free[node]} free at t={self.now:.0f}"
                )
            total += g
        if total != job.gpus:
            raise SimulationError(f"{self.policy.name}: {job.id} needs {job.gpus} GPUs, placement gives {total}")
        self._dequeue(job)
        type_factor = 0.0
        for node, g in act.placement:
            self.free[node] -= g
            self.on_node[node].add(job.id)
            type_factor += g * self.cfg.prices.get(self.nodes[node].gpu_type, 1.0)
        type_factor /= job.gpus
        job.state = "running"
        job.placement = act.placement
        job.scavenger = act.scavenger
        job.run_start_s = self.now
        job.token += 1
        if job.first_start_s is None:
            job.first_start_s = self.now
        c = self.contracts[job.contract]
        k = self.cfg.checkpoint_minutes * 60
        job.next_ckpt_s = self.now + k if k > 0 else math.inf
        if k > 0:
            heapq.heappush(self.ckpt_heap, (job.next_ckpt_s, job.id))
        util = job.util
        job.running_obj = RunningJob(
            id=job.id, team=job.team, gpus=job.gpus, contract=job.contract, placement=act.placement,
            started_s=self.now, submit_s=job.submit_s, gpu_type=self.nodes[act.placement[0][0]].gpu_type,
            user=job.user, scavenger=act.scavenger, last_checkpoint_s=self.now, utilization=util,
            idle_since_s=self.now if (util is not None and util < 0.02) else None, time_limit_s=job.time_limit_s,
            runs=job.runs,
        )
        self.running[job.id] = job.running_obj
        bisect.insort(self.running_ids, job.id)
        run_for = job.remaining_s
        limit = run_limit_s(job.running_obj, c)
        if limit is not None:
            run_for = min(run_for, limit)
        self._push(self.now + run_for, _END, job.id, job.token)
        team = job.team
        if act.scavenger:
            self.scav_g[team] += job.gpus
        else:
            self.run_g[team] += job.gpus
        self._count_size(job, 1)
        self.used[team] += job.gpus * (util if util is not None else self.cfg.default_utilization)
        self._moved.add(team)
        job.price = self._job_price(job, type_factor)
        self.charge_rate[team] += job.gpus * job.price / HOUR
        self._charging = None
        self.usage_rate[team] += job.gpus * type_factor
        self.dirty = True

    def _stop(self, job: SimJob, reason: str, lost_s: float) -> None:
        """Free the job's GPUs now and write its schedule row."""
        if job.idle and job.running_obj is not None and job.running_obj.idle_since_s is not None:
            self.debug_idle_gpu_s += job.gpus * (self.now - job.running_obj.idle_since_s)
        for node, g in job.placement:
            self.on_node[node].discard(job.id)
            if self.nodes[node].health == HEALTHY:
                self.free[node] += g
        team = job.team
        if job.scavenger:
            self.scav_g[team] -= job.gpus
        else:
            self.run_g[team] -= job.gpus
        self._count_size(job, -1)
        self.used[team] -= job.gpus * (job.util if job.util is not None else self.cfg.default_utilization)
        if abs(self.used[team]) < 1e-9:
            self.used[team] = 0.0
        self._moved.add(team)
        self.charge_rate[team] -= job.gpus * job.price / HOUR
        self._charging = None
        type_factor = job.price / self.contracts["scavenger" if job.scavenger else job.contract].price_factor
        self.usage_rate[team] -= job.gpus * type_factor
        if not self.run_g[team] and not self.scav_g[team]:
            self.charge_rate[team] = 0.0
            self.usage_rate[team] = 0.0
        if lost_s > 0:
            self.lost_gpu_s += lost_s * job.gpus
        placement = ";".join(f"{n}:{g}" for n, g in job.placement)
        self.schedule.append((job.id, team, job.gpus, placement, job.run_start_s, self.now, reason))
        del self.running[job.id]
        del self.running_ids[bisect.bisect_left(self.running_ids, job.id)]
        job.running_obj = None
        job.placement = ()
        job.token += 1
        job.deadline_s = None
        job.ends_in_grace = None
        job.saved = True
        self.dirty = True

    def _run_end(self, job: SimJob) -> None:
        """The end event of a run: its work done, or its run-time limit. A forgotten session whose work is done
        stays open, idle; one cut at its limit before its work was done timed out, forgotten or not."""
        if job.forgotten and not job.idle and job.remaining_s - (self.now - job.run_start_s) <= 1e-6:
            self._go_idle(job)
        else:
            self._finish(job)

    def _finish(self, job: SimJob) -> None:
        done = self.now - job.run_start_s
        job.remaining_s = max(0.0, job.remaining_s - done)
        self._end_run(job, job.remaining_s <= 1e-6)

    def _end_run(self, job: SimJob, completed: bool, immediate: bool = False) -> None:
        """The run ends on its own: its work done (``completed``) or cut at its run-time limit."""
        if not completed:
            self.counts["timeouts"] += 1
        self._stop(job, "completed" if completed else "timeout", 0.0)
        job.state = "done"
        job.completed = completed
        self._request_cycle(self.now, immediate=immediate)

    def _go_idle(self, job: SimJob) -> None:
        """A forgotten session's work is done: it keeps its GPUs, idle, until released or its max runtime."""
        job.idle = True
        job.remaining_s = 0.0
        util = job.util if job.util is not None else self.cfg.default_utilization
        self.used[job.team] -= job.gpus * util
        self._moved.add(job.team)
        job.util = 0.0
        job.running_obj = replace(job.running_obj, utilization=0.0, idle_since_s=self.now)
        self.running[job.id] = job.running_obj
        limit = run_limit_s(job.running_obj, self.contracts[job.contract])
        if limit is not None:
            self._push(max(self.now, job.run_start_s + limit), _END, job.id, job.token)
        self.dirty = True

    def _last_checkpoint(self, job: SimJob) -> float:
        k = self.cfg.checkpoint_minutes * 60
        if k <= 0:
            return job.run_start_s
        return job.run_start_s + math.floor((self.now - job.run_start_s) / k) * k

    def _preempt(self, act: Preempt) -> None:
        job = self.jobs.get(act.job_id)
        if job is None or job.state not in ("running", "preempting"):
            raise SimulationError(
                f"{self.policy.name}: Preempt of job {act.job_id!r} which is not running "
                f"({'unknown' if job is None else job.state}) at t={self.now:.0f}"
            )
        if job.state == "preempting":
            return  # already inside its grace: a repeated notice changes nothing
        self.counts["preemptions"] += 1
        first_stop = False  # the job's first preemption (a run that ends inside its grace then counts for none)
        if act.reason == "drain":
            self.counts["preemptions_drain"] += 1
        else:
            if act.reason == "debug":
                self.counts["preemptions_debug"] += 1
            elif act.reason == "turn":
                self.counts["preemptions_turn"] += 1
            first_stop = job.id not in self.preempted_ids
            self.preempted_ids.add(job.id)
        c = self.contracts[job.contract]
        # a spent team's work is always preemptible (DESIGN §4.2), whatever contract it started under
        if (act.reason != "drain" and not job.scavenger and self.in_budget.get(job.team, True)
                and self.now < job.run_start_s + c.protected_s):
            self.counts["preempted_in_protected"] += 1
        if act.grace_s > 0:
            # Checkpoint model: the job saves at the signal and loses nothing; it holds its GPUs until the save is
            # written (at most its grace). A grace shorter than the save is too short to write it: the job works on,
            # unsaved, and is stopped at the grace's end, losing the work since its last periodic checkpoint.
            # A run whose work or time limit ends inside the grace ends then, as it would have without the notice.
            own_end, own_reason = self._own_end(job, c)
            save_s = self.cfg.checkpoint_save_s
            job.saved = save_s is None or save_s <= act.grace_s
            if job.saved:
                job.remaining_s = max(0.0, job.remaining_s - (self.now - job.run_start_s))
            job.state = "preempting"
            job.deadline_s = self.now + (act.grace_s if save_s is None else min(act.grace_s, save_s))
            if own_end <= job.deadline_s:
                job.deadline_s = max(self.now, own_end)
                job.ends_in_grace = (own_reason, first_stop)
            job.token += 1
            r = self.running[job.id]
            job.running_obj = self.running[job.id] = replace(
                r, preempting=True, preempt_deadline_s=job.deadline_s,
                last_checkpoint_s=self.now if job.saved else r.last_checkpoint_s)
            self._push(job.deadline_s, _GRACE, job.id, job.token)
            self.dirty = True
        else:
            self._kill(job, "preempted")

    def _own_end(self, job: SimJob, contract) -> tuple[float, str]:
        """When, and how, the running job would end with no notice: its work done or its run-time limit."""
        limit = run_limit_s(job.running_obj, contract)
        limit_end = math.inf if limit is None else job.run_start_s + limit
        work_end = job.run_start_s + job.remaining_s  # an idle session's work is done (remaining 0)
        if job.forgotten:  # an open session ends only at its limit (its work's end just leaves it idle)
            return limit_end, "completed" if work_end <= limit_end else "timeout"
        return (work_end, "completed") if work_end <= limit_end else (limit_end, "timeout")

    def _kill(self, job: SimJob, reason: str) -> None:
        """Stop at once: the work since the last checkpoint is lost; requeue if the contract says so."""
        ckpt = self._last_checkpoint(job)
        lost = self.now - ckpt
        job.remaining_s = max(0.0, job.remaining_s - (ckpt - job.run_start_s))
        self._stop(job, reason, lost)
        if reason == "drained" and lost > 0:  # the portal refunds work lost to failures
            self.spend[job.team] -= lost * job.gpus * job.price / HOUR
            self._refunded.add(job.team)
        self._after_stop(job)

    def _after_stop(self, job: SimJob) -> None:
        c = self.contracts[job.contract]
        if c.requeue and job.remaining_s > 1e-6:
            job.runs += 1
            self._enqueue(job)
        else:
            job.state = "done"
        self._request_cycle(self.now)

    def _grace_end(self, job: SimJob) -> None:
        if job.ends_in_grace is not None:  # the run ended on its own before its grace did: the job was not stopped
            reason, first_stop = job.ends_in_grace
            if first_stop:
                self.preempted_ids.discard(job.id)
            if reason == "completed":
                job.remaining_s = 0.0
            self._end_run(job, reason == "completed", immediate=True)
            return
        if job.saved:
            self._stop(job, "preempted", 0.0)
            self._after_stop(job)
        else:
            self._kill(job, "preempted")  # its save did not fit in the grace
        self._request_cycle(self.now, immediate=True)  # the job the GPUs are held for starts now

    def _release(self, act: Release) -> None:
        job = self.jobs.get(act.job_id)
        if job is None or job.state not in ("running", "preempting"):
            raise SimulationError(f"{self.policy.name}: Release of job {act.job_id!r} which is not running")
        self.counts["releases"] += 1
        self._stop(job, "released", 0.0)
        job.state = "done"
        self._request_cycle(self.now)

    def _fail(self, node_id: str) -> None:
        node = self.nodes[node_id]
        if node.health == DOWN:
            return
        self.counts["node_failures"] += 1
        victims = [self.jobs[j] for j in sorted(self.on_node[node_id])]
        for job in victims:
            self.counts["failure_stops"] += 1
            if job.state == "preempting" and job.saved:  # already saved at its signal: nothing more is lost
                self._stop(job, "drained", 0.0)
                self._after_stop(job)
            else:  # (a job whose grace was too short for its save had not saved either)
                self._kill(job, "drained")
        self._set_health(node_id, DOWN)
        self._push(self.now + self.cfg.repair_hours * HOUR, _REPAIR, node_id)
        self._request_cycle(self.now)

    def _repair(self, node_id: str) -> None:
        self._set_health(node_id, HEALTHY)
        if self.cfg.mtbf_hours and node_id in self.fail_rng:
            t = self.now + self.fail_rng[node_id].expovariate(1.0 / (self.cfg.mtbf_hours * HOUR))
            if t < self.fail_end:
                self._push(t, _FAIL, node_id)
        self._request_cycle(self.now)

    def _set_health(self, node_id: str, health: str) -> None:
        n = self.nodes[node_id]
        if n.health == health:
            return
        if n.health == HEALTHY:
            self.healthy_gpus -= n.gpus
        if health == HEALTHY:
            self.healthy_gpus += n.gpus
            self.free[node_id] = n.gpus
        else:
            self.free[node_id] = 0
        self.nodes[node_id] = NodeState(n.id, n.gpu_type, n.gpus, health, n.debug_pool)
        self.nodes_tuple = tuple(self.nodes[i] for i in self.node_order)
        self.dirty = True

    # ---- the cycle ----------------------------------------------------------------------------------------

    def snapshot(self) -> Snapshot:
        teams = tuple(
            TeamState(
                id=t, parent=self.budgets.parent[t], grant_gpu_hours=self.budgets.grant[t],
                usage_gpu_s=self.usage[t],
                remaining_gpu_hours=self.balance(t),
            )
            for t in self.teams
        )
        # Refresh the checkpoint time of running jobs whose periodic checkpoint passed (a heap of the next one of
        # each run: entries of runs that ended or moved on are skipped).
        now = self.now
        heap, due = self.ckpt_heap, []
        while heap and heap[0][0] <= now:
            due.append(heapq.heappop(heap))
        for t, jid in due:  # pushed back after the loop: a next checkpoint may round to ``now`` itself
            job = self.jobs[jid]
            if job.state != "running" or job.next_ckpt_s != t or jid not in self.running:
                continue
            last = self._last_checkpoint(job)
            job.next_ckpt_s = last + self.cfg.checkpoint_minutes * 60
            heapq.heappush(heap, (job.next_ckpt_s, jid))
            self.running[jid] = job.running_obj = replace(self.running[jid], last_checkpoint_s=last)
        by_team = self._pending_by_team()
        return Snapshot(
            now_s=now, nodes=self.nodes_tuple, teams=teams, contracts=self.cfg.contracts,
            running=tuple(map(self.running.__getitem__, self.running_ids)), pending=self._pending(by_team),
            reservations=self.reservations, config=self.cfg.policy_config, pending_by_team=by_team,
            shortfall=self.shortfall,
        )

    def _pending(self, by_team: dict[str, tuple[PendingJob, ...]]) -> Sequence[PendingJob]:
        """Snapshot.pending: a PendingView of ``by_team`` until a policy reads one, the kept tuple from then on."""
        if self.pending_list is None:
            return PendingView(by_team, self.pending_count, self._keep_pending_order)
        if self.pending_tuple is None:
            self.pending_tuple = tuple(self.pending_list)
        return self.pending_tuple

    def _keep_pending_order(self) -> None:
        """A policy reads Snapshot.pending in order: keep the whole queue sorted from now on (as each team's)."""
        if self.pending_list is None:
            merged = sorted(zip(chain.from_iterable(self.team_keys.values()),
                                chain.from_iterable(self.team_pending.values())), key=lambda kj: kj[0])
            self.pending_keys = [k for k, _ in merged]
            self.pending_list = [j for _, j in merged]
            self.pending_tuple = None

    def _pending_by_team(self) -> dict[str, tuple[PendingJob, ...]]:
        out = {}
        for team, jobs in self.team_pending.items():
            if jobs:
                tup = self.team_tuple.get(team)
                if tup is None:
                    tup = self.team_tuple[team] = tuple(jobs)
                out[team] = tup
        return out

    def _cycle(self) -> None:
        self.cycles += 1
        self.last_cycle = self.now
        if self._charging_teams():
            self._update_budget_flags(self.now)
        plan: Plan = self.policy.plan(self.snapshot())
        for act in plan.actions:
            if isinstance(act, Start):
                self._start(act)
            elif isinstance(act, Preempt):
                self._preempt(act)
            elif isinstance(act, Release):
                self._release(act)
            elif isinstance(act, FlagSquatting):
                job = self.jobs.get(act.job_id)
                if job is not None and not job.flagged:
                    job.flagged = True
                    self.counts["squatting_flags"] += 1
                    if job.kind == "squat":
                        self.counts["squatters_flagged"] += 1
            else:
                raise SimulationError(f"{self.policy.name}: unknown action {act!r}")
        self.reservations = tuple(plan.reservations)
        self.shortfall = plan.shortfall
        if self.owed_reasons is not None:
            self.owed_reasons.after_cycle(self.team_pending, plan.waiting_code)
            self.dirty = True  # a new sample, so that each holds the reasons of one cycle

    # ---- main loop ----------------------------------------------------------------------------------------

    def run(self) -> SimResult:
        import time

        t0 = time.perf_counter()
        cfg = self.cfg
        for job in self.job_list:
            self._push(job.submit_s, _ARRIVE, job.id)
        self.fail_rng: dict[str, random.Random] = {}
        # random failures stop at the window's end or, without a window, at the last submit: a replay that runs
        # until every job has finished must not keep drawing failures (each repair draws the next one) forever
        fail_end = self.fail_end = (self.horizon if self.horizon is not None
                                    else max((j.submit_s for j in self.job_list), default=0.0))
        if cfg.mtbf_hours:
            for nid in self.node_order:
                rng = self.fail_rng[nid] = random.Random(f"fail-{cfg.seed}-{nid}")
                t = rng.expovariate(1.0 / (cfg.mtbf_hours * HOUR))
                if t < fail_end:
                    self._push(t, _FAIL, nid)
        for nid, t in cfg.failures:
            if nid not in self.nodes:
                raise ValueError(f"scripted failure on unknown node {nid!r}")
            self._push(t, _FAIL, nid)
        bar = self._progress_bar()
        with _collector_for_replay():
            end, last_bar = self._loop(bar)
        self._advance(end)
        self._flush_sample()
        for jid in list(self.running):
            self._stop(self.jobs[jid], "window_end", 0.0)
        if bar is not None:
            bar.update(max(0.0, (end - last_bar) / HOUR))
            bar.close()
        metrics = report.metrics(self, end)
        return SimResult(
            policy=self.policy.name, metrics=metrics, schedule=self.schedule, horizon_s=end, cycles=self.cycles,
            wall_s=time.perf_counter() - t0, teams=report.team_report(self, end) if cfg.per_team else None,
            timeline=self.timeline.rows(end, self.spend) if self.timeline is not None else None,
        )

    def _loop(self, bar) -> tuple[float, float]:
        """The events in time order, to the window's end: (the replay's end, the progress bar's last update)."""
        cfg = self.cfg
        last_bar = 0.0
        horizon = self.horizon
        heap = self.heap
        pop = heapq.heappop
        while heap:
            t, kind, _, what, token = heap[0]
            if horizon is not None and t >= horizon:
                break
            pop(heap)
            if kind != _CYCLE:
                self.nonfail_events -= 1
            elif horizon is None and self.next_cycle is None and self.nonfail_events == 0:
                # Only replaced cycles are left: nothing more can happen, and the window ends at the last event, not
                # at a heartbeat requested before it (the clock still moves to replaced cycles inside a replay:
                # budget exhaustion is checked when it does, and replays with --days must not change).
                break
            if t > self.now:
                self._advance(t)
                if bar is not None and t - last_bar > 3600:
                    bar.update((t - last_bar) / HOUR)
                    last_bar = t
            if kind == _END:
                job = self.jobs[what]
                if job.token == token and job.state == "running":
                    self._run_end(job)
            elif kind == _GRACE:
                job = self.jobs[what]
                if job.token == token and job.state == "preempting":
                    self._grace_end(job)
            elif kind == _ARRIVE:
                self._arrive(self.jobs[what])
            elif kind == _FAIL:
                self._fail(what)
            elif kind == _REPAIR:
                self._repair(what)
            else:
                if t != self.next_cycle:
                    continue  # superseded by an earlier request
                self.next_cycle = None
                self._cycle()
                if self.running or self.pending_count:
                    if horizon is None and self.nonfail_events == 0 and not self.running:
                        break  # nothing will ever change again: the rest can never start
                    self._request_cycle(self.now + cfg.heartbeat_s)
        return (horizon if horizon is not None else self.now), last_bar

    def _progress_bar(self):
        show = self.cfg.progress
        if show is None:
            show = sys.stderr.isatty()
        if not show:
            return None
        try:
            from tqdm import tqdm
        except ImportError:  # pragma: no cover
            return None
        total = (self.horizon or max((j.submit_s for j in self.job_list), default=0.0)) / HOUR
        return tqdm(total=round(total, 1), unit="sim-h", desc=self.policy.name, file=sys.stderr, leave=False,
                    position=self.cfg.progress_position)


__all__ = ["Simulator"]
