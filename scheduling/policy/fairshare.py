"""Hierarchical fair-share: the share tree, budgets, entitlements and the Fair-Tree order of teams.

The *share tree* is the team tree plus, for every team that has child teams, an extra leaf ``"<team>/"`` for the
team's own members (the unsplit remainder of its grant). A team without children is its own leaf. A virtual root
``""`` sits above the top-level teams.

- Local share of a node among its siblings = its grant / the sum of the siblings' grants (equal split when the
  siblings' grants sum to zero). The own leaf's grant is ``max(0, grant - sum of the children's grants)``.
- Entitlement (GPUs, float): the healthy capacity water-filled down the tree by local shares over *in-budget*
  demand (running + held + pending GPUs): a child that wants less than its share keeps only what it wants and the
  rest is shared again among its siblings (max-min fairness, per level). This is the quantity DESIGN.md §5 calls
  *entitled*, and the reference for preemption (Kueue's nominal quota, recomputed from demand).
- Standing (for ordering): per node ``E = own decayed usage of the subtree + allocated GPUs * memory_s`` where
  ``memory_s = half_life / ln 2`` (usage.memory_s): a steady allocation weighs exactly as much as a full decayed
  history of it. Siblings are ranked by ``(tier, E / share, E, id)`` with ``tier = 0`` when the node is owed at
  least half a GPU of its entitlement, else 1 (Slurm's Fair Tree ranks siblings level by level the same way, with
  ``share / usage``; the tier makes the order agree with the preemption rule so the two never fight).
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Iterable

from .types import TeamState

ROOT = ""
OWED_TOL = 0.5  # GPUs: a node is "owed" when entitled - allocated >= this


def own_leaf(team: str) -> str:
    return team + "/"


def display(node: str) -> str:
    return node[:-1] if node.endswith("/") else node


class TeamTree:
    """The share tree of one snapshot, with allocation, entitlement and standing per node (mutable in a cycle)."""

    def __init__(self, teams: Iterable[TeamState], extra_team_ids: Iterable[str], horizon_s: float,
                 claim_band: float = 0.0, structures: dict | None = None) -> None:
        """``structures``, when given, keeps the tree's shape (parents, children, grants, shares, paths) from one
        cycle to the next, keyed on every team's (id, parent, grant): it changes only when a lead edits the tree
        or a grant, and building it was a tenth of a cycle's fixed cost."""
        self.claim_band = claim_band  # see slack_too_small
        states = {t.id: t for t in sorted(teams, key=lambda t: t.id)}
        for tid in sorted(set(extra_team_ids) - set(states)):
            states[tid] = TeamState(id=tid, parent=None, grant_gpu_hours=0.0)
        self.states = states
        self.horizon_s = horizon_s
        key = tuple([(t.id, t.parent, t.grant_gpu_hours) for t in states.values()])
        shape = structures.get(key) if structures is not None else None
        if shape is None:
            shape = self._shape(states)
            if structures is not None:
                if len(structures) >= 8:
                    structures.clear()
                structures[key] = shape
        self.parent, self.children, self.grant, self.leaf, self.share, self.paths = shape
        # budget: a team is spent when its OWN balance is <= 0. remaining_gpu_hours is what the team itself can
        # still spend (grant - children's grants + its own charges): a parent's remainder belongs to its own
        # members, and one child's overspending never takes a sibling's budget.
        self.spent: dict[str, bool] = {tid: states[tid].remaining_gpu_hours <= 0 for tid in states}
        # per node state, filled by the policy; change it only through add_alloc, add_standing and
        # set_entitlements, which bump ``version`` (FairOrder keeps its last pick while the version stands)
        self.version = 0
        # the leaves whose ``alloc`` or ``standing`` changed, in order (FairOrder reads what is new since its last
        # pick), and a count of ``set_entitlements`` calls (after one, any leaf may be owed or not)
        self.changes: list[str] = []
        self.entitlements_set = 0
        self.alloc: dict[str, float] = dict.fromkeys(self.parent, 0.0)
        self.entitled: dict[str, float] = dict.fromkeys(self.parent, 0.0)
        self.nominal: dict[str, float] = dict.fromkeys(self.parent, 0.0)
        self.standing: dict[str, float] = dict.fromkeys(self.parent, 0.0)
        # GPUs of each leaf's running in-budget debug sessions (part of ``alloc``): see ``batch_alloc``
        self.sessions: dict[str, float] = {}
        for tid, t in states.items():
            for a in self.paths[self.leaf[tid]]:
                self.standing[a] += max(0.0, t.usage_gpu_s)

    @staticmethod
    def _shape(states: dict[str, TeamState]) -> tuple:
        """(parent, children, grant, leaf, share, paths) of the share tree; read-only once built."""
        team_parent: dict[str, str] = {}
        for tid, t in states.items():
            parent = t.parent if t.parent in states and t.parent != tid else ROOT
            team_parent[tid] = parent
        # Break cycles defensively (a malformed tree must not hang the policy): walk up, cut at a repeat.
        for tid in states:
            seen = {tid}
            p = team_parent[tid]
            while p != ROOT:
                if p in seen:
                    team_parent[tid] = ROOT
                    break
                seen.add(p)
                p = team_parent[p]
        kids: dict[str, list[str]] = {ROOT: []}
        for tid in states:
            kids.setdefault(team_parent[tid], []).append(tid)
        # share-tree nodes
        parent: dict[str, str] = {}
        children: dict[str, list[str]] = {ROOT: []}
        grant: dict[str, float] = {}
        leaf_of: dict[str, str] = {}  # team id -> its own-work leaf
        for tid in states:
            parent[tid] = team_parent[tid]
            children.setdefault(team_parent[tid], []).append(tid)
            grant[tid] = max(0.0, states[tid].grant_gpu_hours)
        for tid in states:
            if tid in kids and kids[tid]:
                leaf = own_leaf(tid)
                parent[leaf] = tid
                children.setdefault(tid, []).append(leaf)
                grant[leaf] = max(0.0, grant[tid] - sum(grant[c] for c in kids[tid]))
                leaf_of[tid] = leaf
            else:
                leaf_of[tid] = tid
        for p in children:
            children[p].sort()
        share: dict[str, float] = {}
        for p, cs in children.items():
            total = sum(grant[c] for c in cs)
            for c in cs:
                share[c] = grant[c] / total if total > 0 else 1.0 / len(cs)
        paths: dict[str, tuple[str, ...]] = {}
        for node in parent:
            path = []
            n = node
            while n != ROOT:
                path.append(n)
                n = parent[n]
            paths[node] = tuple(path)
        return parent, children, grant, leaf_of, share, paths

    def path(self, team: str) -> tuple[str, ...]:
        """Share-tree nodes from the team's own-work leaf up to its top-level team."""
        return self.paths[self.leaf[team]]

    def add_alloc(self, team: str, gpus: float) -> None:
        self.version += 1
        self.changes.append(self.leaf[team])
        h = gpus * self.horizon_s
        for a in self.paths[self.leaf[team]]:
            self.alloc[a] += gpus
            self.standing[a] += h

    def add_standing(self, team: str, gpus: float) -> None:
        """What a team runs outside its entitlement (scavenger work) still counts in its standing."""
        self.version += 1
        self.changes.append(self.leaf[team])
        h = gpus * self.horizon_s
        for a in self.paths[self.leaf[team]]:
            self.standing[a] += h

    def owed(self, node: str, gpus: float = 1.0) -> bool:
        """True when ``gpus`` more would keep the node within its entitlement (+ OWED_TOL)."""
        return self.alloc[node] + gpus <= self.entitled[node] + OWED_TOL

    def owed_gpus(self, node: str) -> int:
        """The largest job the node is owed whole (``owed``), 0 if none."""
        return _largest(math.floor(self.entitled[node] + OWED_TOL - self.alloc[node]), lambda g: self.owed(node, g))

    def own_gpus(self, node: str) -> int:
        """The largest job that would start as the node's own work, 0 if none: owed whole (``owed``) and within its
        guaranteed part, half of the job at most beyond it (``guaranteed``): not borrowed work."""
        room = min(self.entitled[node], self.nominal[node]) - self.alloc[node]
        return _largest(min(self.owed_gpus(node), math.floor(2 * room)),
                        lambda g: self.owed(node, g) and self._within_guaranteed(node, g))

    def team_owed(self, team: str, gpus: float) -> bool:
        return self.owed(self.leaf[team], gpus)

    def may_claim(self, node: str, gpus: float) -> bool:
        """May a job of ``gpus`` claim GPUs from others (preemption, gang reservation) for this node?

        When the node is owed the whole job; or, for a job larger than what the node is owed, when the node is
        below its share and either runs no batch work yet (its first job, whatever its size: a team owed 6 whose
        jobs all need 16; a debug session of the team does not count) or at least half of the job falls within
        its share (a 16-GPU gang of a team owed 12): else a team whose jobs are larger than its share would never
        run. The claim cannot be taken back: taking the job again would leave the team below its share.

        Beyond its nominal share, a team claims only what it is owed in sizeable steps (``slack_too_small``)."""
        if self.slack_too_small(node, gpus):
            return False
        if self.owed(node, gpus):
            return True
        if not self.owed(node, 1):
            return False
        # its first job whatever its size (a team owed 6 whose jobs all need 16 would otherwise never run; a debug
        # session it runs is not such a job), or a job at least half of which falls within its share
        return self.batch_alloc(node) < 0.5 or self.alloc[node] + gpus <= self.entitled[node] + gpus / 2

    def team_may_claim(self, team: str, gpus: float) -> bool:
        return self.may_claim(self.leaf[team], gpus)

    def slack_too_small(self, node: str, gpus: float) -> bool:
        """Would a job of ``gpus`` take the node beyond its nominal share (by more than half the job) while the
        node is owed less than ``claim_band`` of its entitlement?

        Entitlement beyond the nominal share is slack: GPUs that teams wanting less than their shares leave to the
        others. It moves every few minutes, as those teams' demand changes, and claiming each small move by
        preemption stops a job now that the next move makes another team take back (the claiming team's own job
        is borrowed work, unprotected, beyond its nominal share). So slack is claimed only while the deficit is
        at least ``claim_band`` of the entitlement; a smaller one is made up from GPUs that free up (the walk
        serves the team first). Within its nominal share a team claims whatever it is owed."""
        return (self.claim_band > 0 and self.alloc[node] + gpus > self.nominal[node] + gpus / 2 + 1e-9
                and self.entitled[node] - self.alloc[node] < self.claim_band * self.entitled[node])

    def set_entitlements(self, capacity: float, demand_by_team: dict[str, float]) -> None:
        """Water-fill ``capacity`` down the tree over the demand (GPUs) of each team's own leaf."""
        self.version += 1
        self.entitlements_set += 1
        demand = dict.fromkeys(self.parent, 0.0)
        for tid, d in demand_by_team.items():
            if d > 0:
                for a in self.paths[self.leaf[tid]]:
                    demand[a] += d
        stack = [(ROOT, capacity, capacity)]
        while stack:
            node, cap, nominal = stack.pop()
            cs = self.children.get(node)
            if not cs:
                continue
            given = water_fill(cap, [(c, self.share[c], demand[c]) for c in cs])
            for c in cs:
                self.entitled[c] = given[c]
                self.nominal[c] = nominal * self.share[c]
                stack.append((c, given[c], self.nominal[c]))

    def add_session(self, team: str, gpus: float) -> None:
        """Record a running in-budget debug session (its GPUs are added to ``alloc`` by ``add_alloc``)."""
        leaf = self.leaf[team]
        self.sessions[leaf] = self.sessions.get(leaf, 0.0) + gpus

    def batch_alloc(self, leaf: str) -> float:
        """The leaf's allocation without its running debug sessions: what the share checks on victims compare
        with the entitlement. A session counts against its team's share (the team's next batch jobs wait), but a
        surplus that lasts only as long as a session (at most a few hours) is given back as the team's batch jobs
        end, never by preempting them: preempting for it would stop one job now and, when the session ends and
        the team is below its share again, another one (docs/policy.md §6)."""
        return self.alloc[leaf] - self.sessions.get(leaf, 0.0)

    def guaranteed(self, team: str, gpus: float) -> bool:
        """Would ``gpus`` more keep the team within its guaranteed part: min(entitlement, nominal share)?

        The nominal share is the team's budget share of the healthy capacity (shares multiplied down the tree):
        what it gets when every team wants everything. Work beyond it runs on GPUs other teams may want back
        (Kueue's nominal quota and borrowing), so it starts as borrowed, without protected time. A job at least
        half of which lies within the guaranteed part is the team's own (as for a claim, ``may_claim``): jobs come
        in lumps, and an 8-GPU job of a team 2 GPUs short of its share is not borrowed work."""
        return self._within_guaranteed(self.leaf[team], gpus)

    def _within_guaranteed(self, node: str, gpus: float) -> bool:
        return self.alloc[node] + gpus <= min(self.entitled[node], self.nominal[node]) + max(OWED_TOL, gpus / 2)

    def claim_guaranteed(self, team: str, gpus: float, job_gpus: float) -> bool:
        """The same for a claim (a job started on GPUs its team preempted for): it was owed, or within half a job
        of it (``may_claim``), when planned, so it stays protected up to the nominal share plus half the job;
        protection is what keeps a claim from being taken straight back. Beyond that the team borrows: one that
        preempted its way up to a large entitlement while others were spent must not keep it all protected."""
        leaf = self.leaf[team]
        return self.alloc[leaf] + gpus <= self.nominal[leaf] + job_gpus / 2 + OWED_TOL

    def owed_paths(self, leaves: Iterable[str]) -> set[str]:
        """Every node on the path of a leaf in ``leaves`` that is owed a GPU: the walk's first tier (``rank_key``).

        The tier is *a team* being owed, not its group: preemption protects teams (leaves), so a group ranked first
        only because it is below its share as a whole, while the team of it that would be served is above its own,
        would hand GPUs to that team as borrowed work, and a team owed in another group would take them straight
        back."""
        out: set[str] = set()
        for leaf in leaves:
            if self.owed(leaf):
                out.update(self.paths[leaf])
        return out

    def rank_key(self, node: str, owed: bool) -> tuple[int, float, float, str]:
        """Fair Tree's rank among siblings: ``owed`` (a team below its entitlement with work lies under ``node``)
        first, then usage over share, usage, id."""
        share = self.share[node]
        e = self.standing[node]
        ratio = e / share if share > 0 else math.inf
        return (0 if owed else 1, ratio, e, node)


