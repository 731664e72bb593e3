"""The ``budget`` policy: one cycle composes housekeeping, fair-share, placement, reservations and preemption.

A cycle, in order (docs/policy.md has the formulas and the reasons):

0. Housekeeping (squatting.py): drains, debug releases, squatting flags.
1. Share tree (fairshare.py): allocation of every team from its running in-budget jobs, entitlement by
   hierarchical water-filling of the healthy capacity over in-budget demand, standing from decayed usage.
2. Reservations handed back from the last cycle: dropped when stale (job gone, budget spent, node unhealthy,
   expired, or a gang reservation whose team is no longer owed); the others claim the free GPUs of their nodes
   first. A reservation whose GPUs are all free starts its job now.
2b. A turn (at most one at a time): a gang larger than what its team is owed, at the head of its team's queue,
   once its team has gone without enough of its share to pay for its protected time, gets the nodes that free
   first (once they would drain within that protected time, or the job has waited a day); their free GPUs are
   lent as borrowed work until every job still there may be taken, then those jobs are preempted for it and it
   starts protected.
3. Debug sessions of in-budget teams, in Fair-Tree order: debug pool, then any free GPU, then preemption
   (scavengers first, then batch work past its protected time of over-share teams or of the session's own team,
   shortest grace first, then the victims whose teams are left least below their shares).
4. In-budget batch work, in Fair-Tree order, each team's queue by (rank, submit time, id), in two passes
   (``config.guaranteed_first``): first the free GPUs, to the jobs that would start as their teams' own work (not
   borrowed), then every job. A job that does not fit, of a team that may claim its size, may (in the second pass;
   once per team and cycle; once more, for a smaller job, after a failed plan for a job beyond what the team is
   owed) preempt after waiting
   ``config.preempt_after_s``, once its team has gone without ``config.reclaim_after_gpu_s`` of its share
   (``Snapshot.shortfall``), else gets a gang reservation (nodes that will free first) when it needs 2+ GPUs.
5. Out-of-budget work, as scavenger, on whatever is still free: debug sessions first (they may preempt scavenger
   work only), then batch.
6. A plain-words reason for every pending job that did not start (reasons.py).
"""

from __future__ import annotations

import operator
from functools import partial

from .fairshare import TeamTree
from .placement import FreeIndex
from .preemption import Preemptor, build_victims, protected_until
from .queues import JobsById, QueueCache, TeamQueue, group
from .reasons import WaitingReasons
from .squatting import housekeeping
from .turns import TURNS, GangReservations
from .types import (
    DEBUG,
    DOWN,
    HEALTHY,
    Contract,
    PendingJob,
    Placement,
    Plan,
    Preempt,
    Reservation,
    Shortfall,
    Snapshot,
    Start,
)
from .usage import memory_s
from .walk import MAX_DEBUG_PLANS, MAX_PREEMPT_PLANS, FairTreeWalk

_UNKNOWN = Contract(name="?", protected_s=0, grace_s=0)
_id_of = operator.attrgetter("id")


class BudgetPolicy:
    """Budget-driven hierarchical fair-share with contracts, gang reservations and minimal preemption."""

    name = "budget"

    def __init__(self) -> None:
        self.queue_cache = QueueCache()  # per-team queue data kept across cycles (see queues.py)
        self.tree_shapes: dict = {}  # the share tree's shape, kept while the teams and grants stand (fairshare.py)

    def plan(self, snapshot: Snapshot) -> Plan:
        return _Cycle(snapshot, self.queue_cache, self.tree_shapes).run()


