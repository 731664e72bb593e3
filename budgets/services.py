"""Writes of the budgets app (HackSoft services): keyword-only arguments, one transaction each, return the object.

Every service checks who may act and what the input means, raises a ``budgets.errors`` error naming the field,
and writes nothing when it raises. Rules kept here (DESIGN.md §3, §9):

* Grants form a tree: in every period the sum of a team's children's grants never exceeds the team's grant.
  Whoever changes grants under a parent locks the parent's budget row first (``SELECT ... FOR NO KEY UPDATE``,
  ancestors before descendants), so two concurrent splits cannot both pass the check.
* Only a lead of a team's parent (or above), or a superuser for a root team, sets the team's grant: a lead cannot
  raise their own team's grant. Every grant change writes one ``BudgetChange`` row (old, new, actor, reason).
* The ledger is append-only; a budget's balance = grant + sum of its entries.
* Metering is idempotent: one charge per (job_ref, interval_start), whatever the retries.
* **Overdrawn with record**: ``charge_usage`` never refuses a charge for lack of balance. The GPU-hours were
  already used, so the charge is recorded and the balance may go below zero; the policy stops admitting the
  team's new work instead. Transfers, on the contrary, never take a source below zero.
"""

from __future__ import annotations

import logging
import re
import uuid
from datetime import datetime
from decimal import ROUND_DOWN, ROUND_HALF_UP, Decimal, InvalidOperation

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import IntegrityError, connection, transaction
from django.db.models import Sum

from budgets import selectors
from budgets.errors import ConflictError, PermissionDenied, ValidationError
from budgets.models import (
    Budget,
    BudgetChange,
    BudgetPeriod,
    EntryKind,
    LedgerEntry,
    Membership,
    Role,
    Team,
)

logger = logging.getLogger(__name__)

ZERO = Decimal(0)
GRANT_PLACES = 3  # Budget.gpu_hours: max_digits=14, decimal_places=3
ENTRY_PLACES = 4  # LedgerEntry.gpu_hours: max_digits=14, decimal_places=4
MAX_DIGITS = 14
SLUG_RE = re.compile(r"\A[a-z0-9](?:[a-z0-9_-]{0,48}[a-z0-9])?\Z")  # \Z: "$" would accept a final newline
REASON_MAX = 500


# --- input helpers ------------------------------------------------------------------------------------------------

def fmt(value: Decimal) -> str:
    """A Decimal as people write it: ``1000``, ``12.5``."""
    text = f"{value:f}"
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return text if text not in ("", "-0") else "0"


def _show(value: Decimal) -> str:
    """``fmt`` for the numbers an error message quotes; exponent notation when written out it would be huge."""
    return fmt(value) if -30 < value.adjusted() < 30 else str(value)


def _to_decimal(value, *, field: str) -> Decimal:
    if isinstance(value, bool) or value is None:
        raise ValidationError(f"{value!r} is not a number of GPU-hours", field=field)
    try:
        if isinstance(value, Decimal):
            number = value
        elif isinstance(value, (int, float)):
            number = Decimal(repr(value)) if isinstance(value, float) else Decimal(value)
        elif isinstance(value, str):
            number = Decimal(value.strip())
        else:
            raise TypeError
    except (InvalidOperation, ValueError, TypeError):
        raise ValidationError(f"{value!r} is not a number of GPU-hours", field=field) from None
    if not number.is_finite():
        raise ValidationError(f"{value!r} is not a finite number of GPU-hours", field=field)
    return number


