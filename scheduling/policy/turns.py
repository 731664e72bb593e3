"""Gang reservations and turns (docs/policy.md, section 7): the nodes that free first, held for a blocked gang.

- A gang reservation: a blocked job of 2+ GPUs that its team is owed whole gets the nodes expected to be usable
  first (within ``GANG_HORIZON_S``); their free GPUs are claimed for it as they free up.
- A turn: a gang over several nodes, larger than what its team is owed, at the head of its team's queue, once its
  team has gone without enough of its share to pay for the protected time it buys. At most one at a time; its
  nodes' free GPUs are lent as borrowed work until every job still there may be taken, then those are preempted
  for it and it starts protected.

``GangReservations`` is mixed into the budget policy's cycle (budget.py). It reads its ``snap``, ``now``,
``cfg``, ``tree``, ``index``, ``preemptor``, ``shortfall``, ``starts``, ``started``, ``pending_by_id``,
``protected``, ``biggest_node``, ``scavenger`` and ``lent``; calls its ``contract``, ``_start``, ``_could_be_victim``,
``_can_ever_fit`` and ``_shape_fits_beside_headroom``; and writes ``res_of``, ``res_job``, ``claims``, ``lent``,
``preempts`` and ``run_ends``.
"""

from __future__ import annotations

import math
import operator
from functools import partial

from .placement import node_needs
from .preemption import HOLD_SLACK_S, protected_until
from .queues import TeamQueue, shape_of
from .types import DEBUG, PendingJob, Placement, Preempt, Reservation, notice_s, run_limit_s

GANG_HORIZON_S = 3600.0  # a gang reservation is made only on nodes expected to be usable within this time
# a paid turn waiting for a short drain (holding nothing), lending its nodes until it is ready, holding them for its job
TURNS = ("turn-wait", "turn", "turn-hold")
TURN_PATIENCE_S = 24 * 3600.0  # a turn holds nodes longer than the job's protected time only after this long a wait
TURN_LEND_STOP_S = 1800.0  # a turn stops lending its free GPUs this long before it expects to be ready
# a job of one node gets a turn only after this long a wait, at the head of a team that runs no batch work
STARVED_TURN_WAIT_S = 24 * 3600.0
_id_of = operator.attrgetter("id")


