"""Placement: the free-GPU index, best-fit packing, gang shapes and reservation holds.

Only HEALTHY nodes are in the index. ``avail[n]`` = GPUs of ``n`` not used by a running job (preempting jobs still
use theirs) and not claimed by a reservation. Nodes are grouped by (GPU type, debug pool) and, inside a group,
bucketed by ``avail`` so best-fit is O(node size), not O(nodes).

Packing rules (docs/policy.md, "Placement"):
- a job never spans GPU types and gets exactly the GPUs it asked for;
- ``gpus_per_node`` set: ``gpus / gpus_per_node`` distinct nodes with that many GPUs each, fullest nodes first;
- free shape, fits one node: the node with the fewest available GPUs that still fits (best fit), so whole nodes
  stay whole for whole-node jobs; if no single node fits, the largest free chunks (fewest nodes);
- free shape, larger than a node: whole free nodes, then the remainder best-fit, else the largest chunks.
"""

from __future__ import annotations

from .types import HEALTHY, NodeState, Placement


def node_needs(gpus: int, gpus_per_node: int | None, node_cap: int) -> list[int] | None:
    """GPUs needed per node for a *packed* placement on nodes of ``node_cap`` GPUs (None: impossible)."""
    if gpus <= 0 or node_cap <= 0:
        return None
    if gpus_per_node:
        if gpus_per_node > node_cap or gpus % gpus_per_node:
            return None
        return [gpus_per_node] * (gpus // gpus_per_node)
    if gpus <= node_cap:
        return [gpus]
    needs = [node_cap] * (gpus // node_cap)
    if gpus % node_cap:
        needs.append(gpus % node_cap)
    return needs


def shape_ok(gpus: int, gpus_per_node: int | None) -> bool:
    return gpus > 0 and (not gpus_per_node or (gpus_per_node > 0 and gpus % gpus_per_node == 0))


class FreeIndex:
    """Available GPUs per healthy node, with best-fit queries. Mutated as the plan starts jobs."""

    def __init__(self, nodes: list[NodeState], used: dict[str, int]) -> None:
        self.cap: dict[str, int] = {}
        self.gtype: dict[str, str] = {}
        self.pool: dict[str, bool] = {}
        self.avail: dict[str, int] = {}
        self.maxcap: dict[str, int] = {}
        self.total: dict[tuple[str, bool], int] = {}
        self.type_total: dict[str, int] = {}  # free GPUs per type, debug pool included
        self.buckets: dict[tuple[str, bool], list[set[str]]] = {}
        self.group_nodes: dict[tuple[str, bool], list[str]] = {}
        healthy = sorted((n for n in nodes if n.health == HEALTHY and n.gpus > 0), key=lambda n: n.id)
        for n in healthy:
            self.maxcap[n.gpu_type] = max(self.maxcap.get(n.gpu_type, 0), n.gpus)
        for n in healthy:
            key = (n.gpu_type, bool(n.debug_pool))
            if key not in self.buckets:
                self.buckets[key] = [set() for _ in range(self.maxcap[n.gpu_type] + 1)]
                self.total[key] = 0
                self.group_nodes[key] = []
            a = max(0, n.gpus - used.get(n.id, 0))
            self.cap[n.id] = n.gpus
            self.gtype[n.id] = n.gpu_type
            self.pool[n.id] = bool(n.debug_pool)
            self.avail[n.id] = a
            self.buckets[key][a].add(n.id)
            self.total[key] += a
            self.type_total[n.gpu_type] = self.type_total.get(n.gpu_type, 0) + a
            self.group_nodes[key].append(n.id)
        self.types = sorted(self.maxcap)
        self.has_pool = any(p for _, p in self.buckets)
        self.pool_free = sum(a for (_, p), a in self.total.items() if p)  # free debug-pool GPUs, all types
        self.pool_gpus = sum(self.cap[n] for n, p in self.pool.items() if p)  # the healthy debug pool's GPUs
        self.gang_fail: dict[tuple, int] = {}
        self._keys: dict[tuple, list[tuple[str, bool]]] = {}
        self._room: dict[tuple, int] = {}  # (type, GPUs per node step, headroom) -> see fits_beside_headroom

    # ---- bookkeeping -------------------------------------------------------------------------------------
    def _move(self, node: str, delta: int) -> None:
        key = (self.gtype[node], self.pool[node])
        a = self.avail[node]
        b = a + delta
        if b < 0 or b > self.cap[node]:
            raise ValueError(f"GPU accounting broke on node {node}: {a} {delta:+d}")
        self.buckets[key][a].discard(node)
        self.buckets[key][b].add(node)
        self.avail[node] = b
        self.total[key] += delta
        self.type_total[key[0]] += delta
        if key[1]:
            self.pool_free += delta

    def take(self, placement: Placement) -> None:
        for node, k in placement:
            self._move(node, -k)

    def give(self, placement: Placement) -> None:
        for node, k in placement:
            self._move(node, k)
        self.gang_fail.clear()

    def keys(self, gpu_type: str | None, pools: tuple[bool, ...]) -> list[tuple[str, bool]]:
        out = self._keys.get((gpu_type, pools))
        if out is None:  # the node groups never change during a cycle
            types = self.types if gpu_type is None else [gpu_type]
            out = self._keys[gpu_type, pools] = [(t, p) for t in types for p in pools if (t, p) in self.buckets]
        return out

    def total_avail(self, gpu_type: str | None, pools: tuple[bool, ...]) -> int:
        return sum(self.total[k] for k in self.keys(gpu_type, pools))

    def max_type_avail(self, pools: tuple[bool, ...]) -> int:
        return max((self.total_avail(t, pools) for t in self.types), default=0)

    def lendable_pool(self, headroom: int) -> int:
        """Free debug-pool GPUs that batch work may borrow: all but ``headroom`` of them."""
        return max(0, self.pool_free - headroom)

    def place_lending(self, gpus: int, gpus_per_node: int | None, gpu_type: str | None,
                      headroom: int) -> Placement | None:
        """``place`` on the free GPUs, the debug pool's included, leaving at least ``headroom`` of the pool's free
        GPUs free: the headroom is kept on the pool's least-free nodes, so that whole free nodes stay whole for
        the job (a plain ``place`` may take a whole pool node where the other nodes had room)."""
        held: list[tuple[str, int]] = []
        need = min(headroom, self.pool_free)
        if need:
            for n in sorted((n for n, p in self.pool.items() if p and self.avail[n] > 0),
                            key=lambda n: (self.avail[n], n)):
                k = min(self.avail[n], need)
                held.append((n, k))
                need -= k
                if not need:
                    break
            self.take(held)
        try:
            return self.place(gpus, gpus_per_node, gpu_type, (False, True))
        finally:
            if held:
                self.give(held)

    def fits_beside_headroom(self, gpus: int, gpus_per_node: int | None, gpu_type: str | None,
                             headroom: int) -> bool:
        """Could a job of this shape run on one type's healthy nodes with ``headroom`` GPUs of the debug pool kept
        free, were every other GPU free? If not, it can only ever run on the headroom too."""
        step = gpus_per_node or 1
        for t in self.types if gpu_type is None else [gpu_type]:
            key = (t, step, headroom)
            room = self._room.get(key)
            if room is None:  # (capacities do not change within a cycle: once per type, step and headroom)
                nodes = [n for k in self.keys(t, (False, True)) for n in self.group_nodes[k]]
                room = sum(self.cap[n] // step * step for n in nodes)
                if headroom and any(self.pool[n] for n in nodes):
                    room -= -(-headroom // step) * step
                self._room[key] = room
            if room >= gpus:
                return True
        return False

    def max_free_for_batch(self, headroom: int) -> int:
        """The most free GPUs of one type that batch work may take: the debug pool's beyond ``headroom`` only."""
        lendable = self.lendable_pool(headroom)
        total, best = self.total, 0
        for t in self.types:
            free = total.get((t, False), 0) + min(total.get((t, True), 0), lendable)
            if free > best:
                best = free
        return best

    def max_free_of_one_type(self) -> int:
        """``max_type_avail((False, True))`` in O(types): the most free GPUs of one type, debug pool included."""
        return max(self.type_total.values(), default=0)

    # ---- queries -----------------------------------------------------------------------------------------
    def _best_fit(self, keys: list[tuple[str, bool]], k: int, exclude: set[str]) -> str | None:
        best = None
        for key in keys:
            b = self.buckets[key]
            for a in range(k, len(b)):
                cands = b[a] - exclude if exclude else b[a]
                if cands:
                    cand = (a, min(cands))
                    if best is None or cand < best:
                        best = cand
                    break
        return best[1] if best else None

    def _sorted_nodes(self, keys: list[tuple[str, bool]], min_avail: int, descending: bool) -> list[str]:
        out: list[tuple[int, str]] = []
        for key in keys:
            b = self.buckets[key]
            for a in range(max(min_avail, 1), len(b)):
                out.extend((a, n) for n in b[a])
        if descending:
            out.sort(key=lambda x: (-x[0], x[1]))
        else:
            out.sort()
        return [n for _, n in out]

    def place(self, gpus: int, gpus_per_node: int | None, gpu_type: str | None,
              pools: tuple[bool, ...], avoid: frozenset[str] = frozenset()) -> Placement | None:
        """A packed placement on one GPU type, or None. Does not take the GPUs (call ``take``).

        ``avoid``: nodes left out (a turn's lent nodes, for a debug session)."""
        best = None
        for t in self.types if gpu_type is None else [gpu_type]:
            keys = self.keys(t, pools)
            if not keys or sum(self.total[k] for k in keys) < gpus:
                continue
            pl = self._place_in(keys, t, gpus, gpus_per_node, pools, avoid)
            if pl is None:
                continue
            score = (len(pl), sum(self.avail[n] - k for n, k in pl), t)
            if best is None or score < best[0]:
                best = (score, pl)
        return best[1] if best else None

    def _place_in(self, keys, t, gpus, gpn, pools, avoid: frozenset[str]) -> Placement | None:
        cap = self.maxcap[t]
        if gpn:
            if gpn > cap or gpus % gpn:
                return None
            count = gpus // gpn
            memo = (t, gpn, pools)
            if self.gang_fail.get(memo, 1 << 30) <= count:
                return None
            nodes = self._sorted_nodes(keys, gpn, descending=False)
            if avoid:
                nodes = [n for n in nodes if n not in avoid]
            if len(nodes) < count:
                if not avoid:  # (a failure with nodes left out says nothing about the others)
                    self.gang_fail[memo] = min(count, self.gang_fail.get(memo, 1 << 30))
                return None
            return tuple(sorted((n, gpn) for n in nodes[:count]))
        if gpus <= cap:
            n = self._best_fit(keys, gpus, set(avoid))
            if n is not None:
                return ((n, gpus),)
            return self._greedy(keys, gpus, set(avoid), [])
        chosen: list[tuple[str, int]] = []
        used: set[str] = set(avoid)
        remaining = gpus
        whole = [n for n in self._sorted_nodes(keys, 1, descending=True)
                 if self.avail[n] == self.cap[n] and n not in avoid]
        for n in whole:
            if self.cap[n] <= remaining:
                chosen.append((n, self.cap[n]))
                used.add(n)
                remaining -= self.cap[n]
                if remaining == 0:
                    break
        if remaining:
            n = self._best_fit(keys, remaining, used)
            if n is not None:
                chosen.append((n, remaining))
                remaining = 0
        if remaining:
            return self._greedy(keys, remaining, used, chosen)
        return tuple(sorted(chosen))

    def _greedy(self, keys, remaining: int, used: set[str], chosen: list[tuple[str, int]]) -> Placement | None:
        chosen = list(chosen)
        for n in self._sorted_nodes(keys, 1, descending=True):
            if n in used:
                continue
            k = min(self.avail[n], remaining)
            chosen.append((n, k))
            remaining -= k
            if remaining == 0:
                return tuple(sorted(chosen))
        return None


def placement_str(placement: Placement) -> str:
    return ",".join(n for n, _ in placement)