def _quantity(value, *, field: str, places: int, allow_zero: bool = True, allow_negative: bool = False,
              round_excess: bool = False) -> Decimal:
    """Parse a number of GPU-hours, refusing NaN, infinities, too many digits and (unless allowed) signs."""
    number = _to_decimal(value, field=field)
    limit = Decimal(10) ** (MAX_DIGITS - places)
    # Checked before quantizing too: quantize() itself fails on numbers beyond the context's precision (1e25).
    if number.copy_abs() >= limit:
        raise ValidationError(f"{_show(number)} GPU-hours is too large (at most {MAX_DIGITS - places} digits "
                              "before the decimal point)", field=field)
    quantum = Decimal(1).scaleb(-places)
    if number != number.quantize(quantum, rounding=ROUND_DOWN):
        if not round_excess:
            raise ValidationError(f"{_show(number)} has more than {places} decimal places", field=field)
        number = number.quantize(quantum, rounding=ROUND_HALF_UP)
    number = number.quantize(quantum)
    if number.copy_abs() >= limit:  # rounding up may reach the limit
        raise ValidationError(f"{fmt(number)} GPU-hours is too large", field=field)
    if number < 0 and not allow_negative:
        raise ValidationError(f"must not be negative (got {fmt(number)})", field=field)
    if number == 0 and not allow_zero:
        raise ValidationError("must not be zero", field=field)
    return number


def _reason(reason, *, required: bool) -> str:
    text = (reason or "").strip() if isinstance(reason, str) or reason is None else None
    if text is None:
        raise ValidationError("must be text", field="reason")
    if required and not text:
        raise ValidationError("a reason is required", field="reason")
    if len(text) > REASON_MAX:
        raise ValidationError(f"at most {REASON_MAX} characters (got {len(text)})", field="reason")
    return text


def _aware(value, *, field: str) -> datetime:
    if not isinstance(value, datetime):
        raise ValidationError(f"{value!r} is not a date and time", field=field)
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValidationError("needs a time zone", field=field)
    return value


def _who(actor) -> str:
    return getattr(actor, "username", None) or "an anonymous user"


# --- teams and memberships ----------------------------------------------------------------------------------------

@transaction.atomic
def create_team(*, actor, name: str, slug: str, parent: Team | None = None, description: str = "") -> Team:
    """Create a team. A root team: superusers only; a child: a lead of the parent (or of an ancestor)."""
    if parent is None:
        if not selectors.is_superuser(actor):
            raise PermissionDenied(f"{_who(actor)} may not create a root team; only operators may", field="parent")
    elif not selectors.is_lead_of(actor, parent):
        raise PermissionDenied(f"{_who(actor)} does not lead {parent.path}, so may not add a team under it",
                               field="parent")
    name = (name or "").strip() if isinstance(name, str) else ""
    if not name:
        raise ValidationError("a name is required", field="name")
    if len(name) > 100:
        raise ValidationError(f"at most 100 characters (got {len(name)})", field="name")
    if not isinstance(slug, str) or not SLUG_RE.match(slug):
        raise ValidationError(
            f"{slug!r} is not a valid slug: use 1 to 50 lowercase letters, digits, '-' or '_', "
            "starting and ending with a letter or digit", field="slug")
    path = f"{parent.path}/{slug}" if parent else slug
    if len(path) > 500:
        raise ValidationError(f"the team path {path} would be longer than 500 characters", field="slug")
    if Team.objects.filter(path=path).exists():
        where = f"under {parent.path}" if parent else "among the root teams"
        raise ValidationError(f"a team {slug!r} already exists {where} ({path})", field="slug")
    team = Team(name=name, slug=slug, parent=parent, description=description or "")
    try:
        with transaction.atomic():
            team.save()
    except IntegrityError:
        raise ConflictError(f"a team {path} was just created by someone else", field="slug") from None
    return team


@transaction.atomic
def add_membership(*, actor, team: Team, user, role: str = Role.MEMBER) -> Membership:
    """Add ``user`` to ``team`` with ``role``, or change the role of an existing membership.

    Only a lead of the team (or of an ancestor), or a superuser.
    """
    if not selectors.is_lead_of(actor, team):
        raise PermissionDenied(f"{_who(actor)} does not lead {team.path}, so may not change its members",
                               field="team")
    if role not in Role.values:
        raise ValidationError(f"{role!r} is not a role; use one of {', '.join(Role.values)}", field="role")
    User = get_user_model()
    if not isinstance(user, User) or user.pk is None:
        raise ValidationError(f"{user!r} is not a user", field="user")
    membership = Membership.objects.select_for_update().filter(user=user, team=team).first()
    if membership is not None:
        if membership.role != role:
            membership.role = role
            membership.save(update_fields=["role"])
        return membership
    try:
        with transaction.atomic():
            return Membership.objects.create(user=user, team=team, role=role)
    except IntegrityError:
        raise ConflictError(f"{user} was just added to {team.path} by someone else", field="user") from None


