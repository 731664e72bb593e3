"""Reserving interactive debug sessions: small, short, soon, and through the debug contract only."""

from __future__ import annotations

from datetime import timedelta

import pytest
import time_machine
from django.utils import timezone

from budgets.errors import PermissionDenied, ValidationError
from budgets.models import BudgetPeriod, Contract
from scheduling.models import DebugSession, JobState
from scheduling.services import reserve_debug_session


@pytest.fixture
def reserve(world, researcher, pretrain, cluster):
    def _reserve(**overrides):
        arguments = dict(actor=researcher, team=pretrain, cluster=cluster, gpus=2, minutes=60)
        arguments.update(overrides)
        return reserve_debug_session(**arguments)

    return _reserve


@pytest.fixture
def all_rows(rows):
    return lambda: (*rows(), DebugSession.objects.count())


def test_rita_reserves_a_session_now(reserve, researcher, debug_contract):
    with time_machine.travel(timezone.now(), tick=False):
        session = reserve(gpus=8, minutes=240)
        now = timezone.now()

    assert (session.starts_at, session.ends_at) == (now, now + timedelta(minutes=240))
    job = session.job
    assert (job.state, job.gpus, job.contract, job.user, job.replicas) == (JobState.PENDING, 8, debug_contract,
                                                                           researcher, 1)
    assert [(e.from_state, e.to_state, e.reason) for e in job.events.all()] == [
        ("pending", "pending", "debug session reserved")]


def test_a_session_reserved_for_tomorrow(reserve):
    tomorrow = timezone.now() + timedelta(days=1)
    session = reserve(starts_at=tomorrow, minutes=30)
    assert session.ends_at - session.starts_at == timedelta(minutes=30)


@pytest.mark.parametrize(
    ("overrides", "field", "says"),
    [
        pytest.param({"gpus": 9}, "gpus", "8", id="more-gpus-than-the-limit"),
        pytest.param({"gpus": 0}, "gpus", "1 to 8", id="no-gpus"),
        pytest.param({"minutes": 241}, "minutes", "240", id="longer-than-the-limit"),
        pytest.param({"minutes": 0}, "minutes", "1 to 240", id="no-time"),
        pytest.param({"starts_at": "past"}, "starts_at", "past", id="in-the-past"),
        pytest.param({"starts_at": "far"}, "starts_at", "7 days", id="more-than-a-week-ahead"),
    ],
)
def test_the_limits_are_refused_naming_the_field_and_the_limit(reserve, all_rows, overrides, field, says):
    if overrides.get("starts_at") == "past":
        overrides["starts_at"] = timezone.now() - timedelta(minutes=10)
    elif overrides.get("starts_at") == "far":
        overrides["starts_at"] = timezone.now() + timedelta(days=8)
    before = all_rows()

    with pytest.raises(ValidationError) as refused:
        reserve(**overrides)

    assert refused.value.field == field
    assert says in refused.value.message
    assert all_rows() == before


def test_the_limits_come_from_the_settings(reserve, settings):
    settings.PORTAL = {**settings.PORTAL, "DEBUG_MAX_GPUS": 2, "DEBUG_MAX_MINUTES": 15}
    with pytest.raises(ValidationError, match="1 to 2"):
        reserve(gpus=4, minutes=10)
    with pytest.raises(ValidationError, match="1 to 15"):
        reserve(gpus=2, minutes=30)
    assert reserve(gpus=2, minutes=15).job.gpus == 2


def test_a_moment_of_clock_skew_is_tolerated(reserve):
    assert reserve(starts_at=timezone.now() - timedelta(seconds=30)).pk


def test_without_an_active_debug_contract_there_are_no_sessions(reserve, all_rows):
    Contract.objects.filter(queue="debug").update(active=False)
    before = all_rows()
    with pytest.raises(ValidationError) as refused:
        reserve()
    assert refused.value.field == "contract"
    assert all_rows() == before


def test_an_outsider_cannot_reserve_for_another_team(reserve, outsider, all_rows):
    before = all_rows()
    with pytest.raises(PermissionDenied) as refused:
        reserve(actor=outsider)
    assert refused.value.field == "team"
    assert all_rows() == before


def test_a_session_must_fit_on_one_node_of_its_type(reserve, b200, all_rows):
    before = all_rows()
    with pytest.raises(ValidationError) as refused:
        reserve(gpus=8, gpu_type=b200)  # B200 nodes have 4 GPUs; sessions do not span nodes
    assert refused.value.field == "gpus"
    assert all_rows() == before


def test_a_session_after_the_open_period_ends_needs_a_period_then(reserve, period, all_rows):
    BudgetPeriod.objects.filter(pk=period.pk).update(ends_at=timezone.now() + timedelta(days=1))
    before = all_rows()
    with pytest.raises(ValidationError) as refused:
        reserve(starts_at=timezone.now() + timedelta(days=3))
    assert refused.value.field == "starts_at"
    assert all_rows() == before


def test_a_third_session_at_the_same_time_is_refused_and_says_which_ones_rita_holds(reserve, all_rows):
    first, second = reserve(), reserve(minutes=30)
    before = all_rows()

    with pytest.raises(ValidationError) as refused:
        reserve(gpus=1)

    assert refused.value.field == "starts_at"
    assert f"2 debug sessions in that window (#{first.job_id}, #{second.job_id})" in refused.value.message
    assert "the limit is 2 per person" in refused.value.message
    assert all_rows() == before


def test_the_session_limit_counts_only_open_sessions_whose_windows_overlap(reserve, researcher):
    now = timezone.now()
    reserve(minutes=60)
    ended = reserve(minutes=60)
    ended.job.state = JobState.COMPLETED
    ended.job.save(update_fields=["state"])
    released = reserve(minutes=60)
    released.released_at = now
    released.save(update_fields=["released_at"])

    reserve(minutes=60)  # the completed and the released sessions do not count
    reserve(starts_at=now + timedelta(hours=2), minutes=30)  # after both open windows end
    with pytest.raises(ValidationError, match="limit is 2"):
        reserve(starts_at=now + timedelta(minutes=30), minutes=30)


def test_the_session_limit_is_per_person_and_comes_from_the_settings(reserve, lead, settings):
    reserve()
    reserve()
    reserve(actor=lead)  # the lead's own sessions are counted apart

    settings.PORTAL = {**settings.PORTAL, "DEBUG_MAX_SESSIONS_PER_USER": 0}
    reserve()  # 0: no limit
    settings.PORTAL = {**settings.PORTAL, "DEBUG_MAX_SESSIONS_PER_USER": 1}
    with pytest.raises(ValidationError, match="the limit is 1 per person"):
        reserve(actor=lead)


def test_a_team_limit_counts_everyone_in_the_team_and_is_off_by_default(reserve, lead, nlp, all_rows, settings):
    reserve(), reserve(), reserve(actor=lead)  # no team limit by default
    settings.PORTAL = {**settings.PORTAL, "DEBUG_MAX_SESSIONS_PER_TEAM": 3}
    before = all_rows()

    with pytest.raises(ValidationError) as refused:
        reserve(actor=lead, gpus=1)  # lena holds one session, but her team already three

    assert refused.value.field == "starts_at"
    assert "already holds 3 debug sessions in that window" in refused.value.message
    assert "the limit is 3 per team" in refused.value.message
    assert all_rows() == before
    reserve(actor=lead, team=nlp)  # another team's place is free