class GangReservations:
    """The cycle's gang reservations and turns."""

    def _gang_reserve(self, job: PendingJob, pools: tuple[bool, ...] = (False,)) -> None:
        """Reserve the nodes (of ``pools``: outside the debug pool by default) that will free earliest (fewest
        missing GPUs first) for a blocked multi-GPU job or debug session."""
        found = self._nodes_freeing_first(job, self._could_be_victim, pools)
        if found is None or found[1] > self.now + GANG_HORIZON_S:
            return  # nothing will be usable soon: holding GPUs idle for it would waste them
        self._reserve(job, found[0], "gang")

    def _reserve(self, job: PendingJob, placement: Placement, kind: str, claim: bool = True) -> Reservation:
        """Keep the nodes of ``placement`` from other plans and claim their free GPUs for the job now (more as they
        free up; ``claim=False``: none yet)."""
        index = self.index
        claims = {}
        for n, k in placement:
            c = min(index.avail[n], k) if claim else 0
            if c:
                index.take(((n, c),))
            claims[n] = c
        self.claims[job.id] = claims
        self.preemptor.blocked_nodes.update(n for n, _ in placement)
        r = self.res_of[job.id] = Reservation(job.id, placement, self.now + self.cfg.reservation_ttl_s, kind,
                                              self.now)
        self.res_job[job.id] = job
        return r

    def _running_ends(self) -> tuple[dict[str, list[tuple]], dict[str, int]]:
        """Fixed for the cycle (built on first need): per node, (job, when its GPUs there come back by its run limit
        or its preemption deadline, when they would if a plan may take it: the end of its protected time, or None
        for a debug session, never taken; its GPUs there) for each running job on it; and per node, the running
        jobs on it that are not stopping."""
        if self.run_ends is None:
            on: dict[str, list[tuple]] = {}
            jobs_on: dict[str, int] = {}
            spent, pool, now = self.tree.spent, self.index.pool, self.now
            for r in self.snap.running:
                c = self.contract(r.contract)
                limit = run_limit_s(r, c)
                end = r.started_s + limit if limit is not None else math.inf
                if r.preempting and r.preempt_deadline_s is not None:
                    end = min(end, r.preempt_deadline_s)
                taken_end = None
                if c.queue != DEBUG:
                    until = protected_until(r, c, spent, pool)
                    taken_end = min(end, now if until is None else until)
                for n, k in r.placement:
                    on.setdefault(n, []).append((r, end, taken_end, k))
                    if not r.preempting:
                        jobs_on[n] = jobs_on.get(n, 0) + 1
            self.run_ends = (on, jobs_on)
        return self.run_ends

    def _nodes_freeing_first(self, job: PendingJob, could_take, pools: tuple[bool, ...], turn: bool = False
                             ) -> tuple[Placement, float] | None:
        """The nodes (of ``pools``) whose GPUs the job could have first, fewest missing GPUs first, and when they
        would all be usable; None if no node set of one type holds it. A running job's GPUs come back at the end
        of its run limit (its own time limit or its contract's), its preemption deadline, or, for batch work
        ``could_take`` says a plan may take, the end of its protected time. ``turn``: the nodes usable first,
        then those with the fewest jobs on them (a turn preempts every job still there when it is ready). An end
        already past is kept as it is, not raised to now: among nodes usable now, those whose occupants have been
        takeable longest come first (measured 2026-12-05: ties by node name instead preempted more on the
        synthetic labs; docs/policy-history.md §7). A node's ends are looked at only when its time is needed: with
        the fewest missing GPUs first, only on the nodes missing the fewest."""
        index, avail, now = self.index, self.index.avail, self.now
        running_on, jobs_on = self._running_ends()
        # the jobs started in this cycle: sessions to their limit, batch work past its protection
        started_on: dict[str, list[tuple[float, int]]] = {}
        if self.starts:
            jobs_on = dict(jobs_on)
            for a in self.starts:
                j = self.pending_by_id[a.job_id]
                c = self.contract(j.contract)
                limit = run_limit_s(j, c)
                end = (now + limit if limit is not None else math.inf) if c.queue == DEBUG else (
                    now if a.scavenger else now + c.protected_s)
                for n, k in a.placement:
                    started_on.setdefault(n, []).append((end, k))
                    jobs_on[n] = jobs_on.get(n, 0) + 1
        sorted_ends: dict[str, list[tuple[float, int]]] = {}  # a node's ends in order, made on first need

        def ready_at(n: str, missing: int) -> float:
            """When ``missing`` more GPUs of node ``n`` would be usable."""
            if not missing:
                return now
            order = sorted_ends.get(n)
            if order is None:
                ends = [(taken_end if taken_end is not None and could_take(r) else end, k)
                        for r, end, taken_end, k in running_on.get(n, ())]
                ends.extend(started_on.get(n, ()))
                order = sorted_ends[n] = sorted(ends)
            got, ready = 0, now
            for end, k in order:
                got += k
                ready = end
                if got >= missing:
                    break
            return ready

        best = None
        for t in index.types if job.gpu_type is None else [job.gpu_type]:
            needs = node_needs(job.gpus, job.gpus_per_node, index.maxcap[t])
            if needs is None:
                continue
            cands = []
            for key in index.keys(t, pools):
                for n in index.group_nodes[key]:
                    if n in self.preemptor.blocked_nodes:
                        continue
                    cands.append(n)
            placement: list[tuple[str, int]] = []
            used: set[str] = set()
            score = [0, 0.0]
            for need in sorted(needs, reverse=True):
                if turn:  # the nodes usable first, then those with the fewest jobs on them
                    options = []
                    for n in cands:
                        if n not in used and index.cap[n] >= need:
                            missing = max(0, need - avail[n])
                            options.append((ready_at(n, missing), jobs_on.get(n, 0), missing, n))
                else:  # fewest missing GPUs first, then the nodes usable first: only the fewest need a time
                    fewest = [(max(0, need - avail[n]), n) for n in cands if n not in used and index.cap[n] >= need]
                    least = min(fewest)[0] if fewest else 0
                    options = [(missing, ready_at(n, missing), 0, n) for missing, n in fewest if missing == least]
                if not options:
                    break
                option = min(options)
                ready, missing, n = (option[0], option[2], option[3]) if turn else (option[1], option[0], option[3])
                used.add(n)
                placement.append((n, need))
                score[0] += missing
                score[1] = max(score[1], ready)
            else:
                cand = (tuple(score), t, tuple(sorted(placement)))
                if best is None or cand < best:
                    best = cand
        if best is None:
            return None
        return best[2], best[0][1]

    # ---- turns ---------------------------------------------------------------------------------------------
    def _turn(self, batch_q: dict[str, TeamQueue], takeable: list[tuple], leaving: set[str]) -> None:
        """At most one turn at a time: a gang larger than what its team is owed, at the head of its team's queue,
        whose team's wait paid for it (``_turn_candidate``), gets the nodes that free first, once they would drain
        within the protected time it buys or it has waited ``TURN_PATIENCE_S`` ("turn-wait" until then). Until they
        are all usable, their free GPUs are lent to batch work as borrowed work; once every job still on them may be
        taken (out of its protected time, or one of those loans; never a debug session, which runs to its end, nor
        its own team's in-budget work ahead of it), they are preempted for it, its GPUs are held for it, and it
        starts protected (docs/policy.md, §7)."""
        res = next((r for r in self.res_of.values() if r.kind in TURNS), None)
        if res is None or res.kind == "turn-wait":
            job = self._turn_candidate(batch_q) if res is None else self.res_job[res.job_id]
            if job is None:
                return
            pools = (False,) if self._shape_fits_beside_headroom(shape_of(job)) else (False, True)
            found = self._nodes_freeing_first(job, partial(self._turn_may_take, job), pools, turn=True)
            if found is None or found[1] == math.inf:
                return  # (a paid turn keeps waiting)
            if found[1] - self.now > self._turn_paid_s(job) and self.now - job.submit_s < TURN_PATIENCE_S:
                # a drain longer than the protected run it buys holds the nodes from everyone's claims for long:
                # wait for a shorter one (the nodes are picked again every cycle), or until the job waited a day
                self._wait_turn(job, found[0], res.since_s if res is not None else self.now)
                return
            res = self._reserve(job, found[0], "turn", claim=False)
            self.lent.update(n for n, _ in res.placement)
        if res.kind != "turn":
            return  # holding: it starts when its victims are gone (_take_reservations)
        job = self.res_job[res.job_id]
        may_take = {r.id for r, *_ in takeable}
        since = res.since_s if res.since_s is not None else self.now
        on_node: dict[str, list] = {n: [] for n, _ in res.placement}
        for r in self.snap.running:
            if r.id in leaving:
                continue
            for n, k in r.placement:
                if n in on_node:
                    on_node[n].append((r, k))
        index = self.index
        victims: dict[str, object] = {}
        eta = self.now  # when the jobs that must still go may all be taken
        sessions_end = self.now  # when the debug sessions there are over at the latest (never taken)
        until_of: dict[str, float] | None = None
        spent, contract = self.tree.spent, self.contract
        for n, k in res.placement:
            short = k - index.avail[n] - sum(g for r, g in on_node[n] if r.preempting or r.id in victims)
            # the cheapest first: scavenger work (borrowed, the turn's loans among it, or of a team whose budget is
            # spent, as ``preemption._kept``), then the latest started; debug sessions last (never taken: the turn
            # would wait for their end)
            for r, g in sorted(on_node[n], key=lambda rk: (contract(rk[0].contract).queue == DEBUG,
                                                           not (rk[0].scavenger or spent[rk[0].team]),
                                                           -rk[0].started_s, rk[0].id)):
                if short <= 0:
                    break
                if r.preempting or r.id in victims:
                    continue
                victims[r.id] = r
                short -= g
                c = self.contract(r.contract)
                if c.queue == DEBUG:  # never taken, but over by its run limit
                    limit = run_limit_s(r, c)
                    sessions_end = max(sessions_end, math.inf if limit is None else r.started_s + limit)
                    continue
                # a loan of the turn's GPUs goes at once, as a loan of the debug pool does for a session (a
                # repeat victim's minimum run time would let loans that keep coming hold the turn off for ever)
                loan = r.scavenger and r.started_s >= since
                if not self._turn_may_take(job, r):
                    eta = math.inf
                elif not (loan or r.id in may_take):
                    if until_of is None:
                        until_of = {p.id: until for p, _, until in self.protected}
                    eta = max(eta, until_of.get(r.id, math.inf))
            if short > 0:
                eta = math.inf  # (GPUs a job started in this cycle holds)
        if eta > self.now or sessions_end > self.now:
            # a job there is still protected: the turn waits, lending its free GPUs meanwhile, but not in its last
            # half hour (loans started then would only be preempted with the rest); debug sessions there run to
            # their end, but no new one lands on its nodes then (sessions that keep coming would hold off for ever
            # a turn that needs the debug pool)
            if eta <= self.now + TURN_LEND_STOP_S:
                self._claim_free(job.id, res.placement)
                self.lent.difference_update(n for n, _ in res.placement)
            return
        # ready: preempt what must go, hold every GPU of the placement for the job
        self.lent.difference_update(n for n, _ in res.placement)
        tree = self.tree
        grace = 0
        for r in sorted(victims.values(), key=_id_of):
            g = notice_s(r, self.contract(r.contract), self.scavenger)
            grace = max(grace, g)
            self.preempts.append(Preempt(r.id, g, "turn", job.id))
            self.preemptor.taken.add(r.id)
            if not tree.spent[r.team]:
                tree.add_alloc(r.team, -r.gpus)
        claim = self._claim_free(job.id, res.placement)
        if all(claim[n] >= k for n, k in res.placement):
            self._start(job, res.placement, scavenger=False)
            return
        tree.add_alloc(job.team, job.gpus)
        self.res_of[job.id] = Reservation(job.id, res.placement, self.now + grace + HOLD_SLACK_S, "turn-hold",
                                          res.since_s)

    def _wait_turn(self, job: PendingJob, placement: Placement, since: float) -> None:
        """Keep the job's paid turn (``turn-wait``): it claims, lends and blocks nothing yet."""
        self.claims[job.id] = dict.fromkeys((n for n, _ in placement), 0)
        self.res_of[job.id] = Reservation(job.id, placement, self.now + self.cfg.reservation_ttl_s, "turn-wait",
                                          since)
        self.res_job[job.id] = job

    def _over_one_node(self, job: PendingJob) -> bool:
        """Does the job need more GPUs than one node of its type holds (a gang over several nodes)?"""
        return job.gpus > self.index.maxcap.get(job.gpu_type, self.biggest_node)

    def _may_take_turns(self, job: PendingJob) -> bool:
        """Is the job of a shape and wait that may take a turn: a gang over several nodes; or a job of 2+ GPUs on one
        node that has waited ``STARVED_TURN_WAIT_S`` (its turn is made only while its team runs no batch work,
        ``_turn_candidate``: no claim can free a whole node for it while every other team sits at its share, and
        on a busy cluster of small jobs a node rarely frees whole by itself; docs/policy.md §7)."""
        return self._over_one_node(job) or (job.gpus > 1 and self.now - job.submit_s >= STARVED_TURN_WAIT_S)

    def _starved_one_node(self, job: PendingJob, leaf: str) -> bool:
        """A job of 2+ GPUs on one node of a team that runs no batch work: the one kind of job of one node that may
        take a turn (after ``STARVED_TURN_WAIT_S``)."""
        return job.gpus > 1 and not self._over_one_node(job) and self.tree.batch_alloc(leaf) < 0.5

    def _turn_price_s(self, job: PendingJob, leaf: str) -> float:
        """The GPU-seconds of its share the team must have gone without for the job's turn: the GPUs beyond what it
        is owed, over the protected time the turn buys."""
        tree = self.tree
        owed = max(0.0, tree.entitled[leaf] - tree.alloc[leaf])
        return (job.gpus - owed) * self._turn_paid_s(job)

    def _claim_free(self, job_id: str, placement: Placement) -> dict[str, int]:
        """Claim for the job the free GPUs of ``placement`` it has not claimed yet; returns its claims."""
        index = self.index
        claim = self.claims[job_id]
        for n, k in placement:
            c = min(index.avail[n], k - claim[n])
            if c > 0:
                index.take(((n, c),))
                claim[n] += c
        return claim

    def _turn_paid_s(self, job: PendingJob) -> float:
        """The protected time a turn buys: its contract's, or the job's run limit when that is shorter."""
        c = self.contract(job.contract)
        limit = run_limit_s(job, c)
        return c.protected_s if limit is None else min(c.protected_s, limit)

    def _turn_may_take(self, job: PendingJob, r) -> bool:
        """A turn takes any running batch job out of its protected time, but its own team's in-budget work ahead of
        it in the team's order (rank, submit time, id): the team's jobs behind it started only because it could
        not (without taking them, the team's own small jobs on every node could hold a turn off for ever)."""
        tree = self.tree
        if r.scavenger or tree.spent[r.team] or tree.leaf[r.team] != tree.leaf[job.team]:
            return True
        return (r.rank, r.submit_s, r.id) > (job.rank, job.submit_s, job.id)

    def _turn_candidate(self, batch_q: dict[str, TeamQueue]) -> PendingJob | None:
        """The head job of an in-budget team's queue that is a gang over several nodes (more GPUs than a node of
        its type holds), or a job of one node that has waited a day while its team runs no batch work
        (``_may_take_turns``), larger than what its team is owed, whose turn its team paid for: the one whose team
        has gone without the most of its share."""
        best = None
        teams = self.shortfall.teams
        tree = self.tree
        for leaf, tq in batch_q.items():
            gone = teams.get(leaf)
            if gone is None or not tq.jobs:
                continue
            job = tq.jobs[0]
            if job.id in self.started or job.id in self.res_of or not self._may_take_turns(job):
                continue
            if not self._over_one_node(job) and not self._starved_one_node(job, leaf):
                continue  # (a job of one node of a team that runs batch work: the claims of §6 and natural ends)
            if tree.team_owed(job.team, job.gpus):
                continue
            if not self._can_ever_fit(shape_of(job)):
                continue
            if self._turn_paid_s(job) <= 0:
                continue  # a turn buys its protected time: a job with none would be taken straight back
            if gone[0] < self._turn_price_s(job, leaf):
                continue
            key = (-gone[0], job.id)
            if best is None or key < best[0]:
                best = (key, job)
        return None if best is None else best[1]
