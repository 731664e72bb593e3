"""Reads of the budgets app: who may see or govern which team, periods, budgets and balances.

Roles: a *lead* of a team governs its whole subtree; a *member* belongs to one team. Superusers (operators)
govern everything. Inactive or anonymous users govern and see nothing.

A budget's balance is never stored: it is the grant plus the sum of the budget's ledger entries, computed in the
database (``balance``, ``balances``, ``with_balance``).
"""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal

from django.db.models import DecimalField, ExpressionWrapper, F, OuterRef, Q, QuerySet, Subquery, Sum, Value
from django.db.models.functions import Coalesce
from django.utils import timezone

from budgets.models import Budget, BudgetPeriod, LedgerEntry, Membership, Role, Team

ZERO = Decimal(0)
# Wide enough for a grant (14, 3) plus any sum of entries (14, 4).
class _ExactDecimalField(DecimalField):
    """A decimal computed in SQL, brought back exact: SQLite does arithmetic on decimals in floating point (1000.000
    - 0.003 - 933.359 comes back as 66.6379999999999), and Django quantizes only plain columns. PostgreSQL's numeric
    is exact already, so this changes nothing there."""

    def from_db_value(self, value, expression, connection):
        return None if value is None else Decimal(value).quantize(_LEDGER_QUANTUM)


_LEDGER_QUANTUM = Decimal("0.0001")  # LedgerEntry.gpu_hours has 4 decimal places, grants 3
_BALANCE_FIELD = _ExactDecimalField(max_digits=20, decimal_places=4)


# --- roles --------------------------------------------------------------------------------------------------------

def _is_active(user) -> bool:
    return bool(user is not None and getattr(user, "is_authenticated", False) and getattr(user, "is_active", False))


def is_superuser(user) -> bool:
    return _is_active(user) and bool(user.is_superuser)


def is_lead_of(user, team: Team) -> bool:
    """True when ``user`` leads ``team`` or one of its ancestors (a lead governs the subtree), or is a superuser."""
    if not _is_active(user):
        return False
    if user.is_superuser:
        return True
    return Membership.objects.filter(user=user, role=Role.LEAD, team__path__in=team.ancestor_paths()).exists()


def is_member_of(user, team: Team) -> bool:
    """True when ``user`` is a member or lead of ``team``, or leads one of its ancestors (or is a superuser)."""
    if not _is_active(user):
        return False
    if user.is_superuser:
        return True
    ancestors = team.ancestor_paths()[:-1]
    return Membership.objects.filter(
        Q(team_id=team.pk) | Q(role=Role.LEAD, team__path__in=ancestors), user=user
    ).exists()


def may_set_grant(user, team: Team) -> bool:
    """Who may set (raise or lower) ``team``'s grant: a lead of its parent or above; for a root, a superuser.

    A lead of a team cannot change their own team's grant: that belongs to whoever governs the parent.
    """
    if is_superuser(user):
        return True
    if team.parent_id is None:
        return False
    return is_lead_of(user, team.parent)


def _subtree_q(paths, prefix: str = "") -> Q:
    q = Q(**{f"{prefix}pk__in": []})
    for path in paths:
        q |= Q(**{f"{prefix}path": path}) | Q(**{f"{prefix}path__startswith": f"{path}/"})
    return q


def teams_visible_to(user) -> QuerySet[Team]:
    """Teams in every subtree the user belongs to or leads, plus those subtrees' ancestors for context."""
    if not _is_active(user):
        return Team.objects.none()
    if user.is_superuser:
        return Team.objects.all()
    paths = list(Membership.objects.filter(user=user).values_list("team__path", flat=True))
    if not paths:
        return Team.objects.none()
    ancestors = {ancestor for path in paths for ancestor in Team(path=path).ancestor_paths()}
    return Team.objects.filter(_subtree_q(paths) | Q(path__in=ancestors))


def governed_teams(user) -> QuerySet[Team]:
    """Teams the user governs: the subtrees of the teams they lead (superuser: all teams)."""
    if not _is_active(user):
        return Team.objects.none()
    if user.is_superuser:
        return Team.objects.all()
    paths = list(Membership.objects.filter(user=user, role=Role.LEAD).values_list("team__path", flat=True))
    if not paths:
        return Team.objects.none()
    return Team.objects.filter(_subtree_q(paths))


