"""The append-only ledger: transfers, idempotent metering, refunds and adjustments; balances derive from it."""

from datetime import timedelta
from decimal import Decimal

import pytest
from django.db import transaction
from django.utils import timezone

from budgets import selectors, services
from budgets.errors import PermissionDenied, ValidationError
from budgets.models import Budget, EntryKind, LedgerEntry, LedgerIsAppendOnly
from tests.factories import BudgetFactory, BudgetPeriodFactory

pytestmark = pytest.mark.django_db

T0 = timezone.now().replace(microsecond=0) - timedelta(days=1)


@pytest.fixture
def split(funded):
    """lab/nlp (1000) split: pretrain 600, eval 300."""
    w = funded
    services.split_budget(actor=w.lead, team=w.nlp, period=w.period, grants={w.pretrain: 600, w.eval: 300})
    w.pretrain_budget = Budget.objects.get(team=w.pretrain, period=w.period)
    w.eval_budget = Budget.objects.get(team=w.eval, period=w.period)
    return w


def charge(budget, job="job-1", start=T0, hours=1, gpu_hours="10"):
    return services.charge_usage(budget=budget, job_ref=job, interval_start=start,
                                 interval_end=start + timedelta(hours=hours), gpu_hours=Decimal(gpu_hours))


# --- append-only ------------------------------------------------------------------------------------------------

def test_the_ledger_is_append_only(split):
    entry, _ = charge(split.pretrain_budget)
    entry.reason = "edited"
    with pytest.raises(LedgerIsAppendOnly):
        entry.save()
    with pytest.raises(LedgerIsAppendOnly):
        entry.delete()
    with pytest.raises(LedgerIsAppendOnly):
        LedgerEntry.objects.filter(pk=entry.pk).update(gpu_hours=0)
    with pytest.raises(LedgerIsAppendOnly):
        LedgerEntry.objects.all().delete()
    with pytest.raises(LedgerIsAppendOnly):
        split.pretrain_budget.entries.all().update(reason="x")
    stored = LedgerEntry.objects.get()
    assert (stored.gpu_hours, stored.reason) == (Decimal(-10), "")


# --- metering ---------------------------------------------------------------------------------------------------

def test_a_charge_is_stored_negative_and_lowers_the_balance(split):
    entry, created = charge(split.pretrain_budget, gpu_hours="12.25")
    assert created
    assert (entry.kind, entry.gpu_hours, entry.job_ref) == (EntryKind.CHARGE, Decimal("-12.25"), "job-1")
    assert selectors.balance(split.pretrain_budget) == Decimal("587.75")


def test_metering_is_idempotent_for_the_same_job_and_interval(split):
    first, created = charge(split.pretrain_budget)
    again, created_again = charge(split.pretrain_budget)
    assert created and not created_again
    assert again.pk == first.pk
    assert LedgerEntry.objects.count() == 1
    assert selectors.balance(split.pretrain_budget) == Decimal(590)


def test_a_retry_with_other_numbers_still_charges_once(split, caplog):
    charge(split.pretrain_budget, gpu_hours="10")
    entry, created = charge(split.eval_budget, gpu_hours="99")
    assert not created and entry.gpu_hours == Decimal(-10)
    assert selectors.balance(split.eval_budget) == Decimal(300)
    assert "was ignored" in caplog.text


def test_different_intervals_or_jobs_are_separate_charges(split):
    charge(split.pretrain_budget, start=T0)
    charge(split.pretrain_budget, start=T0 + timedelta(hours=1))
    charge(split.pretrain_budget, job="job-2", start=T0)
    assert LedgerEntry.objects.count() == 3
    assert selectors.balance(split.pretrain_budget) == Decimal(570)


def test_a_duplicate_inside_an_outer_transaction_leaves_it_usable(split):
    """The IntegrityError path: the first lookup misses (simulated), the insert fails in a savepoint, the outer
    transaction carries on."""
    first, _ = charge(split.pretrain_budget)
    real_filter = LedgerEntry.objects.filter
    calls = []

    class MissOnce:
        def __call__(self, *args, **kwargs):
            calls.append(kwargs)
            if len(calls) == 1:
                return LedgerEntry.objects.none()
            return real_filter(*args, **kwargs)

    with transaction.atomic():
        LedgerEntry.objects.filter = MissOnce()
        try:
            entry, created = charge(split.pretrain_budget)
        finally:
            del LedgerEntry.objects.filter
        assert (entry.pk, created) == (first.pk, False)
        services.adjust(actor=split.operator, budget=split.pretrain_budget, gpu_hours=1, reason="still usable")
    assert len(calls) == 2
    assert LedgerEntry.objects.count() == 2


def test_charges_may_overdraw_the_balance_with_a_record(split):
    charge(split.eval_budget, gpu_hours="250")
    entry, created = charge(split.eval_budget, start=T0 + timedelta(hours=1), gpu_hours="100")
    assert created
    assert selectors.balance(split.eval_budget) == Decimal(-50)


def test_charge_rounds_to_the_ledger_precision(split):
    entry, _ = charge(split.pretrain_budget, gpu_hours="0.123456")
    assert entry.gpu_hours == Decimal("-0.1235")


