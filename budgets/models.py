"""Teams (a tree), memberships and roles, budget periods, budgets, the append-only ledger, and contracts.

Rules that live here (enforced in the database where a database can): one membership per user and team, one
budget per team and period, one metering charge per job and interval, ledger rows never change once written.
Everything else (who may split what, children never exceeding their parent) lives in ``budgets.services``.
"""

from __future__ import annotations

from decimal import Decimal

from django.conf import settings
from django.core.validators import MinValueValidator
from django.db import models
from django.db.models import Q


class Team(models.Model):
    """A node of the organisation tree. ``path`` is the slash-joined slugs from the root (``lab/nlp/pretrain``)."""

    name = models.CharField(max_length=100)
    slug = models.SlugField(max_length=50)
    parent = models.ForeignKey("self", null=True, blank=True, on_delete=models.PROTECT, related_name="children")
    path = models.CharField(max_length=500, unique=True, editable=False)
    description = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["path"]
        constraints = [
            models.UniqueConstraint(fields=["parent", "slug"], name="team_slug_unique_among_siblings"),
        ]

    def __str__(self) -> str:
        return self.path

    @property
    def depth(self) -> int:
        return self.path.count("/")

    def ancestor_paths(self) -> list[str]:
        """Paths of this team and every ancestor, root first."""
        parts = self.path.split("/")
        return ["/".join(parts[: i + 1]) for i in range(len(parts))]

    def save(self, *args, **kwargs):
        self.path = f"{self.parent.path}/{self.slug}" if self.parent_id else self.slug
        super().save(*args, **kwargs)


class Role(models.TextChoices):
    LEAD = "lead", "Lead"
    MEMBER = "member", "Member"


class Membership(models.Model):
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships")
    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="memberships")
    role = models.CharField(max_length=10, choices=Role.choices, default=Role.MEMBER)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["user", "team"], name="one_membership_per_user_and_team")]

    def __str__(self) -> str:
        return f"{self.user} {self.role} of {self.team}"


class BudgetPeriod(models.Model):
    """A named time range (a month or a quarter) that budgets are granted for. ``[starts_at, ends_at)``."""

    name = models.CharField(max_length=50, unique=True)
    starts_at = models.DateTimeField()
    ends_at = models.DateTimeField()

    class Meta:
        ordering = ["-starts_at"]
        constraints = [
            models.CheckConstraint(condition=Q(ends_at__gt=models.F("starts_at")), name="period_ends_after_start"),
        ]

    def __str__(self) -> str:
        return self.name


class Budget(models.Model):
    """GPU-hours (H100-equivalent) granted to a team for a period. The balance is derived from the ledger."""

    team = models.ForeignKey(Team, on_delete=models.PROTECT, related_name="budgets")
    period = models.ForeignKey(BudgetPeriod, on_delete=models.PROTECT, related_name="budgets")
    gpu_hours = models.DecimalField(max_digits=14, decimal_places=3, validators=[MinValueValidator(Decimal(0))])
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["period", "team__path"]
        constraints = [
            models.UniqueConstraint(fields=["team", "period"], name="one_budget_per_team_and_period"),
            models.CheckConstraint(condition=Q(gpu_hours__gte=0), name="budget_grant_not_negative"),
        ]

    def __str__(self) -> str:
        return f"{self.team} {self.period}: {self.gpu_hours} GPU-h"


class BudgetChange(models.Model):
    """Audit trail of every grant change: who, when, old and new value, why."""

    budget = models.ForeignKey(Budget, on_delete=models.PROTECT, related_name="changes")
    actor = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+")
    old_gpu_hours = models.DecimalField(max_digits=14, decimal_places=3, null=True)
    new_gpu_hours = models.DecimalField(max_digits=14, decimal_places=3)
    reason = models.CharField(max_length=500, blank=True)
    at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-at", "-id"]