@transaction.atomic
def remove_membership(*, actor, team: Team, user) -> Membership:
    """Remove ``user`` from ``team``. Only a lead of the team (or of an ancestor), or a superuser."""
    if not selectors.is_lead_of(actor, team):
        raise PermissionDenied(f"{_who(actor)} does not lead {team.path}, so may not change its members",
                               field="team")
    membership = Membership.objects.select_for_update().filter(user=user, team=team).first()
    if membership is None:
        raise ValidationError(f"{user} is not a member of {team.path}", field="user")
    membership.delete()
    return membership


def _serialize(key: str) -> None:
    """Serialise writers that check "no other row like this" (inserts cannot be locked in advance): on PostgreSQL
    a transaction-scoped advisory lock; SQLite already runs one writing transaction at a time."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", [key])


# --- periods ------------------------------------------------------------------------------------------------------

@transaction.atomic
def create_period(*, actor, name: str, starts_at: datetime, ends_at: datetime) -> BudgetPeriod:
    """Create a budget period ``[starts_at, ends_at)``. Operators (superusers) only; periods never overlap."""
    if not selectors.is_superuser(actor):
        raise PermissionDenied(f"{_who(actor)} may not create budget periods; only operators may")
    name = (name or "").strip() if isinstance(name, str) else ""
    if not name:
        raise ValidationError("a name is required", field="name")
    if len(name) > 50:
        raise ValidationError(f"at most 50 characters (got {len(name)})", field="name")
    _aware(starts_at, field="starts_at")
    _aware(ends_at, field="ends_at")
    if ends_at <= starts_at:
        raise ValidationError(f"the period must end after it starts ({ends_at:%Y-%m-%d %H:%M} is not after "
                              f"{starts_at:%Y-%m-%d %H:%M})", field="ends_at")
    _serialize("budgets.create_period")
    if BudgetPeriod.objects.filter(name=name).exists():
        raise ValidationError(f"a period named {name!r} already exists", field="name")
    other = selectors.overlapping_periods(starts_at, ends_at).first()
    if other is not None:
        raise ValidationError(
            f"the period would overlap {other.name} ({other.starts_at:%Y-%m-%d %H:%M} to "
            f"{other.ends_at:%Y-%m-%d %H:%M})", field="starts_at")
    try:
        with transaction.atomic():
            return BudgetPeriod.objects.create(name=name, starts_at=starts_at, ends_at=ends_at)
    except IntegrityError:
        raise ConflictError(f"a period named {name!r} was just created by someone else", field="name") from None


# --- grants -------------------------------------------------------------------------------------------------------

def _lock_budgets(period: BudgetPeriod, team_ids) -> dict[int, Budget]:
    """Lock the period's budgets of these teams, ancestors first (one statement, a stable order: no deadlocks)."""
    rows = (
        Budget.objects.select_for_update(no_key=True, of=("self",))
        .filter(period=period, team_id__in=list(team_ids))
        .select_related("team")
        .order_by("team__path")
    )
    return {budget.team_id: budget for budget in rows}


