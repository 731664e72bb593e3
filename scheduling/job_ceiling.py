"""The impact ceiling of whole jobs: the best impact any allocation of the teams' own jobs could reach at a moment.

DESIGN.md §5's ``impact_ceiling`` apportions whole GPUs (Hamilton) and ignores gang sizes. A team entitled to 5.5
GPUs whose every job asks for 8 cannot receive 5 of them: it runs 8 (2.5 beyond its entitlement, taken from
teams that are owed them) or nothing. This module computes the tighter ceiling: at each moment, over every choice
of a subset of each team's jobs (the jobs that make up its demand, pending or running) whose GPUs fit the
capacity, the largest ``Σ_i min(x_i, e_i)``. It relaxes everything else (which node, which GPU type, what ran
before), so no schedule of the same demand does better: a policy's impact divided by it says how close the policy
came to what the jobs allow. With jobs of one GPU it equals the Hamilton ceiling; it is never above it.

Per team two sums of its jobs matter: ``lo``, the largest at most ``e_i`` (worth ``lo``), and ``hi``, the smallest
at least ``e_i`` (worth ``e_i``; a larger sum is worth no more). Every team starts at ``lo``; an upgrade to ``hi``
gains ``e_i - lo`` for ``hi - lo`` GPUs. Upgrades fit in the GPUs left over free; beyond them each GPU they take
comes from a team left below its ``lo``, at a loss of one per GPU (a relaxation: such a team is treated as able to
give up any number of GPUs, so the ceiling can only come out higher than the exact optimum, never lower). The
upgrades of one GPU go in order of gain (Hamilton's largest remainders), those of several GPUs by a knapsack.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

EPS = 1e-9

Sizes = tuple[tuple[int, int], ...]  # a team's jobs as (GPUs, count) pairs, by GPUs


_REACHED: dict[tuple[Sizes, int, int], tuple[int, int | None]] = {}  # reach's answers (a replay asks again and again)


def reach(sizes: Sizes, e: float) -> tuple[int, int | None]:
    """``(lo, hi)``: the largest sum of whole jobs of ``sizes`` at most ``e`` and the smallest at least ``e`` (None if
    all of them together are less)."""
    floor, ceil = math.floor(e + EPS), math.ceil(e - EPS)
    ones = sizes[0][1] if sizes and sizes[0][0] == 1 else 0
    if ones >= ceil:
        return floor, ceil
    key = (sizes, floor, ceil)
    found = _REACHED.get(key)
    if found is None:
        if len(_REACHED) > 100_000:
            _REACHED.clear()
        found = _REACHED[key] = _subset_sums(sizes, floor, ceil)
    return found


def _subset_sums(sizes: Sizes, floor: int, ceil: int) -> tuple[int, int | None]:
    limit = ceil + sizes[-1][0]
    bits = 1  # bit s set: some choice of jobs sums to s GPUs (s <= limit)
    mask = (1 << (limit + 1)) - 1
    for g, count in sizes:
        count = min(count, limit // g)
        step = 1
        while count > 0:  # binary splitting: counts 1, 2, 4, ... then the rest
            k = min(step, count)
            bits = (bits | (bits << (g * k))) & mask
            count -= k
            step <<= 1
    lo = (bits & ((1 << (floor + 1)) - 1)).bit_length() - 1
    above = bits >> ceil
    return lo, (ceil + (above & -above).bit_length() - 1) if above else None


def whole_job_best(entitled: Mapping[str, float], sizes: Mapping[str, Sizes], total: int) -> float:
    """At most ``total`` GPUs, the largest ``Σ_i min(x_i, e_i)`` over whole-job sums ``x_i`` of each team's
    ``sizes`` (a team without an entry counts as jobs of one GPU, as many as it is entitled to), relaxed as the
    module docstring says: never below the exact optimum, never above the Hamilton ceiling's ``Σ_i min(a_i, e_i)``
    when ``total`` is its ``min(capacity, round(Σ_i e_i))``."""
    used = 0  # Σ lo: every team's largest sum within its entitlement, worth as much
    units: list[float] = []
    lumps: list[tuple[int, float]] = []
    for team, e in entitled.items():
        s = sizes.get(team)
        lo, hi = reach(s, e) if s else (math.floor(e + EPS), math.ceil(e - EPS))
        used += lo
        gain = e - lo
        if hi is None or gain <= EPS:
            continue
        if hi - lo == 1:
            units.append(gain)
        else:
            lumps.append((hi - lo, gain))
    slack, value = max(0, total - used), float(used)
    units.sort(reverse=True)
    prefix = [0.0]
    for g in units[:slack]:
        prefix.append(prefix[-1] + g)
    if not lumps:
        return value + prefix[-1]
    if sum(c for c, _ in lumps) + len(units) <= slack:  # every upgrade fits
        return value + prefix[-1] + sum(g for _, g in lumps)
    # best[s]: the most the lumps gain for at most s GPUs; beyond the slack each GPU costs one (a lump's gain is
    # at most its GPUs, so only the last lump taken may cross the slack: s stays below slack + the largest lump)
    width = slack + max(c for c, _ in lumps)
    best = [0.0] * width
    for cost, gain in lumps:  # (the slices are copies: each lump is taken at most once)
        best[cost:] = [x if x >= y + gain else y + gain for x, y in zip(best[cost:], best[:width - cost])]
    top = len(prefix) - 1
    return value + max(best[s] - max(0, s - slack) + prefix[min(top, max(0, slack - s))] for s in range(width))
