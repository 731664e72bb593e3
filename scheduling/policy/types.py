"""The policy's whole vocabulary: a snapshot in, a plan out.

Frozen dataclasses only, no Django, no clock: time is ``Snapshot.now_s`` (seconds on any monotonic scale the
caller chooses: epoch seconds in the portal, seconds since trace start in the simulator).

GPU amounts are whole GPUs. Usage and budgets are *normalised* GPU-seconds / GPU-hours (GPU type price factor
applied by the caller), so the policy never needs the price table.

State that must survive from one cycle to the next (reservations for blocked gang jobs, GPUs held for the job a
preemption was made for, how long teams have been short of their shares) travels *through* the snapshot: the
policy returns it in ``Plan.reservations`` and ``Plan.shortfall``, and the caller hands it back unchanged in the
next ``Snapshot.reservations`` and ``Snapshot.shortfall``. That keeps the policy a pure function.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

# Node health (same strings as the portal's models).
HEALTHY = "healthy"
DRAINING = "draining"
DOWN = "down"

# Queues a contract serves.
BATCH = "batch"
DEBUG = "debug"

# A placement: which GPUs of which nodes a job gets, as (node_id, gpus) pairs, sorted by node id.
Placement = tuple[tuple[str, int], ...]


@dataclass(frozen=True, slots=True)
class NodeState:
    id: str
    gpu_type: str
    gpus: int
    health: str = HEALTHY
    debug_pool: bool = False  # GPUs of this node are kept for debug sessions first


@dataclass(frozen=True, slots=True)
class Contract:
    """A time-slice contract (DESIGN.md §3)."""

    name: str
    protected_s: int  # from the start of each run, the job cannot be preempted (except by a node drain)
    grace_s: int  # checkpoint notice given when preempted
    max_runtime_s: int | None = None
    price_factor: float = 1.0
    requeue: bool = True  # requeued (back to pending) after preemption
    queue: str = BATCH  # BATCH or DEBUG


@dataclass(frozen=True, slots=True)
class TeamState:
    """One node of the team tree. ``id`` is the team path, e.g. ``lab/nlp/pretrain``; the root has parent None."""

    id: str
    parent: str | None
    grant_gpu_hours: float  # the team's budget grant for the period (normalised GPU-hours)
    usage_gpu_s: float = 0.0  # the team's OWN decayed usage (normalised GPU-seconds), children not included
    # The team's OWN balance for the period: grant - its children's grants + its own ledger entries (charges are
    # negative), i.e. budgets.selectors.balance. <= 0 means the team's own work runs only as scavenger.
    remaining_gpu_hours: float = float("inf")


@dataclass(frozen=True, slots=True)
class PendingJob:
    id: str
    team: str
    gpus: int
    contract: str
    submit_s: float
    gpu_type: str | None = None  # None: any type
    user: str = ""
    rank: int = 0  # order within the team set by its lead (lower first); ties by submit_s then id
    gpus_per_node: int | None = None  # gang shape when the job spans nodes (replicas x GPUs each); None: free
    runs: int = 0  # how many times it has run before (a requeued job has runs >= 1)
    # The most one run may last, as the user gave it at submission (Slurm's --time), or None: not given. The job
    # is stopped when a run reaches it; a gang reservation counts on it to know when the job's GPUs free up.
    time_limit_s: float | None = None


@dataclass(frozen=True, slots=True)
class RunningJob:
    id: str
    team: str
    gpus: int
    contract: str
    placement: Placement
    started_s: float  # start of the current run (protected time counts from here)
    submit_s: float
    gpu_type: str = ""
    user: str = ""
    scavenger: bool = False  # started as out-of-budget / idle-GPU work: always preemptible
    preempting: bool = False  # notice given, inside its grace; its GPUs are not free yet
    preempt_deadline_s: float | None = None
    last_checkpoint_s: float | None = None  # None: unknown (assume started_s)
    utilization: float | None = None  # recent mean GPU utilization 0..1 (None: unknown)
    idle_since_s: float | None = None  # utilization near zero continuously since then (None: not idle)
    time_limit_s: float | None = None  # as PendingJob.time_limit_s: the run ends by started_s + this at the latest
    runs: int = 0  # runs the job had before this one (PendingJob.runs when it started)
    rank: int = 0  # PendingJob.rank when it started: where the team's lead put it in the team's order


def notice_s(job: RunningJob, contract: Contract | None, scavenger: Contract | None) -> int:
    """The checkpoint notice (grace) a running job gets when it is preempted or drained: its contract's grace, but
    work started as scavenger runs on the scavenger contract's terms (no protected time, its price) and gets at most
    that contract's grace: a debug session that takes back a loan of pool GPUs waits for that notice, not for the
    borrower's own contract's."""
    grace = contract.grace_s if contract is not None else 0
    if job.scavenger and scavenger is not None:
        return min(grace, scavenger.grace_s)
    return grace


def run_limit_s(job: PendingJob | RunningJob, contract: Contract) -> float | None:
    """The most one run of the job may last: its own time limit or its contract's ``max_runtime_s``, the smaller
    of those given; None when neither is."""
    own, most = job.time_limit_s, contract.max_runtime_s
    if own is None:
        return most
    return own if most is None else min(own, most)


@dataclass(frozen=True, slots=True)
class Reservation:
    """GPUs promised to a pending job: held while victims finish their grace, or kept for a blocked gang job."""

    job_id: str
    placement: Placement
    expires_s: float
    # Added by the budget policy (optional, defaults keep old callers working):
    # "hold": GPUs freed by a preemption, kept for job_id during the victims' grace;
    # "gang": nodes drained over time for a blocked multi-GPU job (see docs/policy.md);
    # "turn": the same for a gang larger than what its team is owed, once its team's wait paid for it (§7).
    kind: str = "hold"
    since_s: float | None = None  # when the reservation was first made (None: unknown)


@dataclass(frozen=True, slots=True)
class Shortfall:
    """How much of their shares the teams short of them have gone without, as of one cycle (docs/policy.md §6).

    ``teams`` maps a share-tree leaf (a team, or a parent team's own-work leaf ``"<team>/"``) to (GPU-seconds of
    its entitlement it has gone without since it last had its share, GPUs it was short at ``as_of_s``). The
    policy writes it; callers hand it back and never need to read it.
    """

    as_of_s: float
    teams: Mapping[str, tuple[float, float]] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class PolicyConfig:
    squat_idle_s: float = 1800.0  # a batch job idle this long is flagged as squatting
    debug_idle_release_s: float = 900.0  # a debug session idle this long is released
    debug_max_gpus: int = 8
    reservation_ttl_s: float = 3600.0
    usage_half_life_s: float = 7 * 24 * 3600.0  # used by callers that decay usage (see policy.usage)
    # Added by the budget policy (optional): a pending batch job of a team below its share may cause preemption
    # only after waiting this long (natural job ends get the first chance; see docs/policy.md).
    preempt_after_s: float = 600.0
    # Beyond its nominal share (its budget share of the capacity), a team below its water-filled share preempts
    # (or reserves nodes) only while it is owed at least this fraction of its entitlement: that slack moves as
    # other teams' demand changes, and chasing every small move stops jobs for nothing (docs/policy.md, §6).
    claim_band: float = 0.05
    # Plan.waiting holds a plain-words reason for every pending job that did not start. The portal shows them;
    # a trace replay never reads them and may switch them off (they cost as much as the rest of a cycle).
    explain: bool = True
    # Debug-pool GPUs are lent to batch work (as borrowed work) only while this many stay free for debug sessions
    # that arrive next; a session that finds too few takes back a loan. 3 for sessions of 1-2 GPUs: with 2, the
    # shared Philly case with --debug-rate 4 preempted over 5% of its batch jobs on 11 of 25 seeds; a headroom that
    # grew to the largest running session (up to 8 GPUs) kept whole nodes idle (docs/policy.md §8).
    debug_headroom_gpus: int = 3
    # A team below its share preempts for its batch jobs only once it has gone without this many GPU-seconds of
    # its entitlement since it last had its share (Snapshot.shortfall): a GPU-hour. A short lump that jobs ending
    # elsewhere fill within minutes costs no one a preemption; a team 8 GPUs short reclaims after 7.5 minutes.
    # 0: no such wait. A snapshot without a shortfall (a caller that keeps none) waives it.
    reclaim_after_gpu_s: float = 3600.0
    # A gang larger than what its team is owed, at the head of the team's queue, gets a *turn* once its team has
    # gone without (GPUs beyond what it is owed) x (the job's protected time) GPU-seconds of its share: its wait
    # pays for what its protected run takes from the others (docs/policy.md, §7); so does a job of one node that has
    # waited a day at the head of a team that runs no batch work. False: no turns (such a job starts only on GPUs
    # that free up together).
    gang_turns: bool = True
    # Give the free GPUs first to the jobs that would start as their team's own work (within its guaranteed part,
    # min(entitlement, nominal share); not borrowed work), in a batch pass of their own, before the pass that serves
    # every job (borrowed starts, preemptions, reservations): Kueue's admission within the nominal quota before
    # borrowing (docs/policy.md §4). False: one pass, in which a team far below its share (one that runs nothing)
    # starts its next job first even when that job borrows several times its share.
    guaranteed_first: bool = True
    # Work started as scavenger (borrowed, out of budget, a loan of debug-pool GPUs) runs on this contract's terms
    # (DESIGN §3): no protected time, its price, and at most its grace as checkpoint notice when taken (notice_s).
    # A name missing from Snapshot.contracts: such work keeps its own contract's grace.
    scavenger_contract: str = "scavenger"


@dataclass(frozen=True, slots=True)
class Snapshot:
    now_s: float
    nodes: tuple[NodeState, ...]
    teams: tuple[TeamState, ...]
    contracts: tuple[Contract, ...]
    running: tuple[RunningJob, ...] = ()
    # A tuple, or any read-only sequence: the simulator hands over a simulation.engine.PendingView, made from
    # pending_by_team only when read (a policy that reads only those and len(pending) pays for no global order)
    pending: Sequence[PendingJob] = ()
    reservations: tuple[Reservation, ...] = ()
    config: PolicyConfig = field(default_factory=PolicyConfig)
    # Optional: the same pending jobs grouped by team, each team's tuple in queue order (rank, submit_s, id). A
    # caller that keeps its queue per team (the simulator) passes it and spares the policy the one O(pending) pass
    # of a cycle; the budget policy keeps what it derives from a team's tuple while the caller hands over the same
    # tuple object. The caller vouches for the order (like NumPy's ``assume_unique``): a wrong one still gives a
    # valid plan (no GPU given twice), in an unspecified order.
    pending_by_team: Mapping[str, tuple[PendingJob, ...]] | None = None
    # Hand back the last Plan.shortfall (None: no history kept, and the budget policy does not wait for it).
    shortfall: Shortfall | None = None


# ---- actions -------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Start:
    job_id: str
    placement: Placement
    scavenger: bool = False  # runs as preemptible idle-GPU work (its team is out of budget, or it borrows)


@dataclass(frozen=True, slots=True)
class Preempt:
    job_id: str
    grace_s: int
    reason: str  # "fair-share", "debug", "drain", "scavenger"...
    for_job: str | None = None  # the pending job this preemption is made for (None only for drains)


@dataclass(frozen=True, slots=True)
class Release:
    """End an idle (or expired) debug session."""

    job_id: str
    reason: str


@dataclass(frozen=True, slots=True)
class FlagSquatting:
    job_id: str
    idle_s: float


Action = Start | Preempt | Release | FlagSquatting


# Why a pending job waits, in one word (``Plan.waiting_code``): the kind of the plain-words reason in
# ``Plan.waiting``, for whatever counts or groups waiting jobs (a queue page, a metric, docs/policy.md "Where impact
# goes"). Code -> what it means.
WAIT_CODES = {
    "held": "GPUs freed for it by preemption are held for it while the jobs stopped checkpoint",
    "gang-reserved": "nodes are reserved for it and drain as their jobs end",
    "turn": "its turn, a gang larger than what its team is owed: paid and waiting for its nodes, or reserved",
    "no-plan": "its team may preempt for it, but no running job can be taken to make room for it now",
    "beyond-claim": "it asks for more GPUs than its team may claim from other teams now",
    "lead-order": "it waits behind the gang its team's lead ranked first",
    "never-fits": "no set of healthy nodes of one GPU type can ever hold it",
    "spent": "its team's budget is spent: it runs only on idle GPUs, as scavenger work",
    "at-share": "its team is at or above its fair share: it starts as GPUs free up",
    "claim-band": "its team is below its share but beyond its nominal share by less than the claim band: no preemption",
    "reclaim-wait": "its team is below its share: jobs may be preempted once it has gone without enough of its share",
    "below-share": "its team is below its share: served first as GPUs free up, jobs may be preempted for it",
    "debug-too-large": "a debug session larger than the sessions' limit",
    "debug-spent": "a debug session of a team whose budget is spent, with nothing free or takeable",
    "debug-protected": "a debug session with nothing free, and every job it could take inside its protected time",
    "plan-limit": "a debug session with nothing free that came after the cycle's last preemption plan for sessions",
}


@dataclass(frozen=True, slots=True)
class Plan:
    actions: tuple[Action, ...] = ()
    reservations: tuple[Reservation, ...] = ()  # hand back in the next snapshot
    waiting: dict[str, str] = field(default_factory=dict)  # pending job id -> why it waits, in plain words
    waiting_code: dict[str, str] = field(default_factory=dict)  # the same jobs -> the reason's kind (WAIT_CODES)
    shortfall: Shortfall | None = None  # hand back in the next snapshot (policies that keep none return None)


class Policy(Protocol):
    """What every policy (ours and the baselines) implements."""

    name: str

    def plan(self, snapshot: Snapshot) -> Plan: ...
