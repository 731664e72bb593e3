"""Usage decay: the one formula callers use to age a team's GPU-seconds before building a snapshot.

Exponential decay with a half-life (Slurm's ``PriorityDecayHalfLife``): usage recorded ``elapsed_s`` ago counts
``0.5 ** (elapsed_s / half_life_s)`` of its value. Running a constant ``r`` GPUs forever gives a decayed usage that
tends to ``r * half_life_s / ln 2`` (:func:`memory_s`): that is the horizon the policy uses to weigh what a team
runs *now* against what it used before (see docs/policy.md).
"""

from __future__ import annotations

import math


def decay(usage: float, elapsed_s: float, half_life_s: float) -> float:
    """``usage`` aged by ``elapsed_s`` seconds with the given half-life (no decay when the half-life is <= 0)."""
    if elapsed_s <= 0 or half_life_s <= 0 or math.isinf(half_life_s):
        return usage
    return usage * 0.5 ** (elapsed_s / half_life_s)


def memory_s(half_life_s: float) -> float:
    """Mean lifetime of decayed usage: a steady rate ``r`` accumulates to ``r * memory_s(half_life_s)``."""
    if half_life_s <= 0 or math.isinf(half_life_s):
        return 3600.0
    return half_life_s / math.log(2)
