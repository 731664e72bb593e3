"""What a replay is made of: its configuration (``SimConfig``), the default contracts and GPU prices, a trace job as
the replay tracks it (``SimJob``), the result (``SimResult``), and the trace-level facts the command line reads
before a replay (which jobs could ever fit the cluster, the demand ratio, the sizes of generated debug sessions).

Pure Python, no Django. The replay itself is engine.py.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

from scheduling import pyramid
from scheduling.policy.types import DEBUG, Contract, NodeState, PendingJob, PolicyConfig, RunningJob
from scheduling.simulation.trace import Budgets, TraceJob

HOUR = 3600.0
# the synthetic debug-session stream (--debug-rate): GPUs and minutes, each uniform over these bounds
DEBUG_SESSION_GPUS = (1, 2)
DEBUG_SESSION_MINUTES = (30.0, 120.0)
DEFAULT_CONTRACTS: tuple[Contract, ...] = (
    Contract("scavenger", protected_s=0, grace_s=60, price_factor=0.5),
    Contract("standard", protected_s=2 * 3600, grace_s=600),
    Contract("long", protected_s=24 * 3600, grace_s=600, price_factor=1.5),
    Contract("debug", protected_s=4 * 3600, grace_s=60, max_runtime_s=4 * 3600, requeue=False, queue=DEBUG),
)
DEFAULT_PRICES = {"H100": 1.0, "H200": 1.25, "B200": 2.0, "B300": 2.5, "A100": 0.5}
LONG_THRESHOLD_S = 24 * 3600.0  # trace jobs longer than this run under "long", others under "standard"


class SimulationError(RuntimeError):
    """The policy did something impossible (a GPU given twice, a start on a down node...): a policy bug."""


@dataclass
class SimConfig:
    """A replay's settings: the cluster, the budgets, the window and the options of ``simulate``
    (docs/simulation.md)."""

    nodes: tuple[NodeState, ...]
    budgets: Budgets
    horizon_s: float | None = None  # the window; None: run until no job can progress
    seed: int = 0
    debug_rate_per_hour: float = 0.0
    debug_pool_nodes: int | tuple[str, ...] = 0  # the debug pool: the first N nodes, or these node ids
    mtbf_hours: float | None = None
    repair_hours: float = 4.0
    checkpoint_minutes: float = 30.0
    # A preempted job saves a checkpoint at the signal and exits when it is written: its GPUs free after
    # min(grace, checkpoint_save_s). The grace is the deadline, not the time every job takes. None: every job
    # holds its GPUs for its whole grace (the pessimistic model).
    checkpoint_save_s: float | None = 60.0
    squatters: int = 0
    # share of debug sessions whose user forgets them: when the work is done the session sits idle (utilization 0)
    # until the policy releases it or its contract's max runtime ends it
    debug_forget_share: float = 0.0
    # the portal's PORTAL_DEBUG_MAX_SESSIONS_PER_USER: a trace session whose user already holds this many open
    # sessions is refused, and its user submits the work as a batch job (0: no limit; sessions with no user
    # are never limited)
    debug_sessions_per_user: int = 2
    # the portal's PORTAL_DEBUG_MAX_SESSIONS_PER_TEAM: the same for a team's open sessions, generated ones
    # included (0: no limit, the portal's default)
    debug_sessions_per_team: int = 0
    failures: tuple[tuple[str, float], ...] = ()  # scripted node failures (node id, time), on top of --mtbf-hours
    cycle_s: float = 30.0  # at most one cycle per this many simulated seconds (debug arrivals excepted)
    heartbeat_s: float = 300.0  # a cycle at least this often while jobs run or wait
    contracts: tuple[Contract, ...] = DEFAULT_CONTRACTS
    prices: dict[str, float] = field(default_factory=lambda: dict(DEFAULT_PRICES))
    # The replay reads no waiting reasons, so the policy is asked not to write them.
    policy_config: PolicyConfig = field(default_factory=lambda: PolicyConfig(explain=False))
    long_threshold_s: float = LONG_THRESHOLD_S
    default_utilization: float = 1.0  # utilization assumed for jobs whose trace does not say
    progress: bool | None = None  # tqdm on stderr: None = only on a TTY
    per_team: bool = False  # SimResult.teams: each team's share of the report (costs a little time)
    whole_jobs: bool = False  # the impact ceiling of whole jobs too (pyramid; a knapsack per sample)
    idle_by_place: bool = False  # where the idle GPUs sat (report.IdleByPlace; a sum over the nodes per event)
    timeline_s: float | None = None  # SimResult.timeline: each team's figures per interval of this length
    progress_position: int = 0  # the progress bar's line, when replays run side by side (parallel.py)


class SimJob:
    """A trace job (or a generated session or squatter) as the replay tracks it, from submission to its end."""

    __slots__ = (
        "id", "team", "gpus", "gpu_type", "contract", "submit_s", "duration_s", "remaining_s", "kind", "util",
        "state", "first_start_s", "runs", "run_start_s", "placement", "scavenger", "token", "pending_obj",
        "running_obj", "in_budget_at_submit", "completed", "next_ckpt_s", "deadline_s", "key", "flagged",
        "price", "user", "forgotten", "idle", "time_limit_s", "ends_in_grace", "saved",
    )

    def __init__(self, tj: TraceJob, contract: str, kind: str, key: tuple) -> None:
        self.id = tj.id
        self.team = tj.team
        self.gpus = tj.gpus
        self.gpu_type = tj.gpu_type
        self.contract = contract
        self.submit_s = tj.submit_s
        self.duration_s = tj.duration_s
        self.remaining_s = tj.duration_s
        self.kind = kind  # train | eval | debug | squat
        self.util = tj.utilization
        self.time_limit_s = tj.time_limit_s
        self.state = "future"  # future -> pending -> running -> (preempting ->) pending | done
        self.first_start_s: float | None = None
        self.runs = 0
        self.run_start_s = 0.0
        self.placement: tuple = ()
        self.scavenger = False
        self.token = 0
        self.pending_obj: PendingJob | None = None
        self.running_obj: RunningJob | None = None
        self.in_budget_at_submit = True
        self.completed = False
        self.next_ckpt_s = math.inf
        self.deadline_s: float | None = None
        # (how, first preemption): the run ends on its own ("completed" or "timeout") inside its grace
        self.ends_in_grace: tuple[str, bool] | None = None
        self.saved = True  # False: preempted with a grace shorter than its checkpoint save, it cannot save in time
        self.key = key
        self.flagged = False
        self.price = 1.0
        self.user = tj.user
        self.forgotten = False  # a debug session left open after its work (SimConfig.debug_forget_share)
        self.idle = False  # that session is now idle


# Event kinds, in the order they are handled at the same instant (the cycle comes last).


@dataclass
class SimResult:
    """One policy's replay: its metrics (the report's column), its schedule, where it ended, and its cost."""

    policy: str
    metrics: dict
    schedule: list[tuple]  # (job_id, team, gpus, placement, start_s, end_s, end_reason)
    horizon_s: float
    cycles: int
    wall_s: float = 0.0
    teams: dict[str, dict] | None = None  # team -> its figures (SimConfig.per_team; see report.team_report)
    timeline: list[tuple] | None = None  # SimConfig.timeline_s: report.Timeline.rows


def oversized_session(tj: TraceJob, max_gpus: int) -> bool:
    """A trace debug session larger than the portal accepts (``PolicyConfig.debug_max_gpus``): its user is told
    to submit it as a batch job, so the replay runs it as one."""
    return tj.kind == "debug" and tj.gpus > max_gpus


def session_gpus(nodes: tuple[NodeState, ...]) -> tuple[int, int]:
    """The GPUs of the ``--debug-rate`` stream's sessions, least and most: DEBUG_SESSION_GPUS, but no more than the
    largest node holds. An interactive session runs on one machine; on a cluster of 1-GPU nodes a 2-GPU one would
    wait for ever where no two nodes are free together (or a single node is all there is)."""
    lo, hi = DEBUG_SESSION_GPUS
    biggest = max((n.gpus for n in nodes), default=hi)
    return lo, max(lo, min(hi, biggest))


def cluster_fits(nodes: tuple[NodeState, ...]) -> Callable[[TraceJob], bool]:
    """Whether a job could ever run on these nodes: no more GPUs than the nodes of one type hold (its own type, or for
    a job of any type the largest), since a job never spans GPU types (docs/policy.md §5). The GPUs per type are
    added up once, not once per job of a trace."""
    per_type: dict[str, int] = {}
    for n in nodes:
        per_type[n.gpu_type] = per_type.get(n.gpu_type, 0) + n.gpus
    largest = max(per_type.values(), default=0)

    def fits(job: TraceJob) -> bool:
        if job.gpu_type is not None:
            return job.gpus <= per_type.get(job.gpu_type, 0)
        return job.gpus <= largest

    return fits


def demand_ratio(jobs: list[TraceJob], nodes: tuple[NodeState, ...], horizon_s: float) -> float | None:
    """DESIGN §5 demand ratio of the trace jobs over the window (policy-independent; rejected jobs excluded)."""
    capacity = sum(n.gpus for n in nodes)
    fits = cluster_fits(nodes)
    return pyramid.demand_ratio(((j.submit_s, j.duration_s, j.gpus) for j in jobs if fits(j)), capacity, horizon_s)