def _largest(estimate: int, fits: Callable[[int], bool]) -> int:
    """The largest size ``g >= 0`` with ``fits(g)`` (a bound that only ever refuses larger sizes), from ``estimate``,
    that bound's floor in exact arithmetic: one step either way makes up for the float sum on either side of it."""
    most = max(0, estimate)
    if most and not fits(most):
        return most - 1
    return most + 1 if fits(most + 1) else most


def water_fill(capacity: float, items: list[tuple[str, float, float]]) -> dict[str, float]:
    """Max-min fair split of ``capacity`` among (id, share, demand): nobody gets more than its demand."""
    given = {i: 0.0 for i, _, _ in items}
    active = [(i, s, d) for i, s, d in items if d > 0]
    cap = capacity
    while active and cap > 1e-9:
        total = sum(s for _, s, _ in active)
        if total <= 0:
            weights = [(i, 1.0, d) for i, _, d in active]
            total = float(len(active))
        else:
            weights = active
        saturated = [(i, s, d) for i, s, d in weights if d - given[i] <= cap * s / total + 1e-12]
        if not saturated:
            for i, s, _ in weights:
                given[i] += cap * s / total
            break
        for i, _, d in saturated:
            cap -= d - given[i]
            given[i] = d
        done = {i for i, _, _ in saturated}
        active = [x for x in active if x[0] not in done]
    return given


