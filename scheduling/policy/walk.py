"""The Fair-Tree walk of a cycle: the teams in Fair-Tree order, each team's queue in its own order, and what each
job gets: a start on free GPUs, a preemption plan (``_preempt_for``), a gang reservation, or nothing this cycle
(docs/policy.md §4-§8). A part of the budget policy's cycle (budget._Cycle), as reasons.py and turns.py are: it
reads and updates the cycle's state (the share tree, the free GPUs, the reservations, the plans left).
"""

from __future__ import annotations

from .fairshare import FairOrder
from .placement import shape_ok
from .preemption import HOLD_SLACK_S
from .queues import NextAtMost, TeamQueue, shape_of
from .turns import TURNS
from .types import DEBUG, PendingJob, Preempt, Reservation

MAX_PREEMPT_PLANS = 8  # preemption plans tried per cycle for batch jobs (each plan is O(nodes x victims))
MAX_PLANS_PER_TEAM = 1  # ... and per team (a team owed many GPUs gets them over a few cycles)
MAX_DEBUG_PLANS = 16  # and for debug sessions


class FairTreeWalk:
    """The walk's steps; the cycle (budget._Cycle) provides the state they read and change."""

    # ---- the Fair-Tree walk ----------------------------------------------------------------------------
    def _walk(self, queues: dict[str, TeamQueue], phase: str, own_only: bool = False) -> None:
        """Serve the queues' jobs in Fair-Tree order. ``own_only``: the pass before the one that serves every batch
        job (§4): free GPUs only (no preemption, no reservation), for the jobs that would start as their team's own
        work (``TeamTree.own_gpus``), a team's larger jobs of one node passed over, a larger gang over several nodes
        ending its team's turn when every job before it in the team's order has started (else it is passed over
        too: the team waits for a job ahead of it anyway)."""
        self.starts_only = own_only  # (_may_plan)
        if not queues:
            return
        index = self.index
        order = FairOrder(self.tree, sorted(queues))
        pos = dict.fromkeys(queues, 0)
        nexts: dict[str, NextAtMost] = {}
        passed: set[str] = set()  # own_only: the teams with a job passed over in this pass (not started)

        def next_at_most(leaf: str, tq: TeamQueue) -> NextAtMost:  # one per team and walk, made on first need
            at_most = nexts.get(leaf)
            if at_most is None:
                at_most = nexts[leaf] = NextAtMost(tq)
            return at_most

        max_gang = max(1, len(index.cap) // 8)
        debug_phase = phase in ("debug", "debug-scavenger")
        headroom = self.headroom  # batch work leaves this much of the debug pool free
        while True:
            leaf = order.pick()
            if leaf is None:
                break
            tq = queues[leaf]
            q = tq.jobs
            i = pos[leaf]
            if i >= len(q):
                order.drop(leaf)
                continue
            cap = None
            if own_only:
                # the team's next job that would start as its own work; but a gang over several nodes beyond that
                # keeps its place (its team's smaller jobs would fill the share its claims and turns wait for, §7),
                # unless a job ahead of it was passed over in this pass (``passed``: the team waits for that anyway)
                cap = self.tree.own_gpus(leaf)
                if tq.gpus[i] > cap:
                    nxt = None
                    if cap >= 1 and (leaf in passed or not self._over_one_node(q[i])):
                        nxt = next_at_most(leaf, tq)(i, cap)
                    if nxt is None:
                        order.drop(leaf)
                        continue
                    i = nxt
                    passed.add(leaf)
            free = (index.max_free_of_one_type() if debug_phase or not index.has_pool
                    else index.max_free_for_batch(headroom))
            if tq.gpus[i] > free:
                # the team's next job fits on no free GPUs: go straight to its next job that can do something now
                # (the walk costs O(teams x sizes) on a full cluster, not O(pending))
                at_most = next_at_most(leaf, tq)
                giants = frozenset() if debug_phase or not index.has_pool else self._giants(tq, free)
                if cap is not None:
                    giants = frozenset(g for g in giants if g <= cap)
                nxt = self._next_to_serve(tq, at_most, i, free, leaf, phase, giants, cap)
                if nxt is None:
                    order.drop(leaf)
                    continue
                if nxt > i:
                    passed.add(leaf)
                i = nxt
            job = q[i]
            if phase == "batch" and i and job.rank > q[0].rank and leaf in self.saving and q[0].id not in self.started:
                order.drop(leaf)  # the team saves its share for the gang its lead ranked first
                continue
            pos[leaf] = i + 1
            if job.id in self.started:
                continue
            res = self.res_of.get(job.id)
            if res is not None and res.kind in ("hold", *TURNS):
                passed.add(leaf)
                continue  # waits for its held or reserved GPUs (explained later)
            self._serve(job, phase, leaf, max_gang)
            if own_only and job.id not in self.started:
                passed.add(leaf)

    def _find_savers(self, batch_q: dict[str, TeamQueue]) -> None:
        """The teams that hold their later jobs behind their first one (``saving``): those whose lead ranked a job
        of 2+ GPUs first (a lower ``rank`` than the jobs behind it). Smaller jobs that started meanwhile would keep
        the team at its share, and a team at its share never claims GPUs for the job nor pays for its turn (§6-§7):
        on a busy cluster a freed GPU goes to the next small job, and a node rarely frees whole by itself."""
        for leaf, tq in batch_q.items():
            head = tq.jobs[0]
            if head.gpus > 1 and tq.jobs[-1].rank > head.rank:
                self.saving[leaf] = head

    def _giants(self, tq: TeamQueue, free: int) -> frozenset[int]:
        """The sizes of the team's queue above ``free`` (the most batch work may take of one type) that may still
        start now: a job too large to ever run beside the debug pool's headroom may take the headroom too
        (``_serve``), up to every free GPU of one type."""
        if tq.sizes()[-1] <= free:
            return frozenset()
        free_all = self.index.max_free_of_one_type()
        if free_all <= free:
            return frozenset()
        sizes = self.giant_sizes.get(tq)
        if sizes is None:  # (the capacities and the headroom do not change within a cycle)
            sizes = self.giant_sizes[tq] = frozenset(
                shape[0] for shape in tq.shapes() if not self._shape_fits_beside_headroom(shape))
        return frozenset(g for g in sizes if free < g <= free_all) if sizes else sizes

    def _next_to_serve(self, tq: TeamQueue, at_most: NextAtMost, i: int, free: int, leaf: str,
                       phase: str, giants: frozenset[int] = frozenset(), cap: int | None = None) -> int | None:
        """The first position ``>= i`` of the team's queue whose job ``_serve`` could do anything with, given that
        the job at ``i`` fits on no free GPUs (``free``: the most of one type), or None. A job that does not fit
        can only try a preemption plan or a gang reservation, which a batch job may do only while its team may
        plan (``_may_plan``) and may claim its size (``may_claim``, a bar that only grows with the size), and not
        for a GPU type its team's plans failed on this cycle. Nothing changes while the walk passes over jobs that
        can do nothing, so skipping them is the same as serving them one by one. ``giants`` (``_giants``): sizes
        above ``free`` that may start now all the same. ``cap``: no job larger than this (the pass of the teams' own
        work)."""
        if phase in ("debug", "debug-scavenger"):
            # sessions (few): every one may try a plan while the phase may plan
            if self._may_plan(leaf, phase) or at_most(i, free) is not None:
                return i
            return None
        reach = free
        if phase == "batch" and self._may_plan(leaf, phase):
            reach = max(free, self._claim_reach(leaf, tq))
        if leaf in self.failed_size:  # after a failed plan, only smaller jobs may try one
            reach = max(free, min(reach, self.failed_size[leaf] - 1))
        if cap is not None:
            reach = min(reach, cap)
        failed = self.failed_types.get(leaf) if reach > free else None
        while True:
            i = at_most(i, reach, giants)
            if (i is None or not failed or tq.gpus[i] <= free or tq.gpus[i] in giants
                    or tq.jobs[i].gpu_type not in failed):
                return i
            # a job its team may claim for, of a type its plans failed on: the next that fits, or of another type
            found = [k for k in (at_most(i, free, giants), tq.next_not_of(i, failed)) if k is not None]
            if not found:
                return None
            i = min(found)

    def _claim_reach(self, leaf: str, tq: TeamQueue) -> int:
        """The largest size of the team's queue it may claim for now (``may_claim``), 0 if none: its bars only
        grow with the size, so every job up to that size may claim and none beyond."""
        reach = 0
        for size in tq.sizes():
            if not self.tree.may_claim(leaf, size):
                break
            reach = size
        return reach

    def _may_plan(self, leaf: str, phase: str) -> bool:
        """May this team still try a preemption plan in this cycle?"""
        if phase == "scavenger" or self.starts_only:
            return False
        if phase == "batch":
            # a team that may claim for no 1-GPU job may claim for none (both of may_claim's bars grow with size)
            return (self.plans_left["batch"] > 0 and self.team_plans.get(leaf, 0) < MAX_PLANS_PER_TEAM
                    and self.tree.may_claim(leaf, 1))
        return self.plans_left["debug"] > 0

    def _serve(self, job: PendingJob, phase: str, leaf: str, max_gang: int) -> None:
        tree, index = self.tree, self.index
        if self._never_fits(job):
            self._wait(job.id, "never-fits", self._never_fits_reason(job))
            return
        debug = phase in ("debug", "debug-scavenger")
        if debug and job.gpus > self.cfg.debug_max_gpus:
            self._wait(job.id, "debug-too-large", f"debug sessions are limited to {self.cfg.debug_max_gpus} GPUs; "
                                                  f"this one asks for {job.gpus}: submit it as a batch job")
            return
        anywhere: frozenset[str] = frozenset()
        if debug:
            tries = (((True,), anywhere), ((False,), anywhere))
            if self.lent:
                # a session is never a turn's victim: on a turn's lent GPUs it would hold the turn off for up to its
                # hours, so it goes there only when no other free GPU fits it (still before any preemption)
                lent = frozenset(self.lent)
                tries = tuple((pools, lent) for pools, _ in tries) + tries
        else:
            tries = (((False,), anywhere),) + ((((False, True), anywhere),) if index.has_pool else ())
        shape = job.gpus_per_node
        if debug and shape is None and not self._over_one_node(job):
            shape = job.gpus  # an interactive session runs on one machine (its preemption plans free one node too)
        for pools, avoid in tries:
            pl = index.place(job.gpus, shape, job.gpu_type, pools, avoid)
            if pl is not None and not debug and True in pools:
                # A loan of debug-pool GPUs must leave the headroom free for the next debug sessions. A job of
                # one node waits for room; a gang over several nodes is placed around the headroom (its packed
                # placement may take a whole pool node where other nodes had room), and only a gang too large to
                # ever run beside it may take it too (a loan, which a session takes back; kept from it, such a
                # gang would never start, even on an empty cluster).
                if sum(k for n, k in pl if index.pool[n]) > index.lendable_pool(self.headroom):
                    around = None
                    if self._over_one_node(job):
                        around = index.place_lending(job.gpus, job.gpus_per_node, job.gpu_type, self.headroom)
                        if around is None and not self._fits_beside_headroom(job):
                            around = pl
                    pl = around
            if pl is not None:
                # Borrowed work (Kueue's borrowing): a batch job that takes its team above its entitlement, or
                # sits on debug-pool GPUs, runs on GPUs nobody owed wants, without protected time, so that it
                # can be reclaimed the moment a team below its share needs them.
                borrowed = phase == "batch" and self._borrowed(job, pl, job.gpus)
                self._start(job, pl, scavenger=phase in ("scavenger", "debug-scavenger") or borrowed)
                return
        if phase == "scavenger" or not self._may_plan(leaf, phase):
            return
        if phase == "batch" and not tree.team_may_claim(job.team, job.gpus):
            return
        if not debug and job.gpu_type in self.failed_types.get(leaf, ()):
            return
        if not debug and job.gpus >= self.failed_size.get(leaf, job.gpus + 1):
            return  # as large as the job whose plan failed this cycle: its plan would fail too
        kind = "debug" if debug else "batch"
        if debug or (self.now - job.submit_s >= self.cfg.preempt_after_s and self._short_long_enough(leaf)):
            self.plans_left[kind] -= 1
            tried = self.team_plans.get(leaf, 0)
            self.team_plans[leaf] = tried + 1
            if self._preempt_for(job, debug, only_scavengers=phase == "debug-scavenger"):
                return
            if not debug:
                self.failed_plans.append(job)
                if job.gpu_type is not None and len(index.types) > 1:
                    # a job of one GPU type found no victims of that type: the team's jobs of other types may
                    # (one blocked type must not hold the team's claims on the others)
                    self.team_plans[leaf] = tried
                    self.failed_types.setdefault(leaf, set()).add(job.gpu_type)
                elif job.gpus > 1 and leaf not in self.failed_size and not tree.owed(leaf, job.gpus):
                    # A job larger than what its team is owed found no plan (it needed a node freed whole, say,
                    # and the team's own jobs sit on every node): it must not hold back the claims of the team's
                    # smaller jobs for the share the team is owed. The team may try once more this cycle, for a
                    # job smaller than this one. (A job the team is owed whole keeps the team's claims: its smaller
                    # jobs would fill the share it waits for.) docs/policy.md §6.
                    self.team_plans[leaf] = tried
                    self.failed_size[leaf] = job.gpus
                else:
                    self.team_plans[leaf] = MAX_PLANS_PER_TEAM  # one failed plan: the next would fail too
        elif not debug:
            self.team_plans[leaf] = MAX_PLANS_PER_TEAM  # queue order is by submit: the rest waited less
        if job.gpus < 2 or job.id in self.res_of:
            return
        if phase == "debug":
            # A session that found no plan (every job it could take is protected) reserves the node that frees
            # first, as a blocked gang does: else each GPU freed there goes to new batch work, protected in turn,
            # and a session of several GPUs waits for hours (§8). On the debug pool, where there is one.
            if self._gangs(sessions=True) < max_gang:
                self._gang_reserve(job, pools=(True,) if self.index.has_pool else (False,))
        elif phase == "batch" and tree.team_owed(job.team, job.gpus):
            # GPUs held idle for a gang are worth it only for a job its team is owed whole
            if self._gangs(sessions=False) < max_gang:
                self._gang_reserve(job)

    def _gangs(self, sessions: bool) -> int:
        """The cycle's gang reservations for debug sessions (``sessions``) or for batch jobs: each kind has its own
        ``max_gang``, so that sessions never take the reservations of blocked gangs."""
        return sum(1 for jid, r in self.res_of.items()
                   if r.kind == "gang" and (self.contract(self.res_job[jid].contract).queue == DEBUG) == sessions)

    def _could_be_victim(self, r) -> bool:
        """Could the planner take this running job once its protection ends? Out-of-budget work yes; in-budget
        work only while its team stays at or above its share without it. A reservation counts on a node's GPUs
        coming back only through jobs that end or can be taken, else it would hold freed GPUs idle for hours."""
        tree = self.tree
        if tree.spent[r.team]:
            return True
        leaf = tree.leaf[r.team]
        # (with the team's debug sessions counted: a session's surplus goes away within hours, when it ends)
        return tree.alloc[leaf] - r.gpus >= tree.entitled[leaf] - 1e-9

    def _fits_beside_headroom(self, job: PendingJob) -> bool:
        return self._shape_fits_beside_headroom(shape_of(job))

    def _shape_fits_beside_headroom(self, shape: tuple) -> bool:
        """``FreeIndex.fits_beside_headroom`` for a job shape (``shape_of``), memoised for the cycle."""
        key = ("headroom", *shape)
        fits = self.fits.get(key)
        if fits is None:
            fits = self.fits[key] = self.index.fits_beside_headroom(*shape, self.headroom)
        return fits

    def _never_fits(self, job: PendingJob) -> bool:
        return not self._can_ever_fit(shape_of(job))

    def _can_ever_fit(self, shape: tuple) -> bool:
        """Whether some set of healthy nodes of one GPU type could hold a job of this shape (``shape_of``),
        memoised: the capacities do not change within a cycle."""
        fits = self.fits.get(shape)
        if fits is None:
            fits = self.fits[shape] = self._can_ever_fit_shape(*shape)
        return fits

    def _can_ever_fit_shape(self, gpus: int, gpus_per_node: int | None, gpu_type: str | None) -> bool:
        if not shape_ok(gpus, gpus_per_node):
            return False
        idx = self.index
        for t in idx.types if gpu_type is None else [gpu_type]:
            if t not in idx.maxcap:
                continue
            nodes = [n for key in idx.keys(t, (False, True)) for n in idx.group_nodes[key]]
            if gpus_per_node:
                if sum(1 for n in nodes if idx.cap[n] >= gpus_per_node) * gpus_per_node >= gpus:
                    return True
            elif sum(idx.cap[n] for n in nodes) >= gpus:
                return True
        return False

    # ---- preemption and gang reservations --------------------------------------------------------------------
    def _plan_shape(self, job: PendingJob, only_scavengers: bool) -> tuple:
        """What a session's preemption plan depends on: one that failed fails for every session of that shape of
        the same team in the cycle (``debug_failed``)."""
        return job.gpus, job.gpus_per_node, job.gpu_type, only_scavengers, self.tree.leaf[job.team]

    def _preempt_for(self, job: PendingJob, debug: bool, only_scavengers: bool = False) -> bool:
        own = dict(self.claims.get(job.id, {}))
        pools = (True, False) if debug else (False,)
        memo = self._plan_shape(job, only_scavengers)
        if debug and memo in self.debug_failed:
            return False
        found = self.preemptor.plan(job.gpus, job.gpus_per_node, job.gpu_type, job.team, debug, pools, own,
                                    only_scavengers)
        if found is None:
            if debug:
                self.debug_failed.add(memo)
            return False
        placement, victims = found
        if not victims:
            self._start(job, placement,
                        scavenger=only_scavengers or self._borrowed(job, placement, job.gpus, claim=True))
            return True
        tree, index = self.tree, self.index
        kept = self._reclaim(job.id, placement)
        claim = {}
        for n, k in placement:
            c0 = kept.get(n, 0)
            c = min(index.avail[n], k - c0)
            if c > 0:
                index.take(((n, c),))
            claim[n] = c0 + c
        self.claims[job.id] = claim
        self.preemptor.commit(victims)
        self.preemptor.blocked_nodes.update(n for n, _ in placement)
        reason = "debug" if debug else "fair-share"
        if only_scavengers:
            reason = "debug"
        for v in victims:
            self.preempts.append(Preempt(v.id, v.grace_s, reason, job.id))
            if v.counted:
                tree.add_alloc(v.team, -v.gpus)
        tree.add_alloc(job.team, job.gpus)
        grace = max(v.grace_s for v in victims)
        self.res_of[job.id] = Reservation(job.id, placement, self.now + grace + HOLD_SLACK_S, "hold", self.now)
        self.res_job[job.id] = job
        return True