class AppendOnlyQuerySet(models.QuerySet):
    def update(self, **kwargs):
        raise LedgerIsAppendOnly("ledger entries cannot be updated; append a correcting entry instead")

    def delete(self):
        raise LedgerIsAppendOnly("ledger entries cannot be deleted; append a correcting entry instead")


class LedgerIsAppendOnly(Exception):
    pass


class EntryKind(models.TextChoices):
    CHARGE = "charge", "Charge"
    REFUND = "refund", "Refund"
    TRANSFER = "transfer", "Transfer"
    ADJUSTMENT = "adjustment", "Adjustment"


class LedgerEntry(models.Model):
    """One signed movement of GPU-hours on a budget: negative consumes, positive gives back.

    A budget's balance = its grant + the sum of its entries. Metering charges carry the job and the interval they
    cover; the unique constraint makes a second charge for the same job and interval impossible.
    """

    budget = models.ForeignKey(Budget, on_delete=models.PROTECT, related_name="entries")
    kind = models.CharField(max_length=12, choices=EntryKind.choices)
    gpu_hours = models.DecimalField(max_digits=14, decimal_places=4)
    actor = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                              related_name="+")
    reason = models.CharField(max_length=500, blank=True)
    # A string reference to the job (budgets never imports scheduling): "<job id>".
    job_ref = models.CharField(max_length=64, blank=True, db_index=True)
    interval_start = models.DateTimeField(null=True, blank=True)
    interval_end = models.DateTimeField(null=True, blank=True)
    # Both halves of a transfer share one id.
    transfer_id = models.UUIDField(null=True, blank=True, db_index=True)
    created_at = models.DateTimeField(auto_now_add=True)

    objects = AppendOnlyQuerySet.as_manager()

    class Meta:
        ordering = ["created_at", "id"]
        verbose_name_plural = "ledger entries"
        constraints = [
            models.UniqueConstraint(
                fields=["job_ref", "interval_start"],
                condition=Q(kind="charge"),
                name="one_charge_per_job_and_interval",
            ),
            models.CheckConstraint(
                condition=~Q(kind="charge") | (Q(gpu_hours__lte=0) & ~Q(job_ref="") & Q(interval_start__isnull=False)
                                               & Q(interval_end__gt=models.F("interval_start"))),
                name="charge_names_job_and_interval_and_consumes",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.kind} {self.gpu_hours} GPU-h on {self.budget}"

    def save(self, *args, **kwargs):
        if not self._state.adding:
            raise LedgerIsAppendOnly("ledger entries cannot be changed; append a correcting entry instead")
        super().save(*args, **kwargs)

    def delete(self, *args, **kwargs):
        raise LedgerIsAppendOnly("ledger entries cannot be deleted; append a correcting entry instead")


class Queue(models.TextChoices):
    BATCH = "batch", "Batch"
    DEBUG = "debug", "Debug (interactive)"


class Contract(models.Model):
    """A time-slice contract: protection from preemption, checkpoint grace, runtime cap, price (DESIGN.md §3)."""

    name = models.SlugField(max_length=50, unique=True)
    description = models.CharField(max_length=300, blank=True)
    queue = models.CharField(max_length=10, choices=Queue.choices, default=Queue.BATCH)
    protected_minutes = models.PositiveIntegerField(help_text="minutes from each start during which the job is "
                                                              "never preempted (except by a node drain)")
    grace_seconds = models.PositiveIntegerField(help_text="checkpoint notice given before the job is stopped")
    max_runtime_minutes = models.PositiveIntegerField(null=True, blank=True, help_text="empty: no limit")
    price_factor = models.DecimalField(max_digits=6, decimal_places=3, default=Decimal("1.000"),
                                       validators=[MinValueValidator(Decimal(0))])
    requeue_on_preemption = models.BooleanField(default=True)
    active = models.BooleanField(default=True)

    class Meta:
        ordering = ["queue", "protected_minutes", "name"]
        constraints = [models.CheckConstraint(condition=Q(price_factor__gte=0), name="contract_price_not_negative")]

    def __str__(self) -> str:
        return self.name
