"""The scheduling policy: pure Python, no Django, no I/O, no clock. A snapshot in, a plan out.

Public API: :class:`BudgetPolicy` (``name = "budget"``, ``plan(snapshot) -> Plan``), the contract types from
:mod:`.types`, :func:`.usage.decay` for callers that age usage, and :func:`.synthetic.synthetic_snapshot` for
benchmarks. The algorithm is documented in docs/policy.md.
"""

from .budget import BudgetPolicy
from .synthetic import synthetic_snapshot
from .types import (
    BATCH,
    DEBUG,
    DOWN,
    DRAINING,
    HEALTHY,
    WAIT_CODES,
    Action,
    Contract,
    FlagSquatting,
    NodeState,
    PendingJob,
    Placement,
    Plan,
    Policy,
    PolicyConfig,
    Preempt,
    Release,
    Reservation,
    RunningJob,
    Shortfall,
    Snapshot,
    Start,
    TeamState,
    run_limit_s,
)
from .usage import decay

__all__ = [
    "BATCH", "DEBUG", "DOWN", "DRAINING", "HEALTHY", "WAIT_CODES", "Action", "BudgetPolicy", "Contract",
    "FlagSquatting", "NodeState", "PendingJob", "Placement", "Plan", "Policy", "PolicyConfig", "Preempt", "Release",
    "Reservation", "RunningJob", "Shortfall", "Snapshot", "Start", "TeamState", "decay", "run_limit_s",
    "synthetic_snapshot",
]