def subtree(team: Team) -> QuerySet[Team]:
    """``team`` and all its descendants."""
    return Team.objects.filter(_subtree_q([team.path]))


# --- periods and budgets ------------------------------------------------------------------------------------------

def open_period(at: datetime | None = None) -> BudgetPeriod | None:
    """The period containing ``at`` (default: now), ``starts_at <= at < ends_at``; None when there is none."""
    at = at or timezone.now()
    return BudgetPeriod.objects.filter(starts_at__lte=at, ends_at__gt=at).order_by("starts_at").first()


def overlapping_periods(starts_at: datetime, ends_at: datetime) -> QuerySet[BudgetPeriod]:
    return BudgetPeriod.objects.filter(starts_at__lt=ends_at, ends_at__gt=starts_at).order_by("starts_at")


def budget_for(team: Team, period: BudgetPeriod) -> Budget | None:
    return Budget.objects.filter(team=team, period=period).select_related("team", "period").first()


def _balance_expression():
    """The team's own spendable hours: grant - what it split to its children + its own ledger entries.

    What a parent has split to its children is theirs to spend, not the parent's: counting it twice would let a
    transfer or a carry-over hand out hours the children already hold. Over a subtree the own balances add up to
    the subtree's grant + all its entries (see ``subtree_balance``).
    """
    children = (
        Budget.objects.filter(team__parent=OuterRef("team"), period=OuterRef("period"))
        .order_by().values("period").annotate(total=Sum("gpu_hours")).values("total")
    )
    split = Coalesce(Subquery(children, output_field=_BALANCE_FIELD), Value(ZERO), output_field=_BALANCE_FIELD)
    entries = Coalesce(Sum("entries__gpu_hours"), Value(ZERO), output_field=_BALANCE_FIELD)
    return ExpressionWrapper(F("gpu_hours") - split + entries, output_field=_BALANCE_FIELD)


def with_balance(queryset: QuerySet[Budget]) -> QuerySet[Budget]:
    """Annotate each budget with ``balance`` (grant - children's grants + its entries) in the same query."""
    return queryset.annotate(balance=_balance_expression())


def balance(budget: Budget) -> Decimal:
    """What the team itself can still spend: its grant minus its children's grants plus its ledger entries
    (one query; may be negative: "overdrawn with record")."""
    return (
        with_balance(Budget.objects.filter(pk=budget.pk)).values_list("balance", flat=True).get()
    )


def balances(period: BudgetPeriod) -> dict[int, Decimal]:
    """``{team_id: balance}`` for every budget of the period, in one query."""
    return dict(with_balance(Budget.objects.filter(period=period)).values_list("team_id", "balance"))


def subtree_balance(team: Team, period: BudgetPeriod) -> Decimal:
    """What the team and all its descendants can still spend together: the team's grant + every entry of the
    subtree's budgets in the period. This is what a lead's burn-down chart shows for the whole team."""
    grant = Budget.objects.filter(team=team, period=period).values_list("gpu_hours", flat=True).first()
    if grant is None:
        return ZERO
    spent = LedgerEntry.objects.filter(budget__period=period).filter(
        _subtree_q([team.path], prefix="budget__team__")).aggregate(
        total=Sum("gpu_hours", output_field=_BALANCE_FIELD))["total"]
    return grant + (spent if spent is not None else ZERO)


def children_granted(team: Team, period: BudgetPeriod) -> Decimal:
    """The sum of the grants of ``team``'s direct children in ``period``."""
    total = Budget.objects.filter(team__parent=team, period=period).aggregate(total=Sum("gpu_hours"))["total"]
    return total if total is not None else ZERO


def unallocated(team: Team, period: BudgetPeriod) -> Decimal:
    """``team``'s grant minus its children's grants: the unsplit remainder kept for its own members.

    A team without a budget in the period has a grant of 0.
    """
    grant = Budget.objects.filter(team=team, period=period).values_list("gpu_hours", flat=True).first()
    return (grant if grant is not None else ZERO) - children_granted(team, period)


def ledger_for(budget: Budget) -> QuerySet[LedgerEntry]:
    """The budget's ledger entries, oldest first."""
    return LedgerEntry.objects.filter(budget=budget).select_related("actor").order_by("created_at", "id")


def grant_history(budget: Budget):
    """The audit trail of the budget's grant, newest first."""
    return budget.changes.select_related("actor").order_by("-at", "-id")
