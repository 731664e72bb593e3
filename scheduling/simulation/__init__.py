"""Trace replay on a simulated clock, the baseline policies and the pyramid report (pure Python, no Django).

Entry points: :func:`scheduling.simulation.cli.simulate` / ``python -m scheduling.simulation`` (and the
``simulate`` / ``bench_policy`` management commands, which forward to the same functions).
"""

from scheduling.simulation.engine import Simulator
from scheduling.simulation.model import DEFAULT_CONTRACTS, SimConfig, SimResult, SimulationError
from scheduling.simulation.trace import TraceError, TraceJob, load_budgets, load_philly, load_trace, parse_nodes

__all__ = [
    "DEFAULT_CONTRACTS",
    "SimConfig",
    "SimResult",
    "SimulationError",
    "Simulator",
    "TraceError",
    "TraceJob",
    "load_budgets",
    "load_philly",
    "load_trace",
    "parse_nodes",
]
