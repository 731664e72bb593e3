"""Writes for clusters, nodes and jobs (HackSoft services).

Every function takes keyword-only arguments, runs in one transaction, returns the object it wrote, and raises a
``budgets.errors.DomainError`` subclass naming the offending field when it refuses; a refusal writes nothing
(every check runs before the first write, and the transaction rolls back anything else).

Job state changes go only through :func:`transition`: a compare-and-swap update on the state the caller saw
(``UPDATE ... WHERE id = %s AND state = <old>``, in the manner of healthchecks' ``sendalerts``) plus exactly one
``JobEvent``, in the same transaction. If the update touches no row, someone else moved the job first and the
caller gets a ``ConflictError``; nothing is written.

Submission is recorded in the timeline as a ``pending -> pending`` event with the reason ``"submitted"`` (or
``"debug session reserved"``): every job's timeline therefore starts with its submission, by whom, and every
later event is a real move of :data:`~scheduling.models.TRANSITIONS`.
"""

from __future__ import annotations

from collections import Counter
from datetime import datetime, timedelta

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import models, transaction
from django.db.models import F, Value
from django.db.models.functions import Coalesce
from django.utils import timezone

from budgets.errors import ConflictError, PermissionDenied, ValidationError
from budgets.models import Contract, Queue, Team
from budgets.selectors import budget_for, is_lead_of, is_member_of, open_period
from scheduling.models import (
    FINAL_STATES,
    TRANSITIONS,
    Cluster,
    DebugSession,
    GPUType,
    Health,
    Job,
    JobEvent,
    JobState,
    Node,
    NodeHealthChange,
    json_problem,
)

# A debug session may start this long in the past (clock skew, a slow form) and this far in the future.
DEBUG_START_TOLERANCE = timedelta(minutes=2)
DEBUG_MAX_AHEAD = timedelta(days=7)

_REASON_MAX = JobEvent._meta.get_field("reason").max_length
# Job.rank is an IntegerField: 32 bits on PostgreSQL (a larger value would fail in the database, not here).
RANK_MIN, RANK_MAX = -(2**31), 2**31 - 1
# Fields a caller of ``transition`` may set together with the state (never the state or the identity).
_TRANSITION_FIELDS = frozenset(
    f.name for f in Job._meta.concrete_fields if f.name not in {"id", "state", "team", "user", "submitted_at"}
)


# ---- the state machine ----------------------------------------------------------------------------------------


@transaction.atomic
def transition(*, job: Job, to_state: str, reason: str = "", actor=None, **fields) -> Job:
    """Move ``job`` from the state the caller saw (``job.state``) to ``to_state``, and record one JobEvent.

    ``fields`` are other Job columns written in the same UPDATE (placement, backend_id, exit_code,
    preempt_deadline, scavenger, waiting_reason, ...). Timestamps are set here unless given in ``fields``:

    - ``-> starting``: ``runs`` + 1 (each start attempt is a run);
    - ``starting -> running``: ``started_at`` = now, and ``first_started_at`` = now if it was never set;
    - ``-> completed | failed | cancelled``: ``ended_at`` = now, ``preempt_deadline`` cleared;
    - ``-> requeued``: nothing counted (the next start counts the run);
    - ``requeued -> pending``: ``placement``, ``backend_id``, ``started_at`` and ``preempt_deadline`` cleared.

    Raises ``ValidationError`` (field ``state``) for a move not in ``TRANSITIONS`` and ``ConflictError`` (field
    ``state``) when the job is no longer in ``job.state`` in the database.
    """
    from_state = job.state
    to_state = JobState(to_state) if to_state in JobState.values else to_state
    if to_state not in TRANSITIONS.get(from_state, ()):
        raise ValidationError(f"job {job.pk} cannot move from {from_state} to {to_state}", field="state")
    unknown = set(fields) - _TRANSITION_FIELDS
    if unknown:
        raise TypeError(f"transition() cannot set {', '.join(sorted(unknown))}")

    now = timezone.now()
    values: dict = {}
    if to_state == JobState.STARTING:
        values["runs"] = F("runs") + 1
    if from_state == JobState.STARTING and to_state == JobState.RUNNING:
        values["started_at"] = now
        values["first_started_at"] = Coalesce(F("first_started_at"), Value(now, output_field=models.DateTimeField()))
    if to_state in FINAL_STATES:
        values["ended_at"] = now
        values["preempt_deadline"] = None
    if from_state == JobState.REQUEUED and to_state == JobState.PENDING:
        values.update(placement=[], backend_id="", started_at=None, preempt_deadline=None)
    values.update(fields)

    moved = Job.objects.filter(pk=job.pk, state=from_state).update(state=to_state, **values)
    if moved != 1:
        raise ConflictError(f"job {job.pk} is no longer {from_state} (someone else moved it)", field="state")
    JobEvent.objects.create(job_id=job.pk, from_state=from_state, to_state=to_state,
                            reason=(reason or "")[:_REASON_MAX], actor=actor)
    job.refresh_from_db()
    return job