def _apply_grants(*, actor, period: BudgetPeriod, changes: dict[Team, Decimal], reason: str,
                  field: str) -> list[Budget]:
    """Set several grants of one period at once, all or nothing, keeping the tree rule. Call inside a transaction.

    ``changes`` maps teams to already-parsed grants. Checks: the actor may set each grant, each team's parent has
    a budget, and for every changed team and every parent of one: its children's grants <= its grant.
    """
    teams = sorted(changes, key=lambda t: t.path)
    for team in teams:
        if not selectors.may_set_grant(actor, team):
            if team.parent_id is None:
                why = f"{team.path} is a root team; only operators set its grant"
            elif selectors.is_lead_of(actor, team):
                why = (f"a lead cannot set their own team's grant; a lead of {team.parent.path} sets the grant "
                       f"of {team.path}")
            else:
                why = f"{_who(actor)} does not lead {team.parent.path}, so may not set the grant of {team.path}"
            raise PermissionDenied(why, field=field)

    changed_ids = {team.pk for team in teams}
    parent_ids = {team.parent_id for team in teams if team.parent_id}
    locked = _lock_budgets(period, changed_ids | parent_ids)

    # Every team whose children's total we must check, and the final grant of each child after the change.
    checked_ids = changed_ids | parent_ids
    final: dict[int, Decimal] = {team_id: budget.gpu_hours for team_id, budget in locked.items()}
    children: dict[int, dict[int, Decimal]] = {team_id: {} for team_id in checked_ids}
    for team_id, parent_id, grant in Budget.objects.filter(period=period, team__parent_id__in=checked_ids) \
            .values_list("team_id", "team__parent_id", "gpu_hours"):
        children[parent_id][team_id] = grant
    for team in teams:
        final[team.pk] = changes[team]
        if team.parent_id:
            children[team.parent_id][team.pk] = changes[team]

    for team in teams:
        if team.parent_id and team.parent_id not in final:
            raise ValidationError(f"{team.parent.path} has no budget in {period.name}; grant it before "
                                  f"splitting it among its children", field=field)

    paths = {team.pk: team.path for team in teams}
    paths.update({budget.team_id: budget.team.path for budget in locked.values()})
    for team_id in sorted(checked_ids & final.keys(), key=lambda i: paths[i]):
        given = sum(children[team_id].values(), ZERO)
        holds = final[team_id]
        if given <= holds:
            continue
        path = paths[team_id]
        if team_id in changed_ids and not (children[team_id].keys() & changed_ids):
            raise ValidationError(f"{path} would hold {fmt(holds)} GPU-hours in {period.name}, less than the "
                                  f"{fmt(given)} already granted to its children", field=field)
        raise ValidationError(f"the children of {path} would receive {fmt(given)} GPU-hours, but {path} holds "
                              f"{fmt(holds)} in {period.name}", field=field)

    result = []
    for team in teams:
        new = changes[team]
        budget = locked.get(team.pk)
        if budget is None:
            try:
                with transaction.atomic():
                    budget = Budget.objects.create(team=team, period=period, gpu_hours=new)
            except IntegrityError:
                raise ConflictError(f"a budget for {team.path} in {period.name} was just created by someone else; "
                                    "try again", field=field) from None
            BudgetChange.objects.create(budget=budget, actor=actor, old_gpu_hours=None, new_gpu_hours=new,
                                        reason=reason)
        elif budget.gpu_hours != new:
            old = budget.gpu_hours
            budget.gpu_hours = new
            budget.save(update_fields=["gpu_hours", "updated_at"])
            BudgetChange.objects.create(budget=budget, actor=actor, old_gpu_hours=old, new_gpu_hours=new,
                                        reason=reason)
        budget.team = team
        budget.period = period
        result.append(budget)
    return result


def _actor_or_none(actor):
    return actor if actor is not None and getattr(actor, "pk", None) is not None else None


@transaction.atomic
def grant_budget(*, actor, team: Team, period: BudgetPeriod, gpu_hours, reason: str = "") -> Budget:
    """Set (create or change) ``team``'s grant for ``period``; audited. See the module rules."""
    hours = _quantity(gpu_hours, field="gpu_hours", places=GRANT_PLACES)
    reason = _reason(reason, required=False)
    (budget,) = _apply_grants(actor=actor, period=period, changes={team: hours}, reason=reason, field="gpu_hours")
    return budget


