"""Clusters, nodes, GPU types, jobs with their state machine and events, debug sessions.

Job state changes go only through ``scheduling.services.transition`` (compare-and-swap + a JobEvent, in one
transaction); ``JobState.TRANSITIONS`` is the one table of legal moves.
"""

from __future__ import annotations

import math
from decimal import Decimal

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import MinValueValidator
from django.db import models
from django.db.models import Q


class GPUType(models.Model):
    """A GPU model and its price factor: one hour of it costs ``price_factor`` H100-equivalent GPU-hours."""

    name = models.CharField(max_length=30, unique=True)
    price_factor = models.DecimalField(max_digits=6, decimal_places=3, default=Decimal("1.000"),
                                       validators=[MinValueValidator(Decimal("0.001"))])
    memory_gb = models.PositiveIntegerField(null=True, blank=True)

    class Meta:
        ordering = ["name"]
        verbose_name = "GPU type"
        constraints = [models.CheckConstraint(condition=Q(price_factor__gt=0), name="gpu_price_factor_positive")]

    def __str__(self) -> str:
        return self.name


def json_problem(value) -> str | None:
    """Why ``value`` cannot be stored as JSON in every database (None when it can): NaN and infinities are not
    JSON, and PostgreSQL's jsonb refuses NUL characters."""
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN and infinite numbers are not valid JSON"
    if isinstance(value, str) and "\x00" in value:
        return "text must not contain NUL characters"
    if isinstance(value, dict):
        for key, item in value.items():
            problem = json_problem(key) or json_problem(item)
            if problem:
                return problem
    if isinstance(value, (list, tuple)):
        for item in value:
            problem = json_problem(item)
            if problem:
                return problem
    return None


class AdapterKind(models.TextChoices):
    SIMULATED = "simulated", "Simulated"
    SLURM = "slurm", "Slurm"
    KUBERNETES = "kubernetes", "Kubernetes"


class Cluster(models.Model):
    name = models.SlugField(max_length=50, unique=True)
    adapter = models.CharField(max_length=20, choices=AdapterKind.choices, default=AdapterKind.SIMULATED)
    adapter_settings = models.JSONField(default=dict, blank=True,
                                        help_text="adapter-specific settings, e.g. Slurm partition or speed-up")
    active = models.BooleanField(default=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    def clean(self):
        if self.adapter_settings is None:  # an emptied field: no settings
            self.adapter_settings = {}
        if not isinstance(self.adapter_settings, dict):
            raise ValidationError({"adapter_settings": 'must be a JSON object, e.g. {"partition": "gpu"}'})
        problem = json_problem(self.adapter_settings)
        if problem:
            raise ValidationError({"adapter_settings": problem})


class Health(models.TextChoices):
    HEALTHY = "healthy", "Healthy"
    DRAINING = "draining", "Draining"
    DOWN = "down", "Down"


class Node(models.Model):
    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="nodes")
    name = models.CharField(max_length=100)
    gpu_type = models.ForeignKey(GPUType, on_delete=models.PROTECT, related_name="nodes")
    gpus = models.PositiveIntegerField(validators=[MinValueValidator(1)])
    health = models.CharField(max_length=10, choices=Health.choices, default=Health.HEALTHY)
    debug_pool = models.BooleanField(default=False, help_text="GPUs kept for interactive debug sessions first")

    class Meta:
        ordering = ["cluster", "name"]
        constraints = [
            models.UniqueConstraint(fields=["cluster", "name"], name="node_name_unique_in_cluster"),
            models.CheckConstraint(condition=Q(gpus__gte=1), name="node_has_gpus"),
        ]

    def __str__(self) -> str:
        return f"{self.cluster}/{self.name}"


class NodeHealthChange(models.Model):
    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="health_changes")
    old_health = models.CharField(max_length=10, choices=Health.choices)
    new_health = models.CharField(max_length=10, choices=Health.choices)
    reason = models.CharField(max_length=500, blank=True)
    actor = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                              related_name="+")
    at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-at", "-id"]


class JobState(models.TextChoices):
    PENDING = "pending", "Pending"
    STARTING = "starting", "Starting"
    RUNNING = "running", "Running"
    PREEMPTING = "preempting", "Preempting"
    REQUEUED = "requeued", "Requeued"
    COMPLETED = "completed", "Completed"
    FAILED = "failed", "Failed"
    CANCELLED = "cancelled", "Cancelled"