@pytest.mark.parametrize("kwargs, field", [
    (dict(gpu_hours=Decimal(0)), "gpu_hours"),
    (dict(gpu_hours=Decimal(-3)), "gpu_hours"),
    (dict(gpu_hours=Decimal("NaN")), "gpu_hours"),
    (dict(gpu_hours="ten"), "gpu_hours"),
    (dict(job_ref=""), "job_ref"),
    (dict(job_ref="x" * 65), "job_ref"),
    (dict(interval_end=T0), "interval_end"),
    (dict(interval_start=T0.replace(tzinfo=None)), "interval_start"),
])
def test_bad_charges_are_refused(split, rows, kwargs, field):
    args = dict(budget=split.pretrain_budget, job_ref="job-1", interval_start=T0, interval_end=T0 + timedelta(hours=1),
                gpu_hours=Decimal(1))
    args.update(kwargs)
    before = rows()
    with pytest.raises(ValidationError) as error:
        services.charge_usage(**args)
    assert error.value.field == field
    assert rows() == before


# --- transfers --------------------------------------------------------------------------------------------------

def test_a_lead_moves_balance_between_teams_they_lead(split):
    w = split
    out, into = services.transfer(actor=w.lead, source=w.pretrain, target=w.eval, period=w.period,
                                  gpu_hours=Decimal(100), reason="eval sprint")
    assert out.transfer_id == into.transfer_id is not None
    assert (out.kind, out.gpu_hours, out.budget, out.actor, out.reason) == \
        (EntryKind.TRANSFER, Decimal(-100), w.pretrain_budget, w.lead, "eval sprint")
    assert (into.gpu_hours, into.budget) == (Decimal(100), w.eval_budget)
    assert selectors.balance(w.pretrain_budget) == 500
    assert selectors.balance(w.eval_budget) == 400
    # Grants are untouched: a transfer moves balance, not grant.
    assert (Budget.objects.get(pk=w.pretrain_budget.pk).gpu_hours, Budget.objects.get(pk=w.eval_budget.pk).gpu_hours) \
        == (600, 300)


def test_a_lead_may_move_from_their_own_team_to_a_child(split):
    w = split
    services.transfer(actor=w.lead, source=w.nlp, target=w.eval, period=w.period, gpu_hours=50, reason="top up")
    # nlp split 900 of its 1000 to its children: only its unsplit 100 was its own to move.
    assert selectors.balance(Budget.objects.get(team=w.nlp, period=w.period)) == 50
    assert selectors.balance(w.eval_budget) == 350
    assert selectors.subtree_balance(w.nlp, w.period) == 1000


def test_a_parent_cannot_transfer_hours_its_children_already_hold(split, rows):
    w = split
    before = rows()
    with pytest.raises(ValidationError) as err:
        services.transfer(actor=w.lead, source=w.nlp, target=w.eval, period=w.period, gpu_hours=150,
                          reason="double count")
    assert err.value.field == "gpu_hours"
    assert rows() == before


def test_a_transfer_cannot_take_the_source_below_zero(split, rows):
    w = split
    charge(w.eval_budget, gpu_hours="250")
    before = rows()
    with pytest.raises(ValidationError) as error:
        services.transfer(actor=w.lead, source=w.eval, target=w.pretrain, period=w.period, gpu_hours="50.0001",
                          reason="x")
    assert error.value.field == "gpu_hours"
    assert "balance of 50 GPU-hours" in error.value.message
    assert rows() == before
    services.transfer(actor=w.lead, source=w.eval, target=w.pretrain, period=w.period, gpu_hours=50, reason="all")
    assert selectors.balance(w.eval_budget) == 0


@pytest.mark.parametrize("actor", ["researcher", "outsider"])
def test_only_a_lead_of_both_teams_transfers(split, rows, actor):
    w = split
    before = rows()
    with pytest.raises(PermissionDenied):
        services.transfer(actor=getattr(w, actor), source=w.pretrain, target=w.eval, period=w.period, gpu_hours=1,
                          reason="x")
    assert rows() == before


def test_a_lead_cannot_pull_from_or_push_to_a_team_they_do_not_lead(split):
    w = split
    with pytest.raises(PermissionDenied) as error:
        services.transfer(actor=w.lead, source=w.cv, target=w.eval, period=w.period, gpu_hours=1, reason="x")
    assert error.value.field == "source"
    with pytest.raises(PermissionDenied) as error:
        services.transfer(actor=w.lead, source=w.eval, target=w.cv, period=w.period, gpu_hours=1, reason="x")
    assert error.value.field == "target"
    services.transfer(actor=w.operator, source=w.cv, target=w.eval, period=w.period, gpu_hours=1, reason="ops")


