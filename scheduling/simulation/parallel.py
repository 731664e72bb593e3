"""Replays of several policies side by side: one process per policy, up to ``workers`` at a time.

Each replay is independent of the others and deterministic, so running them in forked processes gives the same
results as running them one after the other, in less time when the machine has the cores. The trace's jobs are
handed to the processes by the fork itself (a module global set before the pool starts), not pickled per policy;
each result (metrics, schedule, team figures) comes back pickled. Where ``fork`` is not available, or one worker
or one policy is asked for, the replays run in this process, in order.
"""

from __future__ import annotations

import multiprocessing
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import replace

from scheduling.simulation.engine import Simulator
from scheduling.simulation.model import SimConfig, SimResult
from scheduling.simulation.trace import TraceJob


class ReplayProcessDied(RuntimeError):
    """A replay's process ended without a result (killed: out of memory, say)."""


_JOBS: list[TraceJob] = []  # the trace, inherited by the forked workers
_MAKE: Callable | None = None  # name -> policy, inherited too


def _replay(name: str, cfg: SimConfig) -> SimResult:
    return Simulator(cfg, _JOBS, _MAKE(name)).run()


def fork_available() -> bool:
    return "fork" in multiprocessing.get_all_start_methods()


def replay_all(names: Sequence[str], configs: dict[str, SimConfig], jobs: list[TraceJob],
               make_policy: Callable, workers: int) -> dict[str, SimResult]:
    """Each policy's replay of ``jobs`` under its config, by name. ``make_policy(name)`` builds a fresh policy. A
    failure in any replay (a ``SimulationError``: a policy broke a rule) is raised here, as it would be in order."""
    global _JOBS, _MAKE
    workers = min(workers, len(names))
    if workers <= 1 or not fork_available():
        return {name: Simulator(configs[name], jobs, make_policy(name)).run() for name in names}
    _JOBS, _MAKE = jobs, make_policy
    try:
        context = multiprocessing.get_context("fork")
        with ProcessPoolExecutor(max_workers=workers, mp_context=context) as pool:
            # each progress bar on its own line (tqdm's position), in the order of the names
            futures = {name: pool.submit(_replay, name, replace(configs[name], progress_position=i))
                       for i, name in enumerate(names)}
            try:
                return {name: futures[name].result() for name in names}
            except BrokenProcessPool:
                raise ReplayProcessDied(
                    "a replay's process ended without a result (out of memory?); --workers 1 replays the policies "
                    "one after the other, in one process") from None
    finally:
        _JOBS, _MAKE = [], None