class FairOrder:
    """Fair-Tree walk over the leaves that still have work in one phase: rank siblings, descend.

    ``pick()`` returns the leaf to serve next; the ranking is recomputed along the way, so a start (which moves
    ``alloc``/``standing`` on the leaf's path) changes the next pick. ``drop(leaf)`` removes an exhausted leaf.
    While neither happened (the tree's ``version`` stands), ``pick()`` returns its last answer in O(1): most
    picks follow a job that did not start. The ranking is kept between picks and updated for the leaves whose
    allocation or standing changed since the last pick (``TeamTree.changes``; anew after new entitlements): the
    first tier (``TeamTree.owed_paths``: the nodes with an owed leaf with work under them) as a count per node, and
    each node's children in a heap by ``rank_key`` (an entry is pushed whenever a child's key changes, and stale
    ones are dropped when they come up), so a pick costs O(depth x log siblings) plus the changes, not a pass over
    every team and every sibling: on 150 teams the walk's picks were a third of a replay.
    """

    def __init__(self, tree: TeamTree, leaves: Iterable[str]) -> None:
        self.tree = tree
        self.last: tuple[int, str | None] | None = None  # (tree version, leaf) of the last pick
        self.count: dict[str, int] = {}
        self.leaf_count: dict[str, int] = {}
        for leaf in leaves:
            self.leaf_count[leaf] = self.leaf_count.get(leaf, 0) + 1
            for a in tree.paths[leaf]:
                self.count[a] = self.count.get(a, 0) + 1
        self.owed_leaf: dict[str, bool] = {}  # leaf with work -> owed a GPU (counted in owed_count)
        self.owed_count: dict[str, int] = {}  # node -> its owed leaves with work
        self.heaps: dict[str, list[tuple[tuple, str]]] = {}  # node -> (rank_key, child) of its children with work
        self.seen = -1  # how many of tree.changes the ranking follows (-1: none yet)
        self.entitlements_set = tree.entitlements_set

    def __bool__(self) -> bool:
        return any(self.count.get(c, 0) for c in self.tree.children[ROOT])

    def pick(self) -> str | None:
        tree = self.tree
        last = self.last
        if last is not None and last[0] == tree.version:
            return last[1]
        leaf = self._pick()
        self.last = (tree.version, leaf)
        return leaf

    def _key(self, node: str) -> tuple:
        return self.tree.rank_key(node, self.owed_count.get(node, 0) > 0)

    def _follow(self) -> None:
        """Bring the ranking up to the tree: anew after new entitlements (or at the first pick), else for the
        leaves whose allocation or standing changed since the last pick."""
        tree = self.tree
        changes = tree.changes
        count = self.count
        if self.seen < 0 or self.entitlements_set != tree.entitlements_set:
            self.entitlements_set = tree.entitlements_set
            self.seen = len(changes)
            self.owed_leaf.clear()
            self.owed_count.clear()
            for leaf, n in self.leaf_count.items():
                if n > 0:
                    self._set_owed(leaf, tree.owed(leaf), push=False)
            heaps = self.heaps
            heaps.clear()
            for node, n in count.items():
                if n > 0:
                    heaps.setdefault(tree.parent[node], []).append((self._key(node), node))
            for h in heaps.values():
                heapq.heapify(h)
            return
        todo = dict.fromkeys(changes[self.seen:])
        self.seen = len(changes)
        for leaf in todo:
            if self.leaf_count.get(leaf, 0) > 0:
                self._set_owed(leaf, tree.owed(leaf), push=False)
            self._push_path(leaf)  # (its groups' standing moved too, even when it has no work in this walk)

    def _push_path(self, leaf: str) -> None:
        """The current keys of the leaf's path (those with work) into their parents' heaps."""
        parent, count, heaps = self.tree.parent, self.count, self.heaps
        for a in self.tree.paths[leaf]:
            if count.get(a, 0) > 0:
                heapq.heappush(heaps[parent[a]], (self._key(a), a))

    def _set_owed(self, leaf: str, owed: bool, push: bool = True) -> None:
        if self.owed_leaf.get(leaf, False) == owed:
            self.owed_leaf[leaf] = owed
            return
        self.owed_leaf[leaf] = owed
        step = 1 if owed else -1
        count = self.owed_count
        for a in self.tree.paths[leaf]:
            count[a] = count.get(a, 0) + step
        if push:
            self._push_path(leaf)

    def _pick(self) -> str | None:
        node = ROOT
        tree = self.tree
        self._follow()
        count, heaps = self.count, self.heaps
        while True:
            heap = heaps.get(node)
            best = None
            while heap:
                key, c = heap[0]
                if count.get(c, 0) > 0 and key == self._key(c):
                    best = c
                    break
                heapq.heappop(heap)  # stale: a later entry holds the child's key, or it has no work left
            if best is None:
                return node if node != ROOT else None
            node = best
            if not tree.children.get(node):
                return node

    def drop(self, leaf: str) -> None:
        self.last = None
        self.leaf_count[leaf] -= 1
        for a in self.tree.paths[leaf]:
            self.count[a] -= 1
        if self.leaf_count[leaf] <= 0 and self.seen >= 0:
            self._set_owed(leaf, False)