@transaction.atomic
def split_budget(*, actor, team: Team, period: BudgetPeriod, grants: dict[Team, Decimal],
                 reason: str = "") -> list[Budget]:
    """Set the grants of several children of ``team`` at once (a lead's "split in place"), all or nothing.

    Returns the children's budgets, in path order. One audit row per changed child.
    """
    if not isinstance(grants, dict) or not grants:
        raise ValidationError("give at least one child team and its grant", field="grants")
    reason = _reason(reason, required=False)
    changes: dict[Team, Decimal] = {}
    for child, hours in grants.items():
        if not isinstance(child, Team) or child.parent_id != team.pk:
            raise ValidationError(f"{getattr(child, 'path', child)} is not a child team of {team.path}",
                                  field="grants")
        changes[child] = _quantity(hours, field=f"grants[{child.path}]", places=GRANT_PLACES)
    if not selectors.is_lead_of(actor, team):
        raise PermissionDenied(f"{_who(actor)} does not lead {team.path}, so may not split its budget",
                               field="grants")
    return _apply_grants(actor=actor, period=period, changes=changes, reason=reason, field="grants")


@transaction.atomic
def copy_grants(*, actor, source_period: BudgetPeriod, target_period: BudgetPeriod,
                reason: str = "") -> list[Budget]:
    """Copy the grants the actor governs from ``source_period`` into ``target_period``, in one action.

    The actor's grants are those of the teams whose parent they lead (all teams for a superuser). Each new grant =
    the old grant + ``settings.PORTAL["CARRY_OVER_SHARE"]`` x the unused balance (when both are > 0), rounded
    down to 0.001. Same rules as ``grant_budget``, all or nothing; grants already equal are left untouched, so
    copying twice changes nothing the second time. Returns the target budgets written or confirmed.
    """
    if source_period.pk == target_period.pk:
        raise ValidationError("the source and target periods are the same", field="target_period")
    if not selectors.is_superuser(actor) and not selectors.governed_teams(actor).exists():
        raise PermissionDenied(f"{_who(actor)} leads no team, so governs no grants to copy", field="source_period")
    share = _to_decimal(settings.PORTAL.get("CARRY_OVER_SHARE", 0), field="CARRY_OVER_SHARE")
    if not ZERO <= share <= 1:
        raise ValidationError(f"the carry-over share must lie between 0 and 1 (got {fmt(share)})",
                              field="CARRY_OVER_SHARE")
    sources = Budget.objects.filter(period=source_period).select_related("team", "team__parent")
    if not selectors.is_superuser(actor):
        governed = selectors.governed_teams(actor)
        sources = sources.filter(team__parent__in=governed)
    sources = list(sources.order_by("team__path"))
    carry = _carry_over(source_period, share) if share > 0 else {}
    changes: dict[Team, Decimal] = {}
    for budget in sources:
        grant = budget.gpu_hours + carry.get(budget.team_id, ZERO)
        changes[budget.team] = _quantity(grant, field="gpu_hours", places=GRANT_PLACES)
    if not changes:
        return []
    reason = _reason(reason, required=False) or f"copied from {source_period.name}"
    return _apply_grants(actor=actor, period=target_period, changes=changes, reason=reason, field="gpu_hours")


def _carry_over(period: BudgetPeriod, share: Decimal) -> dict[int, Decimal]:
    """``{team_id: GPU-hours carried}``: share x the team's own unused balance, plus what its children carry.

    Summed bottom-up, so a parent's grant grows by at least what its children's grants grow by and the children
    never exceed the parent in the copy either.
    """
    budgets = list(selectors.with_balance(Budget.objects.filter(period=period)).select_related("team"))
    by_team = {b.team_id: b for b in budgets}
    carry: dict[int, Decimal] = {}
    for budget in sorted(budgets, key=lambda b: -b.team.depth):  # leaves first
        own = (share * max(budget.balance, ZERO)).quantize(Decimal("0.001"), rounding=ROUND_DOWN)
        carry[budget.team_id] = carry.get(budget.team_id, ZERO) + own
        parent_id = budget.team.parent_id
        if parent_id in by_team:
            carry[parent_id] = carry.get(parent_id, ZERO) + carry[budget.team_id]
    return carry


