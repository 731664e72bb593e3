"""Free-GPU bookkeeping and packing placement shared by the baseline policies (pure, fast)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from scheduling.policy.types import HEALTHY, NodeState, Placement, RunningJob


class FreeMap:
    """Free GPUs per healthy node (running and preempting jobs hold theirs), with per-type totals.

    ``place`` packs: a job that fits on one node goes to the node with the fewest free GPUs that still fits
    it (best fit, ties by id) and never spans nodes (it waits for one node instead); a job bigger than any node
    spans the nodes with the most free GPUs first, all of one GPU type (a job of any type: the type whose
    placement takes the fewest nodes, then by name).

    A shape that found no placement on the free GPUs finds none while GPUs are only taken, and neither does a
    larger job of the same kind (one node, or spanning nodes, of the same type): ``place`` remembers the smallest
    such failure until ``give`` returns GPUs, so that a walk over thousands of waiting jobs on a fragmented
    cluster costs one pass over the nodes per kind of job, not one per job. (Exact: the same placements.)
    """

    def __init__(self, nodes: Iterable[NodeState], running: Iterable[RunningJob] = ()) -> None:
        self.free: dict[str, int] = {}
        self.size: dict[str, int] = {}
        self.type: dict[str, str] = {}
        self.capacity: dict[str | None, int] = {None: 0}
        self.biggest: dict[str | None, int] = {None: 0}
        for n in nodes:
            if n.health != HEALTHY:
                continue
            self.free[n.id] = n.gpus
            self.size[n.id] = n.gpus
            self.type[n.id] = n.gpu_type
            self.capacity[n.gpu_type] = self.capacity.get(n.gpu_type, 0) + n.gpus
            self.capacity[None] += n.gpus
            self.biggest[n.gpu_type] = max(self.biggest.get(n.gpu_type, 0), n.gpus)
            self.biggest[None] = max(self.biggest[None], n.gpus)
        for r in running:
            for node, g in r.placement:
                if node in self.free:
                    self.free[node] -= g
        # (gpu type, gpus per node, spans nodes) -> the smallest job of that kind known not to fit; cleared by give
        self._unplaceable: dict[tuple, int] = {}
        self.total: dict[str | None, int] = {None: 0}
        for node, f in self.free.items():
            self.total[None] += f
            t = self.type[node]
            self.total[t] = self.total.get(t, 0) + f

    def free_total(self, gpu_type: str | None = None) -> int:
        return self.total.get(gpu_type, 0)

    def can_ever_fit(self, gpus: int, gpu_type: str | None, gpus_per_node: int | None = None) -> bool:
        if gpu_type is None and len(self.capacity) > 2:  # several types: the job must fit on one of them
            return any(self.can_ever_fit(gpus, t, gpus_per_node) for t in self.capacity if t is not None)
        if gpus > self.capacity.get(gpu_type, 0):
            return False
        if gpus_per_node is not None:
            nodes = sum(
                self.size[n] // gpus_per_node for n in self.size if gpu_type is None or self.type[n] == gpu_type
            )
            return nodes * gpus_per_node >= gpus
        return True

    def place(
        self, gpus: int, gpu_type: str | None = None, gpus_per_node: int | None = None,
        avail: Mapping[str, int] | None = None,
    ) -> Placement | None:
        """A placement for ``gpus`` on ``avail`` (default: the free GPUs), or None. Does not take them."""
        if avail is not None:
            return self._place(gpus, gpu_type, gpus_per_node, avail)
        # jobs of a per-node shape fail for their shape alone (a size that is no multiple of it): exact size only
        kind = (gpu_type, gpus_per_node, gpus if gpus_per_node else gpus > self.biggest.get(gpu_type, 0))
        known = self._unplaceable.get(kind)
        if known is not None and gpus >= known:
            return None
        out = self._place(gpus, gpu_type, gpus_per_node, None)
        if out is None and (known is None or gpus < known):
            self._unplaceable[kind] = gpus
        return out

    def _place(self, gpus: int, gpu_type: str | None, gpus_per_node: int | None,
               avail: Mapping[str, int] | None) -> Placement | None:
        if gpu_type is None and len(self.capacity) > 2 and (gpus_per_node or gpus > self.biggest[None]):
            # a job of any type over several nodes: all of them of one type
            best = None
            for t in sorted(t for t in self.capacity if t is not None):
                pl = self._place(gpus, t, gpus_per_node, avail)
                if pl is not None and (best is None or len(pl) < len(best)):
                    best = pl
            return best
        if avail is None:
            if gpus > self.total.get(gpu_type, 0):
                return None
            avail = self.free
        cands = [
            (f, n) for n, f in avail.items() if f > 0 and (gpu_type is None or self.type.get(n) == gpu_type)
        ]
        if gpus_per_node is not None:
            nodes = sorted(n for f, n in cands if f >= gpus_per_node)
            need = -(-gpus // gpus_per_node)
            if len(nodes) < need or gpus % gpus_per_node:
                return None
            return tuple((n, gpus_per_node) for n in nodes[:need])
        best = None
        for f, n in cands:
            if f >= gpus and (best is None or (f, n) < best):
                best = (f, n)
        if best is not None:
            return ((best[1], gpus),)
        if gpus <= self.biggest.get(gpu_type, 0):
            return None  # it fits on one node: wait for one rather than split it
        if sum(f for f, _ in cands) < gpus:
            return None
        cands.sort(key=lambda c: (-c[0], c[1]))
        out = []
        need = gpus
        for f, n in cands:
            g = min(f, need)
            out.append((n, g))
            need -= g
            if need == 0:
                break
        return tuple(sorted(out))

    def take(self, placement: Placement) -> None:
        for node, g in placement:
            self.free[node] -= g
            self.total[None] -= g
            t = self.type[node]
            self.total[t] -= g

    def give(self, placement: Placement) -> None:
        self._unplaceable.clear()
        for node, g in placement:
            if node in self.free:
                self.free[node] += g
                self.total[None] += g
                t = self.type[node]
                self.total[t] += g