@pytest.mark.parametrize("kwargs, field", [
    (dict(reason=""), "reason"),
    (dict(reason="   "), "reason"),
    (dict(gpu_hours=0), "gpu_hours"),
    (dict(gpu_hours=-5), "gpu_hours"),
    (dict(target="pretrain"), "target"),
])
def test_transfer_input_errors(split, rows, kwargs, field):
    w = split
    args = dict(actor=w.lead, source=w.pretrain, target=w.eval, period=w.period, gpu_hours=1, reason="x")
    if "target" in kwargs:
        kwargs = dict(target=getattr(w, kwargs["target"]))
    args.update(kwargs)
    before = rows()
    with pytest.raises(ValidationError) as error:
        services.transfer(**args)
    assert error.value.field == field
    assert rows() == before


def test_transfer_needs_both_budgets_in_the_period(split):
    w = split
    other = BudgetPeriodFactory(name="2027-Q1", starts_at=w.period.ends_at)
    BudgetFactory(team=w.pretrain, period=other, gpu_hours=10)
    with pytest.raises(ValidationError, match="lab/nlp/eval has no budget in 2027-Q1") as error:
        services.transfer(actor=w.lead, source=w.pretrain, target=w.eval, period=other, gpu_hours=1, reason="x")
    assert error.value.field == "target"


# --- refunds and adjustments ------------------------------------------------------------------------------------

def test_refunds_give_back_at_most_what_the_job_was_charged(split, rows):
    w = split
    charge(w.pretrain_budget, gpu_hours="10")
    charge(w.pretrain_budget, start=T0 + timedelta(hours=1), gpu_hours="5")
    entry = services.refund(budget=w.pretrain_budget, job_ref="job-1", gpu_hours=12, reason="preempted early")
    assert (entry.kind, entry.gpu_hours, entry.actor) == (EntryKind.REFUND, Decimal(12), None)
    before = rows()
    with pytest.raises(ValidationError, match="charged 15 GPU-hours .* 12 were already refunded") as error:
        services.refund(budget=w.pretrain_budget, job_ref="job-1", gpu_hours="3.0001", reason="again")
    assert error.value.field == "gpu_hours"
    with pytest.raises(ValidationError):
        services.refund(budget=w.eval_budget, job_ref="job-1", gpu_hours=1, reason="wrong budget")
    with pytest.raises(ValidationError) as error:
        services.refund(budget=w.pretrain_budget, job_ref="job-1", gpu_hours=1, reason="")
    assert error.value.field == "reason"
    assert rows() == before
    services.refund(budget=w.pretrain_budget, job_ref="job-1", gpu_hours=3, reason="rest", actor=w.lead)
    assert selectors.balance(w.pretrain_budget) == 600


def test_a_person_refunding_needs_to_govern_the_grant(split):
    w = split
    charge(w.pretrain_budget)
    for actor in (w.researcher, w.outsider):
        with pytest.raises(PermissionDenied):
            services.refund(budget=w.pretrain_budget, job_ref="job-1", gpu_hours=1, reason="please", actor=actor)
    nlp = Budget.objects.get(team=w.nlp, period=w.period)
    with pytest.raises(PermissionDenied):  # the lead of lab/nlp cannot refund lab/nlp itself
        services.refund(budget=nlp, job_ref="job-1", gpu_hours=1, reason="x", actor=w.lead)


def test_adjustments_are_signed_and_governed_by_the_parents_lead(split, rows):
    w = split
    up = services.adjust(actor=w.lead, budget=w.eval_budget, gpu_hours=Decimal("2.5"), reason="outage credit")
    down = services.adjust(actor=w.lead, budget=w.eval_budget, gpu_hours=-400, reason="clawback")
    assert (up.kind, up.gpu_hours, down.gpu_hours) == (EntryKind.ADJUSTMENT, Decimal("2.5"), Decimal(-400))
    assert selectors.balance(w.eval_budget) == Decimal("-97.5")
    before = rows()
    nlp = Budget.objects.get(team=w.nlp, period=w.period)
    with pytest.raises(PermissionDenied):
        services.adjust(actor=w.lead, budget=nlp, gpu_hours=1000, reason="my own")
    for actor in (w.researcher, w.outsider):
        with pytest.raises(PermissionDenied):
            services.adjust(actor=actor, budget=w.eval_budget, gpu_hours=1, reason="x")
    with pytest.raises(ValidationError) as error:
        services.adjust(actor=w.lead, budget=w.eval_budget, gpu_hours=0, reason="x")
    assert error.value.field == "gpu_hours"
    with pytest.raises(ValidationError) as error:
        services.adjust(actor=w.lead, budget=w.eval_budget, gpu_hours=1, reason="")
    assert error.value.field == "reason"
    assert rows() == before
    services.adjust(actor=w.operator, budget=nlp, gpu_hours=1, reason="ops")


def test_balance_is_always_grant_plus_the_sum_of_entries(split):
    w = split
    charge(w.pretrain_budget, gpu_hours="33.3333")
    services.transfer(actor=w.lead, source=w.eval, target=w.pretrain, period=w.period, gpu_hours="0.0001",
                      reason="x")
    services.refund(budget=w.pretrain_budget, job_ref="job-1", gpu_hours="3.3333", reason="x")
    total = sum((e.gpu_hours for e in LedgerEntry.objects.filter(budget=w.pretrain_budget)), Decimal(0))
    assert selectors.balance(w.pretrain_budget) == Decimal(600) + total == Decimal("570.0001")