# --- the ledger ---------------------------------------------------------------------------------------------------

def _lock_budget(budget: Budget) -> Budget:
    return Budget.objects.select_for_update(no_key=True, of=("self",)).select_related("team", "period") \
        .get(pk=budget.pk)


@transaction.atomic
def transfer(*, actor, source: Team, target: Team, period: BudgetPeriod, gpu_hours, reason: str):
    """Move GPU-hours of balance (not grant) from ``source`` to ``target`` in ``period``.

    The actor must lead both teams (a common governed ancestor will do). The source's balance may not go below
    zero. Writes two entries of kind ``transfer`` sharing one ``transfer_id``: -x on the source, +x on the
    target. Returns ``(source_entry, target_entry)``.
    """
    hours = _quantity(gpu_hours, field="gpu_hours", places=ENTRY_PLACES, allow_zero=False)
    reason = _reason(reason, required=True)
    if source.pk == target.pk:
        raise ValidationError(f"the source and the target are the same team ({source.path})", field="target")
    for field, team in (("source", source), ("target", target)):
        if not selectors.is_lead_of(actor, team):
            raise PermissionDenied(f"{_who(actor)} does not lead {team.path}, so may not move its GPU-hours",
                                   field=field)
    locked = _lock_budgets(period, [source.pk, target.pk])
    for field, team in (("source", source), ("target", target)):
        if team.pk not in locked:
            raise ValidationError(f"{team.path} has no budget in {period.name}", field=field)
    available = selectors.balance(locked[source.pk])
    if available - hours < 0:
        raise ValidationError(f"{source.path} has a balance of {fmt(available)} GPU-hours in {period.name}; it "
                              f"cannot give {fmt(hours)}", field="gpu_hours")
    transfer_id = uuid.uuid4()
    out = LedgerEntry.objects.create(budget=locked[source.pk], kind=EntryKind.TRANSFER, gpu_hours=-hours,
                                     actor=actor, reason=reason, transfer_id=transfer_id)
    into = LedgerEntry.objects.create(budget=locked[target.pk], kind=EntryKind.TRANSFER, gpu_hours=hours,
                                      actor=actor, reason=reason, transfer_id=transfer_id)
    return out, into


@transaction.atomic
def charge_usage(*, budget: Budget, job_ref: str, interval_start: datetime, interval_end: datetime,
                 gpu_hours) -> tuple[LedgerEntry, bool]:
    """Charge a job's usage for one interval, exactly once. Returns ``(entry, created)``.

    ``gpu_hours`` > 0 is given (rounded half-up to 0.0001) and stored negative. A second call for the same
    ``job_ref`` and ``interval_start`` returns the existing entry with ``created=False`` and charges nothing,
    even when two calls race on PostgreSQL: the unique constraint decides, the loser's insert fails inside a
    savepoint (so an outer transaction survives) and it reads the winner's row. Balance is not checked: a charge
    may take the balance below zero ("overdrawn with record": the work was done and must be recorded).
    """
    if not isinstance(job_ref, str) or not job_ref.strip():
        raise ValidationError("a job reference is required", field="job_ref")
    if len(job_ref) > 64:
        raise ValidationError(f"at most 64 characters (got {len(job_ref)})", field="job_ref")
    _aware(interval_start, field="interval_start")
    _aware(interval_end, field="interval_end")
    if interval_end <= interval_start:
        raise ValidationError("the interval must end after it starts", field="interval_end")
    number = _to_decimal(gpu_hours, field="gpu_hours")
    if number <= 0:
        raise ValidationError(f"a charge must be positive (got {fmt(number)})", field="gpu_hours")
    hours = _quantity(number, field="gpu_hours", places=ENTRY_PLACES, round_excess=True)

    lookup = dict(kind=EntryKind.CHARGE, job_ref=job_ref, interval_start=interval_start)
    existing = LedgerEntry.objects.filter(**lookup).first()
    if existing is not None:
        _warn_if_different(existing, budget, hours)
        return existing, False
    try:
        with transaction.atomic():
            entry = LedgerEntry.objects.create(budget=budget, kind=EntryKind.CHARGE, gpu_hours=-hours,
                                               job_ref=job_ref, interval_start=interval_start,
                                               interval_end=interval_end)
    except IntegrityError:
        existing = LedgerEntry.objects.filter(**lookup).first()
        if existing is None:  # not the uniqueness race: a real error
            raise
        _warn_if_different(existing, budget, hours)
        return existing, False
    return entry, True


