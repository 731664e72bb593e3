"""Property: whatever sequence of grants, splits, charges, transfers, refunds and adjustments happens (allowed or
refused), balances stay unsplit grant + sum of entries, transfers sum to zero, charges stay unique per job and interval,
children's grants never exceed their parent's, and a refused operation writes nothing."""

from collections import Counter
from datetime import timedelta
from decimal import Decimal

import pytest
from django.db import transaction
from django.db.models import Sum
from django.utils import timezone
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from budgets import selectors, services
from budgets.errors import DomainError
from budgets.models import Budget, BudgetChange, EntryKind, LedgerEntry

pytestmark = pytest.mark.django_db

TEAMS = ["lab", "nlp", "pretrain", "eval", "cv"]
T0 = timezone.now().replace(microsecond=0) - timedelta(days=1)

hours = st.decimals(min_value=0, max_value=3000, places=3, allow_nan=False, allow_infinity=False)
team = st.sampled_from(TEAMS)
actor = st.sampled_from(["operator", "lead", "researcher", "outsider"])
operation = st.one_of(
    st.tuples(st.just("grant"), actor, team, hours),
    st.tuples(st.just("split"), actor, hours, hours),
    st.tuples(st.just("charge"), team, st.integers(0, 2), st.integers(0, 3), hours),
    st.tuples(st.just("transfer"), actor, team, team, hours),
    st.tuples(st.just("refund"), team, st.integers(0, 2), hours),
    st.tuples(st.just("adjust"), actor, team, st.decimals(min_value=-500, max_value=500, places=4)),
)


def apply(w, op):
    kind = op[0]
    budget = lambda name: Budget.objects.filter(team=getattr(w, name), period=w.period).first()  # noqa: E731
    if kind == "grant":
        _, who, name, amount = op
        services.grant_budget(actor=getattr(w, who), team=getattr(w, name), period=w.period, gpu_hours=amount)
    elif kind == "split":
        _, who, a, b = op
        services.split_budget(actor=getattr(w, who), team=w.nlp, period=w.period,
                              grants={w.pretrain: a, w.eval: b})
    elif kind == "charge":
        _, name, job, interval, amount = op
        target = budget(name)
        if target is None:
            return
        start = T0 + timedelta(hours=interval)
        services.charge_usage(budget=target, job_ref=f"job-{job}", interval_start=start,
                              interval_end=start + timedelta(hours=1), gpu_hours=amount)
    elif kind == "transfer":
        _, who, source, target, amount = op
        services.transfer(actor=getattr(w, who), source=getattr(w, source), target=getattr(w, target),
                          period=w.period, gpu_hours=amount, reason="property")
    elif kind == "refund":
        _, name, job, amount = op
        target = budget(name)
        if target is None:
            return
        services.refund(budget=target, job_ref=f"job-{job}", gpu_hours=amount, reason="property")
    elif kind == "adjust":
        _, who, name, amount = op
        target = budget(name)
        if target is None:
            return
        services.adjust(actor=getattr(w, who), budget=target, gpu_hours=amount, reason="property")


def snapshot():
    return (
        sorted(Budget.objects.values_list("team_id", "gpu_hours")),
        BudgetChange.objects.count(),
        LedgerEntry.objects.count(),
    )


def check_invariants(w):
    all_balances = selectors.balances(w.period)
    budgets = {b.team_id: b for b in Budget.objects.filter(period=w.period).select_related("team")}
    for team_id, b in budgets.items():
        entries = sum((e.gpu_hours for e in LedgerEntry.objects.filter(budget=b)), Decimal(0))
        children = sum((c.gpu_hours for c in budgets.values() if c.team.parent_id == team_id), Decimal(0))
        assert all_balances[team_id] == selectors.balance(b) == b.gpu_hours - children + entries
        assert children <= b.gpu_hours, f"children of {b.team} exceed its grant"
    for c in budgets.values():
        if c.team.parent_id is not None:
            assert c.team.parent_id in budgets, f"{c.team} has a budget but its parent has none"
    # Own balances add up, over the tree, to the root's grant plus every entry: nothing is counted twice.
    for root in (b for b in budgets.values() if b.team.parent_id is None):
        own = sum((all_balances[t] for t, b in budgets.items()
                   if b.team.path == root.team.path or b.team.path.startswith(root.team.path + "/")), Decimal(0))
        assert own == selectors.subtree_balance(root.team, w.period)
    transfers = LedgerEntry.objects.filter(kind=EntryKind.TRANSFER)
    assert (transfers.aggregate(s=Sum("gpu_hours"))["s"] or 0) == 0
    pairs = Counter(transfers.values_list("transfer_id", flat=True))
    assert all(count == 2 for count in pairs.values())
    charges = Counter(LedgerEntry.objects.filter(kind=EntryKind.CHARGE).values_list("job_ref", "interval_start"))
    assert all(count == 1 for count in charges.values())
    for b in budgets.values():
        per_job = LedgerEntry.objects.filter(budget=b).exclude(job_ref="").values_list("job_ref", flat=True).distinct()
        for job_ref in per_job:
            sums = {k: LedgerEntry.objects.filter(budget=b, job_ref=job_ref, kind=k).aggregate(s=Sum("gpu_hours"))["s"]
                    or 0 for k in (EntryKind.CHARGE, EntryKind.REFUND)}
            assert sums[EntryKind.REFUND] <= -sums[EntryKind.CHARGE], "refunded more than charged"


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                   HealthCheck.too_slow])
@given(operations=st.lists(operation, min_size=1, max_size=14))
def test_random_histories_keep_the_books_straight(funded, operations):
    w = funded
    with transaction.atomic():
        for op in operations:
            before = snapshot()
            try:
                apply(w, op)
            except DomainError:
                assert snapshot() == before, f"{op} was refused but wrote something"
                event(f"{op[0]} refused")
            else:
                event(f"{op[0]} applied")
        check_invariants(w)
        transaction.set_rollback(True)