class _Cycle(WaitingReasons, GangReservations, FairTreeWalk):
    def __init__(self, snap: Snapshot, queue_cache: QueueCache | None = None, tree_shapes: dict | None = None) -> None:
        self.snap = snap
        self.queue_cache = queue_cache
        self.tree_shapes = tree_shapes
        self.now = snap.now_s
        self.cfg = snap.config
        self.contracts = {c.name: c for c in sorted(snap.contracts, key=lambda c: c.name)}
        self.scavenger = self.contracts.get(snap.config.scavenger_contract)  # its grace caps scavenger work's notice
        self.actions: list = []
        self.starts: list[Start] = []
        self.preempts: list[Preempt] = []
        self.reservations: list[Reservation] = []
        self.waiting: dict[str, str] = {}
        self.waiting_code: dict[str, str] = {}  # the same jobs -> the reason's kind (types.WAIT_CODES)
        self.started: set[str] = set()
        self.claims: dict[str, dict[str, int]] = {}  # job id -> node -> GPUs claimed now
        self.res_of: dict[str, Reservation] = {}
        self.res_job: dict[str, PendingJob] = {}  # the pending job of each reservation (for its waiting reason)
        self.lent: set[str] = set()  # nodes of a turn that is not ready yet: batch work starts there as borrowed
        self.starts_only = False  # the walk under way gives free GPUs only (walk._walk)
        self.saving: dict[str, PendingJob] = {}  # leaf -> the gang its lead ranked first, which its later jobs wait for
        self.debug_failed: set[tuple] = set()  # debug shapes no preemption could serve this cycle
        self.plans_left = {"batch": MAX_PREEMPT_PLANS, "debug": MAX_DEBUG_PLANS}
        self.team_plans: dict[str, int] = {}  # leaf -> preemption plans tried this cycle
        # leaf -> GPU types its batch plans failed on this cycle: its jobs of other types may still claim
        self.failed_types: dict[str, set[str]] = {}
        self.failed_size: dict[str, int] = {}  # leaf -> GPUs of the job whose plan failed this cycle (see walk._serve)
        self.failed_plans: list[PendingJob] = []  # batch jobs whose preemption plan failed this cycle (for reasons)
        self.fits: dict[tuple, bool] = {}  # (gpus, gpus_per_node, gpu_type) -> _can_ever_fit, for this cycle
        self.cached_by_id: dict[str, PendingJob] | None = None  # the queue cache's jobs by id (_team_queues)
        self.giant_sizes: dict[TeamQueue, frozenset[int]] = {}  # a queue -> its sizes too large for beside the headroom
        # (leaf, gpu type) -> first protection end a session could use; leaf None: of teams above their share
        self.debug_ends: dict[tuple, float] | None = None  # built on first use (_debug_ends_table)
        self.run_ends: tuple | None = None  # the running jobs' ends by node, built on first use (turns._running_ends)

    def contract(self, name: str) -> Contract:
        return self.contracts.get(name, _UNKNOWN)

    # ------------------------------------------------------------------------------------------------------
    def run(self) -> Plan:
        snap = self.snap
        nodes = sorted(snap.nodes, key=lambda n: n.id)
        running = sorted(snap.running, key=_id_of)
        by_team = self._team_queues()
        self.pending_by_id = JobsById(by_team.values(), self.cached_by_id)

        house, leaving = housekeeping(snap, self.contracts, running)
        self.actions.extend(house)

        used: dict[str, int] = {}
        team_ids = set(by_team)
        for r in running:
            team_ids.add(r.team)
            for n, k in r.placement:
                used[n] = used.get(n, 0) + k
        index = self.index = FreeIndex(nodes, used)
        self.biggest_node = max(index.maxcap.values(), default=0)
        tree = self.tree = TeamTree(snap.teams, team_ids, memory_s(self.cfg.usage_half_life_s),
                                    claim_band=self.cfg.claim_band, structures=self.tree_shapes)

        takeable, demand = self._tally_running(running, leaving, nodes, used)
        # Debug-pool GPUs kept free for the next sessions: the configured headroom (a larger session takes back a
        # loan, docs/policy.md §8). A headroom larger than the pool keeps the whole pool, no more: counted as more,
        # every batch job would seem too large to ever run beside it and might take the pool (``_giants``,
        # ``_fits_beside_headroom``).
        self.headroom = min(index.pool_gpus, self.cfg.debug_headroom_gpus)
        self.queues = self._split_queues(by_team, demand)
        debug_q, scav_debug_q, batch_q, scav_q = self.queues
        tree.set_entitlements(float(sum(index.cap.values())), demand)

        # (a function of the cycle's fixed inputs, not a method: the planner must not hold the cycle, or every
        # cycle would become a reference cycle left to the garbage collector)
        victims = partial(build_victims, takeable, self.now, index, self.scavenger)
        self.preemptor = Preemptor(self.now, tree, index, victims)
        self._take_reservations()
        self.shortfall = self._shortfall(batch_q)
        if self.cfg.gang_turns:
            self._find_savers(batch_q)
            self._turn(batch_q, takeable, leaving)

        self._walk(debug_q, "debug")
        if self.cfg.guaranteed_first:  # Kueue's admission order: within the nominal quota before borrowing (§4)
            self._walk(batch_q, "batch", own_only=True)
        self._walk(batch_q, "batch")
        self._walk(scav_debug_q, "debug-scavenger")
        self._walk(scav_q, "scavenger")

        for r in sorted(self.res_of.values(), key=lambda r: r.job_id):
            if r.job_id not in self.started:
                self.reservations.append(r)
        if self.cfg.explain:
            self._explain()
        actions = tuple(self.actions) + tuple(self.preempts) + tuple(self.starts)
        return Plan(actions=actions, reservations=tuple(self.reservations), waiting=self.waiting,
                    waiting_code=self.waiting_code,
                    shortfall=self.shortfall)

    def _tally_running(self, running: list, leaving: set[str], nodes: list,
                       used: dict[str, int]) -> tuple[list[tuple], dict[str, float]]:
        """One pass over the running jobs: every in-budget job's GPUs into its team's allocation (its sessions
        noted apart), out-of-budget work into the team's standing, and the jobs a plan may take now apart from
        those still protected (``self.protected``). Returns ``takeable`` ((running job, contract, in budget,
        ``protected_until``), see ``build_victims``) and each team's in-budget demand so far (GPUs its in-budget
        work holds on any node; its queue is added later). Jobs stopping or leaving, and jobs on a node that is
        down, are left out."""
        now, tree, index = self.now, self.tree, self.index
        # the worst health of a job's nodes: 0 all healthy, 1 one draining, 2 one down (or unknown); when every
        # node the running jobs hold is known and healthy (most cycles), it is 0 for all of them
        level = {n.id: 0 if n.health == HEALTHY else 2 if n.health == DOWN else 1 for n in nodes}
        all_healthy = not any(level.values()) and level.keys() >= used.keys()
        takeable: list[tuple] = []
        # (running job, contract, protected_until) of in-budget batch work inside its protected time (or, for a
        # repeat victim's borrowed run, inside its minimum run time)
        self.protected = protected = []
        counted_gpus: dict[str, int] = {}  # team -> GPUs of its in-budget work (added to the tree once per team)
        demand: dict[str, float] = {}
        spent = tree.spent
        contract_of = self.contracts.get
        for r in running:
            if r.preempting or r.id in leaving:
                continue
            team = r.team
            counted = not spent[team]
            if all_healthy:
                worst = 0  # (and the team's demand is its counted GPUs: set after the loop)
            else:
                if counted:
                    demand[team] = demand.get(team, 0.0) + r.gpus
                pl = r.placement
                worst = level.get(pl[0][0], 2) if len(pl) == 1 else max([level.get(n, 2) for n, _ in pl], default=0)
                if worst == 2:
                    continue
            c = contract_of(r.contract, _UNKNOWN)
            session = c.queue == DEBUG
            if counted:
                # in-budget work counts against the team's entitlement, borrowed (scavenger-started) work included
                counted_gpus[team] = counted_gpus.get(team, 0) + r.gpus
                if session:
                    tree.add_session(team, r.gpus)
            else:
                tree.add_standing(team, r.gpus)
            if worst == 0 and not session:  # sessions are never victims
                # (the common case inline: in-budget work started protected)
                until = (r.started_s + c.protected_s if counted and not r.scavenger
                         else protected_until(r, c, spent, index.pool))
                if until is None or now >= until:
                    takeable.append((r, c, counted, until))
                else:
                    protected.append((r, c, until))
        if all_healthy:  # every in-budget job counted, none skipped: the same sums, in the same team order
            demand = {team: float(gpus) for team, gpus in counted_gpus.items()}
        for team, gpus in counted_gpus.items():
            tree.add_alloc(team, gpus)
        return takeable, demand

    def _split_queues(self, by_team: dict[str, TeamQueue], demand: dict[str, float]) -> tuple[dict, dict, dict, dict]:
        """Each team's queue by leaf, split into debug and batch queues, in budget or not: (debug, out-of-budget
        debug, batch, out-of-budget batch). An in-budget team's queued GPUs are added to its ``demand``."""
        spent, leaf_of = self.tree.spent, self.tree.leaf
        debug_names = frozenset(name for name, c in self.contracts.items() if c.queue == DEBUG)
        debug_q: dict[str, TeamQueue] = {}
        batch_q: dict[str, TeamQueue] = {}
        scav_debug_q: dict[str, TeamQueue] = {}
        scav_q: dict[str, TeamQueue] = {}
        for team, q in by_team.items():
            if spent[team]:
                dq, bq = scav_debug_q, scav_q
            else:
                demand[team] = demand.get(team, 0.0) + q.demand
                dq, bq = debug_q, batch_q
            leaf = leaf_of[team]
            contracts = q.contracts()
            if contracts.isdisjoint(debug_names):
                bq[leaf] = q
            elif contracts <= debug_names:
                dq[leaf] = q
            else:
                dq[leaf], bq[leaf] = q.split(debug_names)
        return debug_q, scav_debug_q, batch_q, scav_q

    def _shortfall(self, batch_q: dict[str, TeamQueue]) -> Shortfall:
        """Every team with batch work waiting that is owed a GPU now (its holds counted), with the GPU-seconds of
        its entitlement it has gone without since it last had its share: the last cycle's sum, plus what it was
        short then times the time since. A team at its share, or with nothing waiting, starts again from zero."""
        prev = self.snap.shortfall
        before = prev.teams if prev is not None else {}
        since = max(0.0, self.now - prev.as_of_s) if prev is not None else 0.0
        tree = self.tree
        teams: dict[str, tuple[float, float]] = {}
        for leaf in batch_q:
            if tree.owed(leaf, 1):
                gone, short = before.get(leaf, (0.0, 0.0))
                teams[leaf] = (gone + short * since, tree.entitled[leaf] - tree.alloc[leaf])
        return Shortfall(self.now, teams)

    def _short_long_enough(self, leaf: str) -> bool:
        """Has the team gone without enough of its share to preempt for it (``config.reclaim_after_gpu_s``)?
        Ending jobs fill a short lump within minutes; a preemption stops someone's job for good reason only when
        they have not. Waived when the caller keeps no shortfall."""
        if self.snap.shortfall is None:
            return True
        return self.shortfall.teams.get(leaf, (0.0, 0.0))[0] >= self.cfg.reclaim_after_gpu_s

    def _team_queues(self) -> dict[str, TeamQueue]:
        """Every team's pending queue: the caller's groups (``Snapshot.pending_by_team``, through the cache), or
        one pass over ``pending`` (sorted first unless it already is in queue order)."""
        snap = self.snap
        if snap.pending_by_team is not None:
            if sum(map(len, snap.pending_by_team.values())) != len(snap.pending):
                raise ValueError("Snapshot.pending_by_team does not hold the same jobs as Snapshot.pending")
            cache = self.queue_cache if self.queue_cache is not None else QueueCache()
            out = cache.queues(snap.pending_by_team)
            self.cached_by_id = cache.by_id
            return out
        self.cached_by_id = None
        return group(snap.pending)

    # ---- reservations from the last cycle ------------------------------------------------------------------
    def _take_reservations(self) -> None:
        tree, index = self.tree, self.index
        seen: set[str] = set()
        for r in sorted(self.snap.reservations, key=lambda r: (r.since_s or 0.0, r.job_id)):
            job = self.pending_by_id.get(r.job_id)
            if job is None or r.job_id in seen or r.expires_s <= self.now:
                continue
            # a spent team reserves nothing, except the hold its debug session preempted for: dropping that hold
            # would hand the freed GPUs to batch work and make the session preempt again, cycle after cycle
            spent = tree.spent[job.team]
            if spent and not (r.kind == "hold" and self.contract(job.contract).queue == DEBUG):
                continue
            nodes = [n for n, _ in r.placement]
            if len(set(nodes)) != len(nodes) or any(n not in index.cap for n in nodes):
                continue
            types = {index.gtype[n] for n in nodes}
            if len(types) != 1 or (job.gpu_type is not None and job.gpu_type not in types):
                continue
            if sum(k for _, k in r.placement) != job.gpus or any(k <= 0 or k > index.cap[n] for n, k in r.placement):
                continue
            if job.gpus_per_node and any(k != job.gpus_per_node for _, k in r.placement):
                continue
            if r.kind in TURNS and (not self.cfg.gang_turns or not self._may_take_turns(job)
                                    or any(x.kind in TURNS for x in self.res_of.values())):
                continue  # one turn at a time (the oldest), only for a gang over several nodes or a starved job (§7)
            if r.kind == "turn-wait":  # a paid turn: it holds nothing yet (_turn picks its nodes again)
                seen.add(r.job_id)
                self._wait_turn(job, r.placement, r.since_s if r.since_s is not None else self.now)
                continue
            if any(n in self.preemptor.blocked_nodes for n in nodes):
                continue  # overlapping reservations: the older one wins
            if r.kind == "gang" and not tree.team_owed(job.team, job.gpus) and (
                    self.contract(job.contract).queue != DEBUG):
                continue  # (a session is served whatever its team's standing, §8)
            seen.add(r.job_id)
            claim = {}
            lend = r.kind == "turn"  # a turn not ready yet lends its free GPUs (_turn) instead of claiming them
            for n, k in r.placement:
                c = 0 if lend else min(index.avail[n], k)
                claim[n] = c
                if c:
                    index.take(((n, c),))
            self.claims[job.id] = claim
            self.preemptor.blocked_nodes.update(nodes)
            if lend:
                self.lent.update(nodes)
            if r.kind in ("hold", "turn-hold") and not spent:
                tree.add_alloc(job.team, job.gpus)
            if r.kind in ("gang", "turn"):
                r = Reservation(r.job_id, r.placement, self.now + self.cfg.reservation_ttl_s, r.kind,
                                r.since_s if r.since_s is not None else self.now)
            self.res_of[job.id] = r
            self.res_job[job.id] = job
        # start the ready ones only after every overlap was settled (the older reservation wins)
        for job_id, r in list(self.res_of.items()):
            claim = self.claims[job_id]
            if r.kind not in ("turn-wait", "turn") and all(claim[n] >= k for n, k in r.placement):
                job = self.pending_by_id[job_id]
                counted = r.kind in ("hold", "turn-hold")  # a hold's GPUs are already in its team's allocation
                # a gang reservation's job starts protected (its nodes were drained for it, and it was owed whole
                # when reserved); a job started on a hold is a claim, protected up to half a job beyond its
                # team's guaranteed part; a spent team's session starts as scavenger work, as it would on free GPUs;
                # a turn's job starts protected (its team's wait paid for its protected time, §7)
                scavenger = tree.spent[job.team] or (
                    r.kind == "hold" and self._borrowed(job, r.placement, 0, claim=True))
                self._start(job, r.placement, scavenger, counted=counted)

    def _reclaim(self, job_id: str, placement: Placement) -> dict[str, int]:
        """Forget the job's reservation; keep its claimed GPUs that ``placement`` uses, give the rest back.

        Returns the claimed GPUs kept per node (never more than ``placement`` asks on that node)."""
        claim = self.claims.pop(job_id, {})
        res = self.res_of.pop(job_id, None)
        if res is not None:
            self.preemptor.blocked_nodes.difference_update(n for n, _ in res.placement)
        want = dict(placement)
        kept = {n: min(c, want.get(n, 0)) for n, c in claim.items()}
        back = tuple((n, c - kept[n]) for n, c in sorted(claim.items()) if c - kept[n] > 0)
        if back:
            self.index.give(back)
        return kept

    def _borrowed(self, job: PendingJob, placement: Placement, more: int, claim: bool = False) -> bool:
        """Does a batch job start as borrowed work (no protected time, scavenger price)? When ``more`` GPUs would
        take its team above its guaranteed part min(entitlement, nominal share), or it lands on debug-pool GPUs.
        ``claim``: the job starts on GPUs its team preempted for (a hold); see below. Jobs of a gang reservation
        start protected: their nodes were drained for them, and they were owed whole when reserved."""
        if self.contract(job.contract).queue == DEBUG:
            return False
        if any(self.index.pool[n] for n, _ in placement):
            return True
        if self.lent and any(n in self.lent for n, _ in placement):
            return True  # a loan of a turn's GPUs, taken back when the turn is ready
        if claim:
            return not self.tree.claim_guaranteed(job.team, more, job.gpus)
        return not self.tree.guaranteed(job.team, more)

    def _start(self, job: PendingJob, placement: Placement, scavenger: bool, counted: bool = False) -> None:
        """Record a start. GPUs come from the job's claims first, then from the free index."""
        kept = self._reclaim(job.id, placement)
        top_up = tuple((n, k - kept.get(n, 0)) for n, k in placement if k - kept.get(n, 0) > 0)
        if top_up:
            self.index.take(top_up)
        self.starts.append(Start(job.id, placement, scavenger))
        self.started.add(job.id)
        if self.tree.spent[job.team]:
            self.tree.add_standing(job.team, job.gpus)
        elif not counted:
            self.tree.add_alloc(job.team, job.gpus)