def _warn_if_different(existing: LedgerEntry, budget: Budget, hours: Decimal) -> None:
    if existing.budget_id != budget.pk or existing.gpu_hours != -hours:
        logger.warning("charge for job %s interval %s already recorded as %s GPU-h on budget %s; a retry asked "
                       "for %s GPU-h on budget %s and was ignored", existing.job_ref, existing.interval_start,
                       existing.gpu_hours, existing.budget_id, -hours, budget.pk)


@transaction.atomic
def refund(*, budget: Budget, job_ref: str, gpu_hours, reason: str, actor=None) -> LedgerEntry:
    """Give back GPU-hours charged to a job on this budget (a positive ``refund`` entry).

    Never more than the job was charged on this budget minus what was already refunded. ``actor=None`` is the
    system (for example the scheduler refunding a preempted protected slice); a person must be allowed to set the
    budget's grant (a lead of the parent, or a superuser).
    """
    if actor is not None and not selectors.may_set_grant(actor, budget.team):
        raise PermissionDenied(f"{_who(actor)} may not refund GPU-hours to {budget.team.path}; a lead of its "
                               "parent team or an operator may")
    if not isinstance(job_ref, str) or not job_ref.strip():
        raise ValidationError("a job reference is required", field="job_ref")
    hours = _quantity(gpu_hours, field="gpu_hours", places=ENTRY_PLACES, allow_zero=False)
    reason = _reason(reason, required=True)
    budget = _lock_budget(budget)
    totals = {kind: total for kind, total in LedgerEntry.objects.filter(
        budget=budget, job_ref=job_ref, kind__in=[EntryKind.CHARGE, EntryKind.REFUND]
    ).values("kind").annotate(total=Sum("gpu_hours")).order_by().values_list("kind", "total")}
    charged = -(totals.get(EntryKind.CHARGE) or ZERO)
    refunded = totals.get(EntryKind.REFUND) or ZERO
    if refunded + hours > charged:
        raise ValidationError(f"job {job_ref} was charged {fmt(charged)} GPU-hours on {budget.team.path} in "
                              f"{budget.period.name} and {fmt(refunded)} were already refunded; "
                              f"{fmt(hours)} more is too much", field="gpu_hours")
    return LedgerEntry.objects.create(budget=budget, kind=EntryKind.REFUND, gpu_hours=hours, job_ref=job_ref,
                                      reason=reason, actor=_actor_or_none(actor))


@transaction.atomic
def adjust(*, actor, budget: Budget, gpu_hours, reason: str) -> LedgerEntry:
    """Correct a balance by a signed, non-zero amount (an ``adjustment`` entry). A lead of the parent or an
    operator; a reason is required. Adjustments may take the balance below zero (it is a correction)."""
    if not selectors.may_set_grant(actor, budget.team):
        raise PermissionDenied(f"{_who(actor)} may not adjust the balance of {budget.team.path}; a lead of its "
                               "parent team or an operator may")
    hours = _quantity(gpu_hours, field="gpu_hours", places=ENTRY_PLACES, allow_zero=False, allow_negative=True)
    reason = _reason(reason, required=True)
    budget = _lock_budget(budget)
    return LedgerEntry.objects.create(budget=budget, kind=EntryKind.ADJUSTMENT, gpu_hours=hours, actor=actor,
                                      reason=reason)
