"""The pending queue, team by team: queue order, grouping, and what a cycle derives from each team's queue.

A team's queue is in *queue order*: by (rank, submit_s, id). Grouping every pending job by team is the only part of
a cycle that costs O(pending), so it is done once, in one pass, or not at all: a caller that already keeps its
queue per team (the simulator) hands the groups over as ``Snapshot.pending_by_team``, and :class:`QueueCache`
keeps what it derived from each team's tuple for as long as the caller hands over that same tuple (a team whose
queue did not change since the last cycle costs O(1)).
"""

from __future__ import annotations

import operator
from bisect import bisect_left
from collections.abc import Iterable, Iterator, Mapping, Sequence
from itertools import compress, count, islice

from .types import PendingJob

sort_key = operator.attrgetter("rank", "submit_s", "id")  # queue order (C-speed key)
_rank_of = operator.attrgetter("rank")
_submit_of = operator.attrgetter("submit_s")
_id_of = operator.attrgetter("id")
shape_of = operator.attrgetter("gpus", "gpus_per_node", "gpu_type")  # what decides where a job can ever fit


def queue_sorted(jobs: Iterable[PendingJob]) -> list[PendingJob]:
    """``sorted(jobs, key=sort_key)``, as stable sorts on one field each (comparing floats or ints is much cheaper
    than comparing key tuples): by id, by submit time, then by rank when the ranks differ. The id sort only orders
    equal submit times, so it is skipped when none are equal (then no string is compared at all); it is kept when
    a submit time is NaN (no order at all), so that the result does not depend on the order the jobs came in."""
    out = list(jobs)
    subs = [j.submit_s for j in out]
    total = sum(subs)
    if total != total or len(set(subs)) != len(subs):
        out.sort(key=_id_of)
    out.sort(key=_submit_of)
    ranks = [j.rank for j in out]
    if ranks and ranks.count(ranks[0]) != len(ranks):
        out.sort(key=_rank_of)
    return out


def in_queue_order(jobs: Sequence[PendingJob]) -> bool:
    """Whether ``jobs`` are already sorted by ``sort_key``: one rank, non-decreasing submit times, ids rising where
    submit times tie. Half the cost of ``sorted`` on a sorted queue, which builds a key tuple per job."""
    n = len(jobs)
    if n < 2:
        return True
    ranks = [j.rank for j in jobs]  # (comprehensions beat map(attrgetter) on CPython 3.11: specialised LOAD_ATTR)
    if ranks.count(ranks[0]) != n:
        return False
    subs = [j.submit_s for j in jobs]
    total = sum(subs)
    if total != total or subs != sorted(subs):
        return False  # out of order, or a NaN submit time (no order at all): the sort decides
    for i in compress(count(), map(operator.eq, subs, islice(subs, 1, None))):
        if jobs[i].id > jobs[i + 1].id:
            return False
    return True


class TeamQueue:
    """One team's pending jobs in queue order, with their GPU counts (``gpus[i]`` is ``jobs[i].gpus``)."""

    __slots__ = ("jobs", "gpus", "demand", "_contracts", "_ids", "_split", "_at_type", "_sizes", "_shapes")

    def __init__(self, jobs: Sequence[PendingJob], gpus: list[int] | None = None) -> None:
        """``gpus``, when given, must be the jobs' GPU counts (a split passes them on)."""
        self.jobs = jobs
        self.gpus = [j.gpus for j in jobs] if gpus is None else gpus
        self.demand = sum(self.gpus)
        self._contracts: frozenset[str] | None = None
        self._ids: list[str] | None = None
        self._split: tuple | None = None
        self._at_type: dict[str | None, list[int]] | None = None
        self._sizes: list[int] | None = None
        self._shapes: frozenset[tuple] | None = None

    def sizes(self) -> list[int]:
        """The distinct GPU counts the queue's jobs ask for, ascending (at C speed; kept with the queue)."""
        if self._sizes is None:
            self._sizes = sorted(set(self.gpus))
        return self._sizes

    def shapes(self) -> frozenset[tuple]:
        """The distinct job shapes (``shape_of``) of the queue (kept with the queue; a set comprehension builds the
        key tuples 40% faster than ``map(shape_of, ...)``)."""
        if self._shapes is None:
            self._shapes = frozenset({(j.gpus, j.gpus_per_node, j.gpu_type) for j in self.jobs})
        return self._shapes

    def next_not_of(self, i: int, types: set[str]) -> int | None:
        """The first position ``>= i`` whose job asks for none of these GPU types (a job of any type counts as
        none of them), or None. O(types x log n): the positions of each type are kept with the queue."""
        at_type = self._at_type
        if at_type is None:
            at_type = self._at_type = {}
            for k, j in enumerate(self.jobs):
                at_type.setdefault(j.gpu_type, []).append(k)
        best = None
        for t, positions in at_type.items():
            if t in types:
                continue
            k = bisect_left(positions, i)
            if k < len(positions) and (best is None or positions[k] < best):
                best = positions[k]
        return best

    def contracts(self) -> frozenset[str]:
        if self._contracts is None:
            self._contracts = frozenset({j.contract for j in self.jobs})
        return self._contracts

    def ids(self) -> list[str]:
        if self._ids is None:
            self._ids = [j.id for j in self.jobs]
        return self._ids

    def split(self, contracts: frozenset[str]) -> tuple[TeamQueue, TeamQueue]:
        """(the jobs under these contracts, the others), each a queue in queue order; kept with this queue."""
        if self._split is None or self._split[0] != contracts:
            mask = [j.contract in contracts for j in self.jobs]  # the one pass; the rest at C speed
            inside = TeamQueue(list(compress(self.jobs, mask)), list(compress(self.gpus, mask)))
            mask = [not m for m in mask]
            outside = TeamQueue(list(compress(self.jobs, mask)), list(compress(self.gpus, mask)))
            self._split = (contracts, inside, outside)
        return self._split[1], self._split[2]