# ---- submission -----------------------------------------------------------------------------------------------


def gang_fits(*, node_sizes: list[int], gpus: int, replicas: int) -> bool:
    """Whether nodes of one GPU type with these GPU counts could ever hold the gang (health ignored).

    The rule (the policy's placement must never be stricter than this, or accepted jobs would wait forever):

    - ``replicas = r > 1``: each replica gets ``g = gpus / r`` GPUs on its own node, so at least ``r`` nodes with
      ``>= g`` GPUs each are needed.
    - ``replicas = 1`` and ``gpus`` <= the largest node: one node holds it.
    - ``replicas = 1`` and ``gpus`` > the largest node: the job must take whole nodes of one size ``s``:
      ``gpus`` is a multiple of ``s`` and there are at least ``gpus / s`` nodes of exactly ``s`` GPUs.
    """
    if not node_sizes or gpus < 1 or replicas < 1 or gpus % replicas:
        return False
    if replicas > 1:
        per_replica = gpus // replicas
        return sum(1 for size in node_sizes if size >= per_replica) >= replicas
    if gpus <= max(node_sizes):
        return True
    return any(gpus % size == 0 and count >= gpus // size for size, count in Counter(node_sizes).items())


def _check_can_submit_for(actor, team) -> None:
    if not is_member_of(actor, team):  # a member or lead of the team, a lead of an ancestor, or a superuser
        raise PermissionDenied(f"{actor} is not a member of team {team} and cannot submit jobs for it", field="team")


def _check_cluster_and_shape(*, cluster: Cluster, gpu_type: GPUType | None, gpus, replicas) -> None:
    if not isinstance(gpus, int) or isinstance(gpus, bool) or gpus < 1:
        raise ValidationError("gpus must be a whole number of at least 1", field="gpus")
    if not isinstance(replicas, int) or isinstance(replicas, bool) or replicas < 1:
        raise ValidationError("replicas must be a whole number of at least 1", field="replicas")
    if gpus % replicas:
        raise ValidationError(f"{gpus} GPUs cannot be split evenly over {replicas} replicas", field="replicas")
    if not cluster.active:
        raise ValidationError(f"cluster {cluster} is not active", field="cluster")

    nodes = Node.objects.filter(cluster=cluster)
    if gpu_type is not None:
        nodes = nodes.filter(gpu_type=gpu_type)
    sizes_by_type: dict[int, list[int]] = {}
    for type_id, size in nodes.values_list("gpu_type_id", "gpus"):
        sizes_by_type.setdefault(type_id, []).append(size)
    if gpu_type is not None and not sizes_by_type:
        raise ValidationError(f"cluster {cluster} has no {gpu_type} nodes", field="gpu_type")
    if not sizes_by_type:
        raise ValidationError(f"cluster {cluster} has no nodes", field="cluster")
    if not any(gang_fits(node_sizes=sizes, gpus=gpus, replicas=replicas) for sizes in sizes_by_type.values()):
        shape = f"{gpus} GPUs" if replicas == 1 else f"{replicas} replicas of {gpus // replicas} GPUs"
        of_type = f" of type {gpu_type}" if gpu_type is not None else ""
        raise ValidationError(f"{shape}{of_type} can never fit on cluster {cluster}: its nodes are too small or "
                              "too few", field="gpus")


def _check_budget(*, team, at: datetime | None = None, field: str = "team") -> None:
    period = open_period(at=at)
    if period is None:
        when = "now" if at is None else f"at {at:%Y-%m-%d %H:%M}"
        raise ValidationError(f"no budget period is open {when}; jobs cannot be submitted", field=field)
    if budget_for(team, period) is None:
        raise ValidationError(f"team {team} has no budget in period {period}", field="team")


def _check_payload(*, name, image, command, environment, constraints) -> tuple[list, dict, dict]:
    if not isinstance(name, str) or len(name) > Job._meta.get_field("name").max_length:
        raise ValidationError("name must be text of at most 200 characters", field="name")
    if not isinstance(image, str) or len(image) > Job._meta.get_field("image").max_length:
        raise ValidationError("image must be text of at most 300 characters", field="image")
    if isinstance(command, (str, bytes)) or not isinstance(command, (list, tuple)) \
            or not all(isinstance(arg, str) for arg in command):
        raise ValidationError("command must be a list of strings, e.g. [\"python\", \"train.py\"]", field="command")
    environment = {} if environment is None else environment
    if not isinstance(environment, dict) or not all(
            isinstance(k, str) and k and isinstance(v, str) for k, v in environment.items()):
        raise ValidationError("environment must map variable names to string values", field="environment")
    constraints = {} if constraints is None else constraints
    if not isinstance(constraints, dict):
        raise ValidationError("constraints must be an object of key/value pairs", field="constraints")
    for field, value in (("name", name), ("image", image), ("command", command), ("environment", environment),
                         ("constraints", constraints)):
        problem = json_problem(value)
        if problem:
            raise ValidationError(problem, field=field)
    return list(command), dict(environment), dict(constraints)


def _check_rank(rank) -> None:
    if not isinstance(rank, int) or isinstance(rank, bool) or not RANK_MIN <= rank <= RANK_MAX:
        raise ValidationError(f"rank must be a whole number from {RANK_MIN} to {RANK_MAX}", field="rank")


def _create_pending_job(*, actor, reason: str, **values) -> Job:
    job = Job.objects.create(user=actor, state=JobState.PENDING, **values)
    JobEvent.objects.create(job=job, from_state=JobState.PENDING, to_state=JobState.PENDING, reason=reason,
                            actor=actor)
    return job


@transaction.atomic
def submit_job(*, actor, team, cluster: Cluster, contract: Contract, gpus: int, gpu_type: GPUType | None = None,
               replicas: int = 1, name: str = "", image: str = "", command=(), environment: dict | None = None,
               constraints: dict | None = None, rank: int = 0) -> Job:
    """Queue a batch job for ``team`` on ``cluster``; returns the pending Job.

    Rules, in order (the first broken one is reported, with its field): the actor is a member of the team or a
    lead of it or of an ancestor (``team``); a non-zero ``rank`` needs a lead (``rank``); the contract is active
    and of the batch queue (``contract``; debug contracts are used only through
    :func:`reserve_debug_session`); ``gpus`` >= 1, ``replicas`` >= 1 and ``gpus`` divisible by ``replicas``; the
    cluster is active (``cluster``); the gang can ever fit on the cluster's nodes of one GPU type, health
    ignored (``gpu_type``/``gpus``, see :func:`gang_fits`); a budget period is open and the team has a budget in
    it (``team``; a spent budget is fine: the policy then runs the job as scavenger work); the payload is
    well-formed (``command`` a list of strings, ``environment`` string to string, ``constraints`` an object; no
    NaN, infinity or NUL character anywhere). ``rank`` fits the 32-bit column.
    """
    _check_can_submit_for(actor, team)
    _check_rank(rank)
    if rank != 0 and not is_lead_of(actor, team):
        raise PermissionDenied("only a lead of the team can set a job's rank", field="rank")
    if not contract.active:
        raise ValidationError(f"contract {contract} is not active", field="contract")
    if contract.queue != Queue.BATCH:
        raise ValidationError(f"contract {contract} is for the {contract.queue} queue; reserve a debug session "
                              "instead", field="contract")
    _check_cluster_and_shape(cluster=cluster, gpu_type=gpu_type, gpus=gpus, replicas=replicas)
    _check_budget(team=team)
    command, environment, constraints = _check_payload(name=name, image=image, command=command,
                                                       environment=environment, constraints=constraints)
    return _create_pending_job(
        actor=actor, reason="submitted", team=team, cluster=cluster, contract=contract, gpu_type=gpu_type,
        gpus=gpus, replicas=replicas, name=name, image=image, command=command, environment=environment,
        constraints=constraints, rank=rank,
    )


# ---- cancelling and ordering ----------------------------------------------------------------------------------


@transaction.atomic
def cancel_job(*, actor, job: Job, reason: str = "") -> Job:
    """Cancel ``job``: allowed to its submitter, a lead of its team (or of an ancestor), or a superuser.

    The state is read afresh (cancelling means "whatever it is doing now"), then moved by compare-and-swap, so a
    concurrent move still yields a ``ConflictError`` rather than a lost update. Pending and requeued jobs are
    simply cancelled. Starting, running and preempting jobs are marked cancelled here too; stopping them on the
    backend (``adapter.cancel(backend_id)``) is the scheduling loop's business: it sees cancelled jobs that still
    have a ``backend_id`` and stops them (later issue). A debug session's reservation is released with its job.
    A completed, failed or cancelled job cannot be cancelled (``ValidationError`` on ``state``).
    """
    if actor is None or not ((actor.is_active and actor.pk == job.user_id) or is_lead_of(actor, job.team)):
        raise PermissionDenied(f"{actor} may not cancel job {job.pk}: only its submitter, a lead of its team, or "
                               "an operator can", field="job")
    job.state = Job.objects.filter(pk=job.pk).values_list("state", flat=True).get()
    if job.is_final:
        raise ValidationError(f"job {job.pk} is already {job.state} and cannot be cancelled", field="state")
    job = transition(job=job, to_state=JobState.CANCELLED, reason=reason or f"cancelled by {actor}", actor=actor)
    DebugSession.objects.filter(job=job, released_at__isnull=True).update(
        released_at=job.ended_at, release_reason="cancelled")
    return job


@transaction.atomic
def set_job_rank(*, actor, job: Job, rank: int) -> Job:
    """Set a pending job's order within its team (lower first); only a lead of its team or of an ancestor (or a
    superuser, whom ``budgets.selectors.is_lead_of`` counts as a lead everywhere)."""
    if actor is None or not is_lead_of(actor, job.team):
        raise PermissionDenied(f"only a lead of team {job.team} can order its jobs", field="rank")
    _check_rank(rank)
    if job.state != JobState.PENDING:
        raise ValidationError(f"job {job.pk} is {job.state}; only pending jobs can be reordered", field="state")
    if Job.objects.filter(pk=job.pk, state=JobState.PENDING).update(rank=rank) != 1:
        raise ConflictError(f"job {job.pk} is no longer pending (someone else moved it)", field="state")
    job.refresh_from_db()
    return job


# ---- debug sessions -------------------------------------------------------------------------------------------


@transaction.atomic
def reserve_debug_session(*, actor, team, cluster: Cluster, gpus: int, minutes: int,
                          gpu_type: GPUType | None = None, starts_at: datetime | None = None) -> DebugSession:
    """Reserve an interactive debug session (a pending Job under the debug contract, plus its window).

    Rules: the actor is a member or lead of the team (``team``); an active debug-queue contract exists
    (``contract``; the first by protection and name when there are several); 1 <= ``gpus`` <=
    ``PORTAL["DEBUG_MAX_GPUS"]`` and fits on ONE node of the cluster (``gpus``/``gpu_type``; a session never
    spans nodes); 1 <= ``minutes`` <=
    ``PORTAL["DEBUG_MAX_MINUTES"]``; ``starts_at`` (default now) is not in the past (2 minutes of tolerance) and
    at most 7 days ahead (``starts_at``); the actor holds fewer than ``PORTAL["DEBUG_MAX_SESSIONS_PER_USER"]``
    open sessions whose windows overlap this one (``starts_at``; 0: no limit), and the team fewer than
    ``PORTAL["DEBUG_MAX_SESSIONS_PER_TEAM"]`` (0, the default: no limit); a budget period is open at
    ``starts_at`` and the team has a budget in it.

    The per-user limit is what keeps the debug queue interactive (Slurm sites set ``MaxJobsPerUser`` on their
    interactive QOS for the same reason): a burst of sessions from one person, scripted or not, would otherwise
    fill the debug pool and make everyone else's sessions wait. Reservations of one user are serialised (a row
    lock on the user), so two at once cannot both take the last place.
    """
    _check_can_submit_for(actor, team)
    contract = Contract.objects.filter(queue=Queue.DEBUG, active=True).first()
    if contract is None:
        raise ValidationError("no active debug-queue contract exists; ask an operator to create one", field="contract")
    limits = settings.PORTAL
    max_gpus, max_minutes = limits["DEBUG_MAX_GPUS"], limits["DEBUG_MAX_MINUTES"]
    if not isinstance(gpus, int) or isinstance(gpus, bool) or not 1 <= gpus <= max_gpus:
        raise ValidationError(f"a debug session has 1 to {max_gpus} GPUs", field="gpus")
    if not isinstance(minutes, int) or isinstance(minutes, bool) or not 1 <= minutes <= max_minutes:
        raise ValidationError(f"a debug session lasts 1 to {max_minutes} minutes", field="minutes")
    now = timezone.now()
    starts_at = now if starts_at is None else starts_at
    if not isinstance(starts_at, datetime):
        raise ValidationError(f"{starts_at!r} is not a date and time", field="starts_at")
    if timezone.is_naive(starts_at):
        raise ValidationError("starts_at needs a time zone", field="starts_at")
    if starts_at < now - DEBUG_START_TOLERANCE:
        raise ValidationError("a debug session cannot start in the past", field="starts_at")
    if starts_at > now + DEBUG_MAX_AHEAD:
        raise ValidationError(f"a debug session can be reserved at most {DEBUG_MAX_AHEAD.days} days ahead",
                              field="starts_at")
    ends_at = starts_at + timedelta(minutes=minutes)
    _check_session_limit(actor, starts_at, ends_at, limits["DEBUG_MAX_SESSIONS_PER_USER"], per="person")
    _check_session_limit(team, starts_at, ends_at, limits["DEBUG_MAX_SESSIONS_PER_TEAM"], per="team")
    _check_cluster_and_shape(cluster=cluster, gpu_type=gpu_type, gpus=gpus, replicas=1)
    one_node = Node.objects.filter(cluster=cluster, gpus__gte=gpus)
    if not (one_node.filter(gpu_type=gpu_type) if gpu_type is not None else one_node).exists():
        of_type = f" {gpu_type}" if gpu_type is not None else ""
        raise ValidationError(f"a debug session runs on one node, and no node of cluster {cluster} has {gpus}"
                              f"{of_type} GPUs", field="gpus")
    _check_budget(team=team, at=max(starts_at, now), field="starts_at")
    job = _create_pending_job(actor=actor, reason="debug session reserved", team=team, cluster=cluster,
                              contract=contract, gpu_type=gpu_type, gpus=gpus, replicas=1, name="debug session")
    return DebugSession.objects.create(job=job, starts_at=starts_at, ends_at=ends_at)


def _check_session_limit(holder, starts_at: datetime, ends_at: datetime, limit: int, *, per: str) -> None:
    """Refuse a session that would give ``holder`` more than ``limit`` open sessions at once (0: no limit):
    ``per="person"`` for the actor's own sessions, ``per="team"`` for a team's."""
    if not limit:
        return
    model, mine = (get_user_model(), {"job__user": holder}) if per == "person" else (Team, {"job__team": holder})
    model.objects.select_for_update().filter(pk=holder.pk).first()  # one reservation per holder at a time
    held = sorted(_open_sessions(starts_at, ends_at).filter(**mine).values_list("job_id", flat=True))
    if len(held) >= limit:
        jobs = ", ".join(f"#{j}" for j in held)
        who, advice = (("you already hold", "end one") if per == "person"
                       else (f"team {holder} already holds", "ask a teammate to end one"))
        raise ValidationError(
            f"{who} {len(held)} debug session{'s' if len(held) != 1 else ''} in that window ({jobs}); the limit is "
            f"{limit} per {per}: {advice}, or reserve another time", field="starts_at")


def _open_sessions(starts_at: datetime, ends_at: datetime):
    """Sessions not released, whose job has not ended, whose window overlaps ``[starts_at, ends_at)``."""
    return DebugSession.objects.filter(
        released_at__isnull=True, starts_at__lt=ends_at, ends_at__gt=starts_at,
    ).exclude(job__state__in=FINAL_STATES)


# ---- nodes ----------------------------------------------------------------------------------------------------


@transaction.atomic
def set_node_health(*, actor, node: Node, health: str, reason: str) -> Node:
    """Mark a node healthy, draining or down (operators only: staff or superusers), with an audit row.

    No row is written when the health does not change. The change is a compare-and-swap on the health the
    caller saw. Preempting the jobs of a drained node (with their contract's grace) is the loop's job.
    """
    if actor is None or not actor.is_active or not (actor.is_staff or actor.is_superuser):
        raise PermissionDenied("only operators (staff) can change a node's health", field="node")
    if health not in Health.values:
        raise ValidationError(f"health must be one of {', '.join(Health.values)}", field="health")
    reason = (reason or "").strip()
    if not reason:
        raise ValidationError("say why the node's health changes", field="reason")
    old = node.health
    if old == health:
        return node
    if Node.objects.filter(pk=node.pk, health=old).update(health=health) != 1:
        raise ConflictError(f"node {node} is no longer {old} (someone else changed it)", field="health")
    NodeHealthChange.objects.create(node=node, old_health=old, new_health=health, actor=actor,
                                    reason=reason[:NodeHealthChange._meta.get_field("reason").max_length])
    node.refresh_from_db()
    return node