# The one table of legal moves (DESIGN.md §3). A failing node stops a running job abruptly: running -> requeued.
TRANSITIONS: dict[str, frozenset[str]] = {
    JobState.PENDING: frozenset({JobState.STARTING, JobState.CANCELLED}),
    JobState.STARTING: frozenset({JobState.RUNNING, JobState.REQUEUED, JobState.FAILED, JobState.CANCELLED}),
    JobState.RUNNING: frozenset({JobState.PREEMPTING, JobState.REQUEUED, JobState.COMPLETED, JobState.FAILED,
                                 JobState.CANCELLED}),
    JobState.PREEMPTING: frozenset({JobState.REQUEUED, JobState.COMPLETED, JobState.FAILED, JobState.CANCELLED}),
    JobState.REQUEUED: frozenset({JobState.PENDING, JobState.CANCELLED}),
    JobState.COMPLETED: frozenset(),
    JobState.FAILED: frozenset(),
    JobState.CANCELLED: frozenset(),
}
ACTIVE_STATES = (JobState.STARTING, JobState.RUNNING, JobState.PREEMPTING)
FINAL_STATES = (JobState.COMPLETED, JobState.FAILED, JobState.CANCELLED)


class Job(models.Model):
    """A team's request for N GPUs of a type (a gang: all at once) under a contract, with its payload."""

    name = models.CharField(max_length=200, blank=True)
    team = models.ForeignKey("budgets.Team", on_delete=models.PROTECT, related_name="jobs")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="jobs")
    cluster = models.ForeignKey(Cluster, on_delete=models.PROTECT, related_name="jobs")
    contract = models.ForeignKey("budgets.Contract", on_delete=models.PROTECT, related_name="jobs")
    gpu_type = models.ForeignKey(GPUType, null=True, blank=True, on_delete=models.PROTECT, related_name="jobs",
                                 help_text="empty: any GPU type")
    gpus = models.PositiveIntegerField(validators=[MinValueValidator(1)])
    replicas = models.PositiveIntegerField(default=1, validators=[MinValueValidator(1)],
                                           help_text="gang over several nodes: gpus are split evenly over replicas")
    # Payload, close to what researchers already write for such clusters.
    image = models.CharField(max_length=300, blank=True)
    command = models.JSONField(default=list, blank=True)
    environment = models.JSONField(default=dict, blank=True)
    constraints = models.JSONField(default=dict, blank=True)
    # Scheduling state.
    state = models.CharField(max_length=12, choices=JobState.choices, default=JobState.PENDING, db_index=True)
    rank = models.IntegerField(default=0, help_text="order within the team, set by its lead (lower first)")
    scavenger = models.BooleanField(default=False, help_text="running as preemptible idle-GPU work")
    placement = models.JSONField(default=list, blank=True, help_text="[[node name, gpus], ...] of the current run")
    backend_id = models.CharField(max_length=100, blank=True)
    waiting_reason = models.CharField(max_length=500, blank=True)
    runs = models.PositiveIntegerField(default=0)
    exit_code = models.IntegerField(null=True, blank=True)
    submitted_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True, help_text="start of the current run")
    first_started_at = models.DateTimeField(null=True, blank=True)
    preempt_deadline = models.DateTimeField(null=True, blank=True)
    ended_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-submitted_at", "-id"]
        indexes = [models.Index(fields=["cluster", "state"])]
        constraints = [
            models.CheckConstraint(condition=Q(gpus__gte=1), name="job_has_gpus"),
            models.CheckConstraint(condition=Q(replicas__gte=1), name="job_has_replicas"),
        ]

    def __str__(self) -> str:
        return f"job {self.pk} ({self.name or 'unnamed'})"

    @property
    def gpus_per_replica(self) -> int:
        return self.gpus // self.replicas

    @property
    def is_final(self) -> bool:
        return self.state in FINAL_STATES


class JobEvent(models.Model):
    """One state transition of a job, with time and reason: the job's timeline."""

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="events")
    at = models.DateTimeField(auto_now_add=True)
    from_state = models.CharField(max_length=12, choices=JobState.choices)
    to_state = models.CharField(max_length=12, choices=JobState.choices)
    reason = models.CharField(max_length=500, blank=True)
    actor = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                              related_name="+")

    class Meta:
        ordering = ["at", "id"]

    def __str__(self) -> str:
        return f"{self.job_id}: {self.from_state} -> {self.to_state}"


class DebugSession(models.Model):
    """An interactive job in the debug queue, reserved for now or for a later window."""

    job = models.OneToOneField(Job, on_delete=models.CASCADE, related_name="debug_session")
    starts_at = models.DateTimeField(help_text="start of the reserved window (now for an immediate session)")
    ends_at = models.DateTimeField()
    released_at = models.DateTimeField(null=True, blank=True)
    release_reason = models.CharField(max_length=200, blank=True)

    class Meta:
        ordering = ["-starts_at"]
        constraints = [
            models.CheckConstraint(condition=Q(ends_at__gt=models.F("starts_at")), name="session_ends_after_start"),
        ]

    def __str__(self) -> str:
        return f"debug session of {self.job}"