def group(pending: Iterable[PendingJob]) -> dict[str, TeamQueue]:
    """Every team's queue, by team name: one pass buckets the jobs by team, then each team's jobs are sorted into
    queue order unless they already are in it (sorting each team's jobs apart costs a smaller log factor than
    sorting all of them)."""
    jobs_of: dict[str, list[PendingJob]] = {}
    for j in pending:
        q = jobs_of.get(j.team)
        if q is None:
            q = jobs_of[j.team] = []
        q.append(j)
    return {team: TeamQueue(jobs if in_queue_order(jobs) else queue_sorted(jobs))
            for team, jobs in sorted(jobs_of.items())}


class QueueCache:
    """:class:`TeamQueue` of each tuple of ``Snapshot.pending_by_team``, kept from one cycle to the next while the
    caller hands over the same tuple object (tuples are immutable, so the same object means the same queue). Each
    entry holds its tuple, so an id is never reused while cached; only the last cycle's tuples are kept."""

    def __init__(self) -> None:
        self._last: dict[int, TeamQueue] = {}

    def queues(self, groups: Mapping[str, Sequence[PendingJob]]) -> dict[str, TeamQueue]:
        last = self._last
        kept: dict[int, TeamQueue] = {}
        out: dict[str, TeamQueue] = {}
        for team in sorted(groups):
            jobs = groups[team]
            if not jobs:
                continue
            key = id(jobs)
            q = last.get(key)
            if q is None or q.jobs is not jobs:
                q = TeamQueue(jobs)
            kept[key] = out[team] = q
        self._last = kept
        return out


class JobsById(Mapping):
    """The pending jobs by id (ids are unique). A cycle looks up only the few jobs its reservations name: the first
    ``SCANS`` look-ups scan the queues' id lists at C speed (each list kept with its queue across cycles); more
    look-ups, or iteration, build a dict of every pending job."""

    SCANS = 8

    def __init__(self, queues: Iterable[TeamQueue]) -> None:
        self.queues = list(queues)
        self.scans = 0
        self.by_id: dict[str, PendingJob] | None = None

    def __getitem__(self, job_id: str) -> PendingJob:
        if self.by_id is None and self.scans < self.SCANS:
            self.scans += 1
            for q in self.queues:
                try:
                    return q.jobs[q.ids().index(job_id)]
                except ValueError:
                    continue
            raise KeyError(job_id)
        return self._dict()[job_id]

    def _dict(self) -> dict[str, PendingJob]:
        if self.by_id is None:
            self.by_id = {j.id: j for q in self.queues for j in q.jobs}
        return self.by_id

    def __iter__(self) -> Iterator[str]:
        return iter(self._dict())

    def __len__(self) -> int:
        return len(self._dict())


class NextAtMost:
    """``next(i, gpus, also)``: the first position ``>= i`` of a queue whose job asks for at most ``gpus`` GPUs, or
    for a size in ``also``, or None, for the positions of one walk over the queue (``i`` never decreasing). The job
    at ``i`` answers in O(1); else each distinct size asked for keeps where it next occurs, found by ``list.index``
    at C speed, so a walk costs O(sizes x n) C-speed steps at worst, however often it asks."""

    __slots__ = ("queue", "gpus", "at", "last")

    def __init__(self, queue: TeamQueue) -> None:
        self.queue = queue
        self.gpus = queue.gpus
        self.at: dict[int, int] = {}  # size -> its first position >= the last i asked for (len(gpus): none)
        self.last = 0

    def __call__(self, i: int, gpus: float, also: frozenset[int] = frozenset()) -> int | None:
        g = self.gpus
        n = len(g)
        if i < n and (g[i] <= gpus or g[i] in also):
            return i
        if gpus < 1 and not also:
            return None  # (a job of no GPUs could never start anyway: see shape_ok; spares the sizes, a pass)
        if i < self.last:
            self.at.clear()
        self.last = i
        best = n
        top = max(also, default=0)
        for size in self.queue.sizes():
            if size > gpus and size not in also:
                if size > top:
                    break
                continue
            p = self.at.get(size, -1)
            if p < i:
                try:
                    p = g.index(size, i)
                except ValueError:
                    p = n
                self.at[size] = p
            if p < best:
                best = p
        return best if best < n else None
