"""End-to-end replays on tiny traces: what a user would see, for every policy."""

from __future__ import annotations

import dataclasses
import gc
import signal

import pytest

from scheduling.policy.types import Plan, PolicyConfig, Preempt, Reservation, Start
from scheduling.simulation.baselines import FifoBackfill
from scheduling.simulation.check import check_schedule
from scheduling.simulation.cli import make_policy
from scheduling.simulation.output import write_schedule
from scheduling.simulation.report import IdleByPlace
from scheduling.simulation.engine import PendingView, Simulator
from scheduling.simulation.model import SimConfig, SimulationError
from scheduling.simulation.trace import TraceJob, load_budgets, load_trace, parse_nodes

POLICIES = ["fifo-backfill", "static-priority", "quota-borrowing", "budget"]
DAY = 86400.0


def replay(budgets_file, jobs, policy="fifo-backfill", nodes="2x8:H100", horizon=DAY, **kw):
    budgets = load_budgets(str(budgets_file))
    cfg = SimConfig(nodes=parse_nodes(nodes), budgets=budgets, horizon_s=horizon, progress=False, **kw)
    pol = make_policy(policy, jobs) if isinstance(policy, str) else policy
    return Simulator(cfg, jobs, pol).run()


def checked(result, tmp_path, nodes="2x8:H100"):
    path = tmp_path / f"{result.policy}.csv"
    write_schedule(str(path), result.schedule)
    assert check_schedule(str(path), parse_nodes(nodes)) == []
    return path


@pytest.mark.parametrize("policy", POLICIES)
def test_every_job_completes_when_capacity_suffices(policy, budgets_file, tiny_trace, tmp_path):
    jobs = load_trace(str(tiny_trace), load_budgets(str(budgets_file)).teams)
    result = replay(budgets_file, jobs, policy)
    m = result.metrics
    assert (m["jobs"], m["completed_jobs"], m["never_started"], m["preemptions"]) == (8, 8, 0, 0)
    assert m["wait_p95_s"] <= 30  # at most one coalesced cycle
    rows = {r[0]: r for r in result.schedule}
    assert len(result.schedule) == 8
    for j in jobs:
        _, team, gpus, _, start, end, reason = rows[j.id]
        assert (team, gpus, reason) == (j.team, j.gpus, "completed")
        assert end - start == pytest.approx(j.duration_s)
    assert m["availability"] == 1.0
    assert m["impact"] > 0.99 and m["impact"] <= m["impact_ceiling"] + 1e-9
    checked(result, tmp_path)


@pytest.mark.parametrize("policy", POLICIES)
def test_a_job_is_stopped_at_its_time_limit(policy, budgets_file, tmp_path):
    """A run that reaches the limit its user gave ends there, as Slurm's TIMEOUT: not completed, not requeued."""
    jobs = [TraceJob(id="over", submit_s=0, team="lab/a", gpus=2, duration_s=3 * 3600, time_limit_s=3600),
            TraceJob(id="within", submit_s=0, team="lab/b", gpus=2, duration_s=1800, time_limit_s=3600)]
    result = replay(budgets_file, jobs, policy)
    rows = {r[0]: r[4:] for r in result.schedule}
    assert rows == {"over": (0.0, 3600.0, "timeout"), "within": (0.0, 1800.0, "completed")}
    assert (result.metrics["completed_jobs"], result.metrics["timeouts"]) == (1, 1)
    checked(result, tmp_path)


@pytest.mark.parametrize("policy", POLICIES)
def test_no_gpu_is_double_booked_under_heavy_load(policy, budgets_file, tmp_path):
    # 60 jobs of 1-8 GPUs on 16 GPUs, with failures and debug sessions: lots of contention.
    import random

    rng = random.Random(3)
    jobs = [
        TraceJob(id=f"x{i}", submit_s=i * 120.0, team=rng.choice(["lab/a", "lab/b"]), gpus=rng.choice([1, 2, 4, 8]),
                 duration_s=rng.uniform(600, 5 * 3600))
        for i in range(60)
    ]
    result = replay(budgets_file, jobs, policy, debug_rate_per_hour=2, mtbf_hours=20, repair_hours=1, seed=1)
    checked(result, tmp_path)
    assert result.metrics["completed_jobs"] > 0


@pytest.mark.parametrize("policy", POLICIES)
def test_a_node_failure_lowers_availability_and_requeues_its_job(policy, budgets_file, tmp_path):
    jobs = [TraceJob(id="big", submit_s=0, team="lab/a", gpus=4, duration_s=10 * 3600)]
    fail_at = 3 * 3600 + 600
    result = replay(
        budgets_file, jobs, policy, nodes="1x8:H100", failures=(("h100-000", fail_at),), repair_hours=1,
        checkpoint_minutes=60, per_team=True,
    )
    m = result.metrics
    # the team pays for its job's 10 hours of work on 4 GPUs, not for the 10 minutes the failure lost
    assert result.teams["lab/a"]["spent_gpu_hours"] == pytest.approx(40.0)
    assert m["availability"] == pytest.approx(1 - 3600 / DAY)
    assert m["failure_stops"] == 1 and m["completed_jobs"] == 1
    # lost: the 10 minutes since the 3-hour checkpoint, on 4 GPUs.
    assert m["lost_gpu_hours"] == pytest.approx(4 * 600 / 3600)
    rows = sorted(result.schedule, key=lambda r: r[4])
    assert [r[6] for r in rows] == ["drained", "completed"]
    assert rows[0][5] == fail_at
    restart = rows[1][4]
    assert fail_at + 3600 <= restart <= fail_at + 3600 + 30  # back within a cycle of the repair
    assert rows[1][5] - restart == pytest.approx(7 * 3600)  # it resumes from its checkpoint
    checked(result, tmp_path, nodes="1x8:H100")


def test_the_longest_stretch_a_team_with_work_waiting_runs_nothing_is_reported(budgets_file):
    """lab/b's 8-GPU job holds the only node for 3 hours from t=0; lab/a's job waits from t=600 s until it ends (at
    most a cycle later): lab/a ran nothing for those 2 h 50 min. lab/b, whose job started at once, never starved.
    A second, shorter stretch (lab/a's next job, waiting behind lab/b's next) does not replace the longest."""
    jobs = [TraceJob(id="b1", submit_s=0, team="lab/b", gpus=8, duration_s=3 * 3600),
            TraceJob(id="a1", submit_s=600, team="lab/a", gpus=1, duration_s=600),
            TraceJob(id="b2", submit_s=3 * 3600 + 900, team="lab/b", gpus=8, duration_s=3600),
            TraceJob(id="a2", submit_s=3 * 3600 + 1200, team="lab/a", gpus=1, duration_s=600)]
    m = replay(budgets_file, jobs, nodes="1x8:H100").metrics
    assert 3 * 3600 - 600 <= m["longest_starved_s"] <= 3 * 3600 - 600 + 30
    assert m["longest_starved_team"] == "lab/a"
    calm = replay(budgets_file, jobs[:1]).metrics
    assert (calm["longest_starved_s"], calm["longest_starved_team"]) == (0.0, None)


def test_random_failures_lower_availability(budgets_file, tiny_trace):
    jobs = load_trace(str(tiny_trace), load_budgets(str(budgets_file)).teams)
    calm = replay(budgets_file, jobs).metrics
    stormy = replay(budgets_file, jobs, mtbf_hours=12, repair_hours=4, seed=5).metrics
    assert calm["availability"] == 1.0
    assert stormy["availability"] < 0.95 and stormy["node_failures"] >= 1


@pytest.mark.parametrize("policy", POLICIES)
def test_a_debug_session_starts_at_once_when_gpus_are_free(policy, budgets_file):
    jobs = [
        TraceJob(id="train", submit_s=0, team="lab/a", gpus=4, duration_s=DAY),
        TraceJob(id="train2", submit_s=990, team="lab/a", gpus=4, duration_s=DAY),  # a cycle at 990
        TraceJob(id="dbg", submit_s=1000, team="lab/b", gpus=1, duration_s=1800, kind="debug", utilization=0.1),
    ]
    result = replay(budgets_file, jobs, policy)
    starts = {r[0]: r[4] for r in result.schedule}
    assert starts["train2"] == 990
    assert starts["dbg"] == 1000  # its arrival triggers a cycle right away, not at 990 + 30 s
    assert result.metrics["debug_wait_p95_s"] == 0


def test_a_debug_session_larger_than_the_portal_allows_runs_as_a_batch_job(budgets_file):
    """The portal refuses a 16-GPU debug session ("submit it as a batch job"), so the replay runs it as one: it
    starts, and the debug waits count only real sessions."""
    jobs = [TraceJob(id="big", submit_s=0, team="lab/a", gpus=16, duration_s=1800, kind="debug"),
            TraceJob(id="dbg", submit_s=10, team="lab/b", gpus=1, duration_s=1800, kind="debug")]
    result = replay(budgets_file, jobs)
    m = result.metrics
    assert {r[0] for r in result.schedule} == {"big", "dbg"}
    assert m["debug_as_batch"] == 1 and m["debug_sessions"] == 1 and m["jobs"] == 1



@pytest.mark.parametrize("policy", POLICIES)
def test_a_session_beyond_its_users_open_sessions_runs_as_a_batch_job(policy, budgets_file):
    """The portal holds each person to two open sessions (PORTAL_DEBUG_MAX_SESSIONS_PER_USER), so a third one is
    refused and its user submits the work as a batch job; another person, or the same one once a session ended,
    is not held back. Sessions with no user in the trace are never limited."""
    def session(job_id, at, user):
        return TraceJob(id=job_id, submit_s=at, team="lab/a", gpus=1, duration_s=3600, kind="debug", user=user)

    jobs = [session("s1", 0, "rita"), session("s2", 10, "rita"), session("s3", 20, "rita"), session("s4", 30, "bob"),
            session("s5", 7200, "rita"), session("s6", 7210, ""), session("s7", 7220, ""), session("s8", 7230, "")]
    m = replay(budgets_file, jobs, policy).metrics
    assert (m["debug_sessions"], m["debug_as_batch"], m["debug_over_user_limit"], m["jobs"]) == (7, 1, 1, 1)
    assert m["completed_jobs"] == 1  # s3, as a batch job

    unlimited = replay(budgets_file, jobs, policy, debug_sessions_per_user=0).metrics
    assert (unlimited["debug_sessions"], unlimited["debug_as_batch"], unlimited["jobs"]) == (8, 0, 0)

    # a team limit of 3 (PORTAL_DEBUG_MAX_SESSIONS_PER_TEAM) counts every session of the team, with a user or not:
    # s4 (bob, the team's third) runs, s5-s8 start after s1-s4 ended: s8 is the team's fourth open one
    team = replay(budgets_file, jobs, policy, debug_sessions_per_team=3).metrics
    assert (team["debug_sessions"], team["debug_over_user_limit"], team["debug_over_team_limit"]) == (6, 1, 1)

def test_forgotten_debug_sessions_are_released_when_idle_by_the_budget_policy_only(budgets_file):
    """A session whose user leaves it open after 30 minutes of work: the budget policy releases it after 15 idle
    minutes (and the next cycle); a baseline, which has no idle release, keeps it until its 4-hour limit."""
    jobs = [TraceJob(id="dbg", submit_s=0, team="lab/a", gpus=2, duration_s=1800, kind="debug", utilization=0.5)]
    mine = replay(budgets_file, jobs, "budget", debug_forget_share=1.0)
    rows = {r[0]: r for r in mine.schedule}
    assert rows["dbg"][6] == "released" and 1800 + 900 <= rows["dbg"][5] <= 1800 + 900 + 300
    assert mine.metrics["releases"] == 1
    assert mine.metrics["debug_idle_gpu_hours"] == pytest.approx(2 * (rows["dbg"][5] - 1800) / 3600)  # 2 GPUs
    theirs = replay(budgets_file, jobs, "fifo-backfill", debug_forget_share=1.0)
    end = {r[0]: r for r in theirs.schedule}["dbg"]
    assert end[5] == 4 * 3600 and theirs.metrics["debug_idle_gpu_hours"] == pytest.approx(2 * 3.5)
    plain = replay(budgets_file, jobs, "budget")
    assert {r[0]: r for r in plain.schedule}["dbg"][5] == 1800 and plain.metrics["debug_idle_gpu_hours"] == 0


def test_generated_debug_sessions_on_an_idle_cluster_never_wait(budgets_file):
    result = replay(budgets_file, [], debug_rate_per_hour=3, seed=2)
    m = result.metrics
    assert m["debug_sessions"] > 30
    assert m["debug_wait_p95_s"] == 0
    assert m["utilization"] == pytest.approx(0.1)


def test_same_seed_same_replay_other_seed_other_replay(budgets_file, tiny_trace):
    jobs = load_trace(str(tiny_trace), load_budgets(str(budgets_file)).teams)
    kw = dict(debug_rate_per_hour=2, mtbf_hours=10, repair_hours=2, squatters=3)
    a = replay(budgets_file, jobs, "quota-borrowing", seed=7, **kw)
    b = replay(budgets_file, jobs, "quota-borrowing", seed=7, **kw)
    c = replay(budgets_file, jobs, "quota-borrowing", seed=8, **kw)
    assert a.schedule == b.schedule and a.metrics == b.metrics
    assert a.schedule != c.schedule


class _Greedy:
    """A broken policy: every pending job onto the first node, free or not."""

    name = "broken"

    def plan(self, snap):
        return Plan(actions=tuple(Start(j.id, (("h100-000", j.gpus),)) for j in snap.pending))


def test_a_policy_that_double_books_is_stopped(budgets_file, tiny_trace):
    jobs = load_trace(str(tiny_trace), load_budgets(str(budgets_file)).teams)
    with pytest.raises(SimulationError, match="double booking"):
        replay(budgets_file, jobs, _Greedy())


def test_a_replay_leaves_the_garbage_collector_as_it_found_it(budgets_file, tiny_trace):
    """A replay tunes the collector for itself (engine._collector_for_replay); the process it runs in (a test
    session, a portal worker) gets its own settings back, whether the replay ends or fails."""
    jobs = load_trace(str(tiny_trace), load_budgets(str(budgets_file)).teams)
    before = gc.get_threshold()
    replay(budgets_file, jobs, "budget")
    assert gc.get_threshold() == before and gc.get_freeze_count() == 0
    with pytest.raises(SimulationError):
        replay(budgets_file, jobs, _Greedy())
    assert gc.get_threshold() == before and gc.get_freeze_count() == 0


class _Scripted:
    """Starts everything FIFO; preempts ``victim`` once at ``at_s`` with ``grace``; records snapshots."""

    name = "scripted"

    def __init__(self, victim, at_s, grace, reason="test"):
        self.victim, self.at_s, self.grace, self.reason = victim, at_s, grace, reason
        self.done = False
        self.snaps = []
        self.inner = FifoBackfill()

    def plan(self, snap):
        self.snaps.append(snap)
        if not self.done and snap.now_s >= self.at_s and any(r.id == self.victim for r in snap.running):
            self.done = True
            return Plan(actions=(Preempt(self.victim, self.grace, self.reason, for_job=None),),
                        reservations=(Reservation("nobody", (("h100-000", 1),), 1e12),))
        return self.inner.plan(snap)


def test_graceful_preemption_can_hold_gpus_for_the_whole_grace_then_requeues_without_loss(budgets_file):
    """The pessimistic model (checkpoint_save_s=None): the job uses its whole grace."""
    jobs = [TraceJob(id="v", submit_s=0, team="lab/a", gpus=8, duration_s=5 * 3600)]
    pol = _Scripted("v", 3 * 3600, 600)
    result = replay(budgets_file, jobs, pol, nodes="1x8:H100", checkpoint_save_s=None)
    rows = sorted(result.schedule, key=lambda r: r[4])
    assert [r[6] for r in rows] == ["preempted", "completed"]
    at = rows[0][5] - 600
    assert at >= 3 * 3600
    assert rows[1][4] >= rows[0][5]  # GPUs were held for the whole grace
    # Saved at the signal: the second run needs exactly what was left at the signal.
    assert rows[1][5] - rows[1][4] == pytest.approx(5 * 3600 - at)
    m = result.metrics
    assert m["preemptions"] == 1 and m["lost_gpu_hours"] == 0 and m["preempted_in_protected"] == 0
    # the preempting job is shown as such, and the plan's reservation came back in the next snapshot
    later = [s for s in pol.snaps if at < s.now_s < at + 600]
    assert later and all(r.preempting and r.preempt_deadline_s == at + 600 for s in later for r in s.running)
    assert later[0].reservations == (Reservation("nobody", (("h100-000", 1),), 1e12),)
    # its wait ended at its first start; the policy sees its second run as its second (a repeat victim's)
    assert m["wait_p50_s"] == m["wait_p95_s"] == 0
    second = [r for s in pol.snaps for r in s.running if r.id == "v" and r.started_s >= rows[1][4]]
    assert second and {r.runs for r in second} == {1}
    assert {p.runs for s in pol.snaps if s.now_s > at for p in s.pending if p.id == "v"} <= {1}


def test_a_preempted_job_frees_its_gpus_once_its_checkpoint_is_saved(budgets_file):
    """The default model: the job saves at the signal and exits after min(grace, checkpoint_save_s)."""
    jobs = [TraceJob(id="v", submit_s=0, team="lab/a", gpus=8, duration_s=5 * 3600)]
    pol = _Scripted("v", 3 * 3600, 600)
    result = replay(budgets_file, jobs, pol, nodes="1x8:H100", checkpoint_save_s=45.0)
    rows = sorted(result.schedule, key=lambda r: r[4])
    assert [r[6] for r in rows] == ["preempted", "completed"]
    signal = min(s.now_s for s in pol.snaps if s.now_s >= 3 * 3600)  # the cycle that sent the notice
    assert rows[0][5] == pytest.approx(signal + 45.0)  # not signal + 600: it exited once saved
    assert rows[1][4] >= rows[0][5]
    m = result.metrics
    assert m["lost_gpu_hours"] == 0
    assert (m["started_jobs"], m["preempted_jobs"], m["preemptions"]) == (1, 1, 1)
    # 5 h of work on 8 GPUs, plus the 45 s it kept them while saving
    assert m["delivered_gpu_hours"] == pytest.approx(8 * (5 * 3600 + 45) / 3600)


def test_a_grace_shorter_than_the_checkpoint_save_loses_the_work_since_the_last_periodic_checkpoint(budgets_file):
    """Signalled at 4,800 s with 60 s of grace while its save takes 120 s: it cannot write its checkpoint, works
    on unsaved to the end of the grace and is stopped then, losing the 1,260 s since its 3,600 s checkpoint."""
    jobs = [TraceJob(id="v", submit_s=0, team="lab/a", gpus=8, duration_s=5 * 3600)]
    pol = _Scripted("v", 1 * 3600 + 1200, 60)
    result = replay(budgets_file, jobs, pol, nodes="1x8:H100", checkpoint_minutes=30, checkpoint_save_s=120.0)
    rows = sorted(result.schedule, key=lambda r: r[4])
    assert [r[6] for r in rows] == ["preempted", "completed"]
    assert rows[0][5] == 4800 + 60  # the whole grace, not the 120 s its save would take
    assert result.metrics["lost_gpu_hours"] == pytest.approx(8 * 1260 / 3600)
    assert rows[1][5] - rows[1][4] == pytest.approx(5 * 3600 - 3600)  # it resumes from its 3,600 s checkpoint


def test_a_preempted_debug_session_is_not_requeued(budgets_file):
    """The debug contract does not requeue: a session stopped by a preemption is over (its user starts another);
    a batch job preempted the same way runs again."""
    for kind, rows_after in (("debug", ["preempted"]), ("train", ["preempted", "completed"])):
        jobs = [TraceJob(id="v", submit_s=0, team="lab/a", gpus=1, duration_s=3 * 3600, kind=kind)]
        result = replay(budgets_file, jobs, _Scripted("v", 3600, 60), nodes="1x8:H100")
        assert [r[6] for r in sorted(result.schedule, key=lambda r: r[4])] == rows_after
        # the 5% bar is read on batch jobs: a preempted session counts among all jobs, not among batch jobs
        m = result.metrics
        batch = int(kind == "train")
        assert (m["started_jobs"], m["preempted_jobs"]) == (1, 1)
        assert (m["started_batch_jobs"], m["preempted_batch_jobs"]) == (batch, batch)


@pytest.mark.parametrize("save, lost_s", [(30.0, 0), (45.0, 0), (120.0, 1230)])
def test_a_node_failure_inside_the_grace_loses_what_was_not_saved(budgets_file, save, lost_s):
    """Signalled at 4,800 s with 60 s of grace, its node fails 30 s later: a job that saved at the signal (30-s
    save) has lost nothing, nor is it stopped twice; one still writing a save that fits in the grace (45 s) is
    stopped by the failure but loses nothing either (it resumes from the signal); one whose save does not fit in
    the grace (120 s) loses the 1,230 s since its 3,600 s checkpoint, refunded as every failure's loss is, and
    resumes from that checkpoint."""
    jobs = [TraceJob(id="v", submit_s=0, team="lab/a", gpus=8, duration_s=5 * 3600)]
    pol = _Scripted("v", 1 * 3600 + 1200, 60)
    result = replay(budgets_file, jobs, pol, nodes="1x8:H100", checkpoint_minutes=30, checkpoint_save_s=save,
                    failures=(("h100-000", 4830.0),), repair_hours=1)
    rows = sorted(result.schedule, key=lambda r: r[4])
    first = rows[0]
    if save <= 30:
        assert (first[5], first[6]) == (4800 + 30, "preempted")  # exited once saved, before the failure
    else:
        assert (first[5], first[6]) == (4830, "drained")
    assert result.metrics["lost_gpu_hours"] == pytest.approx(8 * lost_s / 3600)
    resumed = 5 * 3600 - (4800 if save <= 60 else 3600)
    assert rows[-1][6] == "completed" and rows[-1][5] - rows[-1][4] == pytest.approx(resumed)


@pytest.mark.parametrize("limit, reason", [(None, "completed"), (3 * 3600 + 100, "timeout")])
def test_a_run_that_ends_inside_its_grace_ends_then_and_is_not_requeued(budgets_file, limit, reason):
    """Signalled 5 min before its work (or its time limit) ends, with 10 min of grace: it ends on its own at
    that moment, as it would have with no notice; it neither outlives its limit nor runs again."""
    jobs = [TraceJob(id="v", submit_s=0, team="lab/a", gpus=8, duration_s=3 * 3600 + (400 if limit else 300),
                     time_limit_s=limit)]
    pol = _Scripted("v", 3 * 3600 - 300, 600)
    result = replay(budgets_file, jobs, pol, nodes="1x8:H100", checkpoint_save_s=None)
    signal = min(s.now_s for s in pol.snaps if s.now_s >= 3 * 3600 - 300)
    assert signal < 3 * 3600  # the notice came before the run's end
    assert [(r[4], r[5], r[6]) for r in result.schedule] == [(0, 3 * 3600 + (100 if limit else 300), reason)]
    m = result.metrics
    assert m["completed_jobs"] == (0 if limit else 1) and m["lost_gpu_hours"] == 0
    assert (m["preemptions"], m["preempted_jobs"]) == (1, 0)  # signalled, but never stopped by it


@pytest.mark.parametrize("reason, drain, debug, turn", [("fair-share", 0, 0, 0), ("debug", 0, 1, 0),
                                                         ("drain", 1, 0, 0), ("turn", 0, 0, 1)])
def test_preemptions_are_counted_by_reason(budgets_file, reason, drain, debug, turn):
    jobs = [TraceJob(id="v", submit_s=0, team="lab/a", gpus=8, duration_s=5 * 3600)]
    m = replay(budgets_file, jobs, _Scripted("v", 3 * 3600, 600, reason), nodes="1x8:H100").metrics
    assert (m["preemptions"], m["preemptions_drain"], m["preemptions_debug"], m["preemptions_turn"]) == (
        1, drain, debug, turn)
    assert m["preempted_jobs"] == 1 - drain  # a drain is not the policy's choice: not a preempted job


def test_preemption_without_grace_loses_work_since_the_checkpoint(budgets_file):
    jobs = [TraceJob(id="v", submit_s=0, team="lab/a", gpus=8, duration_s=5 * 3600)]
    pol = _Scripted("v", 1 * 3600 + 1200, 0)
    result = replay(budgets_file, jobs, pol, nodes="1x8:H100", checkpoint_minutes=30)
    rows = sorted(result.schedule, key=lambda r: r[4])
    assert rows[0][5] == 4800  # the first (heartbeat) cycle at or after 4,800 s
    # checkpoints at 1,800 and 3,600 s: the 1,200 s since the last one are lost, on 8 GPUs
    assert result.metrics["lost_gpu_hours"] == pytest.approx(8 * 1200 / 3600)
    assert rows[1][5] - rows[1][4] == pytest.approx(5 * 3600 - 3600)
    assert result.metrics["preempted_in_protected"] == 1  # standard protects 2 h: the simulator reports it


def test_preempting_a_spent_teams_job_is_not_a_protection_breach(tmp_path):
    """b's budget (1 GPU-hour) is gone after 450 s on 8 GPUs; its job, preempted at 30 min, inside the 2 h its
    standard contract would protect, is not counted in ``preempted_in_protected``: a spent team's work is always
    preemptible (DESIGN §4.2)."""
    budgets = tmp_path / "tiny.csv"
    budgets.write_text("team,gpu_hours\nlab,10\nlab/a,9\nlab/b,1\n")
    jobs = [TraceJob(id="v", submit_s=0, team="lab/b", gpus=8, duration_s=5 * 3600)]
    result = replay(budgets, jobs, _Scripted("v", 1800, 600), nodes="1x8:H100")
    m = result.metrics
    assert m["preemptions"] == 1 and m["preempted_in_protected"] == 0


class _Borrowing(_Scripted):
    """As ``_Scripted``, but every job starts as borrowed work (``Start.scavenger``)."""

    def plan(self, snap):
        plan = super().plan(snap)
        return dataclasses.replace(plan, actions=tuple(
            dataclasses.replace(a, scavenger=True) if isinstance(a, Start) else a for a in plan.actions))


def test_preempting_borrowed_work_is_not_a_protection_breach_and_in_budget_work_is(budgets_file):
    """Preempted at 30 minutes, inside the 2 hours its standard contract protects: a job that started as borrowed
    work has no protected time, a job that started as its team's own work was protected."""
    jobs = [TraceJob(id="v", submit_s=0, team="lab/a", gpus=8, duration_s=5 * 3600)]
    for pol, breaches in ((_Borrowing("v", 1800, 600), 0), (_Scripted("v", 1800, 600), 1)):
        m = replay(budgets_file, jobs, pol, nodes="1x8:H100").metrics
        assert m["preemptions"] == 1 and m["preempted_in_protected"] == breaches


def test_budgets_are_consumed_at_the_contract_price_and_usage_decays(budgets_file):
    jobs = [
        TraceJob(id="std", submit_s=0, team="lab/a", gpus=2, duration_s=3600),
        TraceJob(id="long", submit_s=0, team="lab/b", gpus=1, duration_s=2 * DAY),
    ]
    pol = _Scripted("none", 1e18, 0)
    replay(budgets_file, jobs, pol, horizon=2 * 3600.0)
    last = pol.snaps[-1]
    teams = {t.id: t for t in last.teams}
    t = last.now_s
    assert teams["lab/a"].remaining_gpu_hours == pytest.approx(600 - 2 * 1.0)
    assert teams["lab/b"].remaining_gpu_hours == pytest.approx(400 - 1.5 * t / 3600, rel=1e-6)  # long: x1.5
    # lab split all of its 1000 to lab/a (600) and lab/b (400): it keeps nothing of its own, and its children's
    # charges are theirs, not its (remaining is each team's own balance).
    assert teams["lab"].remaining_gpu_hours == pytest.approx(0.0)
    # usage: 7200 GPU-seconds, a little decayed (half-life 7 days), children not in the parent's own usage
    assert 7100 < teams["lab/a"].usage_gpu_s < 7200
    assert teams["lab"].usage_gpu_s == 0
    contracts = {r.id: r.contract for s in pol.snaps for r in s.running}
    assert contracts == {"std": "standard", "long": "long"}


def test_a_gpu_type_is_charged_and_counted_in_usage_at_its_price(budgets_file):
    """The same hour of work on 2 GPUs costs 2 GPU-hours on H100 (price 1.0) and 4 on B200 (2.0), and counts as
    much in the team's usage (normalised GPU-seconds, a little decayed)."""
    spent, usage = {}, {}
    for gpu_type in ("H100", "B200"):
        jobs = [TraceJob(id="j", submit_s=0, team="lab/a", gpus=2, duration_s=3600)]
        pol = _Scripted("none", 1e18, 0)
        replay(budgets_file, jobs, pol, nodes=f"1x8:{gpu_type}", horizon=2 * 3600.0)
        teams = {t.id: t for t in pol.snaps[-1].teams}
        spent[gpu_type] = 600 - teams["lab/a"].remaining_gpu_hours
        usage[gpu_type] = teams["lab/a"].usage_gpu_s
    assert spent == pytest.approx({"H100": 2.0, "B200": 4.0})
    assert 7100 < usage["H100"] < 7200 and usage["B200"] == pytest.approx(2 * usage["H100"])


def test_waits_count_only_jobs_whose_team_had_budget_at_submit(tmp_path, write_file):
    budgets = write_file(tmp_path / "b.csv", "team,gpu_hours\nlab/a,1\nlab/b,1000\n")
    jobs = [
        TraceJob(id="a0", submit_s=0, team="lab/a", gpus=2, duration_s=3600),  # spends a's hour in 30 min
        TraceJob(id="b0", submit_s=3600, team="lab/b", gpus=8, duration_s=10 * 3600),  # fills the node
        TraceJob(id="a1", submit_s=7200, team="lab/a", gpus=2, duration_s=3600),  # out of budget: waits 8 h
    ]
    result = replay(budgets, jobs, "fifo-backfill", nodes="1x8:H100")
    m = result.metrics
    assert m["completed_jobs"] == 3
    assert {r[0]: r[4] for r in result.schedule}["a1"] == 11 * 3600
    assert m["wait_p95_s"] == 0  # a1 waited, but its team was out of budget when it was submitted
    assert m["wait_jobs"] == 2  # a0 and b0: the jobs the waits are over
    # by size, the same jobs: a0 (2 GPUs) and b0 (8), each started at once
    assert m["waits_by_gpus"] == {"2": {"jobs": 1, "never_started": 0, "wait_p50_s": 0, "wait_p95_s": 0},
                                  "8": {"jobs": 1, "never_started": 0, "wait_p50_s": 0, "wait_p95_s": 0}}


def test_waits_by_size_show_the_large_jobs_that_never_start(tmp_path, write_file):
    """One node, kept busy by a team's 1-GPU jobs that arrive every 10 minutes: under `budget` the team's 8-GPU job,
    submitted after the first of them, waits to the window's end (censored there), as each GPU that frees goes to
    the team's next small job (docs/policy.md, Known gaps, "Job-weighted waits"); fifo-backfill holds the node for
    it."""
    budgets = write_file(tmp_path / "b.csv", "team,gpu_hours\nlab/a,10000\n")
    jobs = [TraceJob(id="big", submit_s=60, team="lab/a", gpus=8, duration_s=3600)]
    jobs += [TraceJob(id=f"s{i}", submit_s=600 * i, team="lab/a", gpus=1, duration_s=5400) for i in range(30)]
    fifo = replay(budgets, jobs, "fifo-backfill", nodes="1x8:H100", horizon=5 * 3600).metrics
    assert fifo["waits_by_gpus"]["8"]["never_started"] == 0
    m = replay(budgets, jobs, "budget", nodes="1x8:H100", horizon=5 * 3600).metrics
    by = m["waits_by_gpus"]
    assert list(by) == ["1", "8"] and by["1"]["jobs"] == 30 and by["8"]["jobs"] == 1
    assert by["8"]["never_started"] == 1 and by["8"]["wait_p95_s"] == 5 * 3600 - 60
    assert by["1"]["never_started"] + by["8"]["never_started"] == m["never_started"]


def test_squatters_are_idle_jobs_the_policy_can_see(budgets_file):
    pol = _Scripted("none", 1e18, 0)
    result = replay(budgets_file, [], pol, squatters=2, horizon=DAY)
    idle = {r.id: r for s in pol.snaps for r in s.running}
    assert set(idle) == {"squat-0", "squat-1"}
    assert all(r.utilization == 0.0 and r.idle_since_s == r.started_s for r in idle.values())
    assert result.metrics["utilization"] == 0.0


@pytest.mark.skipif("budget" not in POLICIES, reason="BudgetPolicy not written yet")
def test_the_budget_policy_flags_squatters(budgets_file):
    result = replay(budgets_file, [], "budget", squatters=2, horizon=DAY)
    assert result.metrics["squatters_flagged"] == 2


def test_config_is_a_plain_dataclass(budgets_file):
    cfg = SimConfig(nodes=parse_nodes("1x8:H100"), budgets=load_budgets(str(budgets_file)))
    assert dataclasses.replace(cfg, seed=3).seed == 3


def test_replays_do_not_depend_on_the_interpreter_hash_seed(tmp_path, budgets_file, tiny_trace):
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    outs = []
    for hash_seed in ("1", "2"):
        out = tmp_path / f"s{hash_seed}"
        subprocess.run(
            [sys.executable, "-m", "scheduling.simulation", "--trace", str(tiny_trace), "--nodes", "2x8:H100",
             "--budgets", str(budgets_file), "--policy", "fifo-backfill,quota-borrowing", "--days", "1",
             "--debug-rate", "4", "--mtbf-hours", "6", "--squatters", "2", "--seed", "3", "--schedule", str(out)],
            cwd=root, env={**os.environ, "PYTHONHASHSEED": hash_seed}, check=True, capture_output=True, timeout=120,
        )
        outs.append({p.name: p.read_text() for p in sorted(out.iterdir())})
    assert outs[0] == outs[1] and len(outs[0]) == 2


def test_a_job_bigger_than_the_cluster_is_rejected_at_submit(budgets_file):
    jobs = [TraceJob(id="ok", submit_s=0, team="lab/a", gpus=8, duration_s=600),
            TraceJob(id="huge", submit_s=0, team="lab/b", gpus=17, duration_s=600)]
    m = replay(budgets_file, jobs).metrics
    assert (m["rejected"], m["jobs"], m["completed_jobs"], m["never_started"]) == (1, 1, 1, 0)
    assert m["impact"] > 0.9  # the refused job is no demand the policy could have served


@pytest.mark.parametrize("policy", POLICIES)
def test_a_job_of_any_type_larger_than_each_type_is_rejected_and_none_spans_types(policy, budgets_file, tmp_path):
    """A job never spans GPU types: 20 GPUs on 16 H100 + 16 B200 is refused at submit, for every policy; a
    24-GPU job on 16 H100 + 24 B200 runs on the B200 nodes only, even while it would fit across types sooner."""
    nodes = "4x4:H100,2x8:B200"
    jobs = [TraceJob(id="span", submit_s=0, team="lab/a", gpus=20, duration_s=600),
            TraceJob(id="ok", submit_s=0, team="lab/b", gpus=16, duration_s=600)]
    m = replay(budgets_file, jobs, policy, nodes=nodes).metrics
    assert (m["rejected"], m["jobs"], m["completed_jobs"]) == (1, 1, 1)
    nodes = "4x4:H100,3x8:B200"
    jobs = [TraceJob(id="small", submit_s=0, team="lab/a", gpus=8, duration_s=600, gpu_type="B200"),
            TraceJob(id="big", submit_s=1, team="lab/b", gpus=24, duration_s=600)]
    result = replay(budgets_file, jobs, policy, nodes=nodes)
    [big] = [row for row in result.schedule if row[0] == "big"]
    assert {pair.split(":")[0][:4] for pair in big[3].split(";")} == {"b200"}
    assert big[4] >= 600  # it waited for the B200 job rather than spread over H100 and B200
    checked(result, tmp_path, nodes)


@pytest.mark.parametrize("policy", POLICIES)
def test_a_job_asking_for_a_gpu_type_waits_for_it_while_other_types_stand_free(policy, budgets_file, tmp_path):
    nodes = "2x8:H100,1x8:B200"
    jobs = [TraceJob(id="first", submit_s=0, team="lab/a", gpus=8, duration_s=600, gpu_type="B200"),
            TraceJob(id="typed", submit_s=1, team="lab/b", gpus=4, duration_s=600, gpu_type="B200")]
    result = replay(budgets_file, jobs, policy, nodes=nodes)
    rows = {r[0]: r for r in result.schedule}
    assert rows["typed"][3].startswith("b200") and rows["typed"][4] >= 600  # the H100s stood free meanwhile
    checked(result, tmp_path, nodes)


def test_generated_session_and_squatter_ids_never_collide_with_the_trace(budgets_file):
    jobs = [TraceJob(id="debug-0", submit_s=0, team="lab/a", gpus=1, duration_s=600),
            TraceJob(id="squat-0", submit_s=0, team="lab/b", gpus=1, duration_s=600)]
    result = replay(budgets_file, jobs, debug_rate_per_hour=4, squatters=1)
    ids = [row[0] for row in result.schedule]
    assert {"debug-0", "squat-0", "debug-0~1", "squat-0~1"} <= set(ids)


def test_the_pending_queue_is_handed_over_per_team_in_queue_order(budgets_file):
    """Snapshot.pending_by_team holds exactly the pending jobs, each team's in (submit time, id) order, ties
    included; a team whose queue did not change hands over the same tuple (what the policy's cache keys on)."""
    seen = []

    class Recording(FifoBackfill):
        def plan(self, snapshot):
            seen.append(snapshot)
            return super().plan(snapshot)

    # ids out of submit order, and submit-time ties broken by id (not by trace order)
    jobs = [TraceJob(id=f"j{9 - i}", submit_s=float(i // 3) * 600, team=("lab/a", "lab/b")[i % 2], gpus=8,
                     duration_s=3000.0) for i in range(10)]
    replay(budgets_file, jobs, Recording())
    assert len(seen) > 3
    unchanged = 0
    for before, s in zip(seen, seen[1:]):
        groups = s.pending_by_team
        assert sorted(j.id for q in groups.values() for j in q) == sorted(j.id for j in s.pending)
        for team, q in groups.items():
            assert {j.team for j in q} == {team}
            assert list(q) == sorted(q, key=lambda j: (j.submit_s, j.id))
            if {j.id for j in q} == {j.id for j in before.pending if j.team == team}:
                assert q is before.pending_by_team[team]
                unchanged += 1
    assert unchanged > 0


@pytest.mark.parametrize("policy", ["budget", "fifo-backfill"])
def test_the_whole_queue_is_made_only_for_a_policy_that_reads_it(budgets_file, policy):
    """Snapshot.pending is a PendingView until a policy reads it: its length costs nothing, its jobs are the
    per-team tuples' in (submit time, id) order, made when read; from then on the simulator keeps that order itself
    (the baselines read it, the budget policy does not). Either way a snapshot holds the queue of its own cycle,
    also when read after the replay moved on."""
    seen = []

    class Recording:
        def __init__(self, inner):
            self.inner, self.name = inner, inner.name

        def plan(self, snapshot):
            seen.append((snapshot, isinstance(snapshot.pending, PendingView), sim.pending_list is not None))
            return self.inner.plan(snapshot)

    jobs = [TraceJob(id=f"j{9 - i}", submit_s=float(i // 3) * 600, team=("lab/a", "lab/b")[i % 2], gpus=8,
                     duration_s=3000.0) for i in range(10)]
    cfg = SimConfig(nodes=parse_nodes("2x8:H100"), budgets=load_budgets(str(budgets_file)), horizon_s=DAY,
                    progress=False)
    sim = Simulator(cfg, jobs, Recording(make_policy(policy, jobs)))
    sim.run()
    assert len(seen) > 3
    views = [view for _, view, _ in seen]
    kept = [kept for _, _, kept in seen]
    if policy == "budget":
        assert all(views) and not any(kept) and sim.pending_list is None
    else:
        assert views[0] and not any(views[1:]) and kept == [False] + [True] * (len(seen) - 1)
    for s, _, _ in seen:
        queue = sorted((j for q in s.pending_by_team.values() for j in q), key=lambda j: (j.submit_s, j.id))
        assert len(s.pending) == len(queue) and list(s.pending) == queue and s.pending == tuple(queue)
        assert [s.pending[i] for i in range(len(queue))] == queue


@pytest.mark.parametrize("rule, after", [(3600.0, 3600.0), (0.0, 600.0)])
def test_a_team_one_gpu_short_reclaims_after_a_gpu_hour(budgets_file, rule, after):
    """The simulator hands the policy's shortfall back: b, one GPU short of its share from 3 h on, preempts one
    of a's jobs (past their protection) after a GPU-hour, not after its job's 10 minutes of waiting."""
    jobs = [TraceJob(id=f"a{i}", submit_s=0, team="lab/a", gpus=1, duration_s=10 * 3600) for i in range(8)]
    jobs.append(TraceJob(id="b0", submit_s=3 * 3600, team="lab/b", gpus=1, duration_s=3600))
    cfg = PolicyConfig(explain=False, reclaim_after_gpu_s=rule)
    result = replay(budgets_file, jobs, "budget", nodes="1x8:H100", policy_config=cfg)
    stopped = [r for r in result.schedule if r[6] == "preempted"]
    assert len(stopped) == 1 and result.metrics["preemptions"] == 1
    signal = stopped[0][5] - 60  # the victim saves its checkpoint within a minute of the notice
    assert 3 * 3600 + after <= signal <= 3 * 3600 + after + 300  # at the first cycle past the mark
    (b0,) = [r for r in result.schedule if r[0] == "b0"]
    assert b0[4] == stopped[0][5]


def test_a_replay_without_a_window_ends_when_its_jobs_are_done_even_with_node_failures(budgets_file):
    """Without --days the replay runs until every job has finished; failures stop at the last submit (each repair
    used to draw the next failure, so the replay never ended)."""

    def hung(*_):
        raise TimeoutError("the replay did not end")

    jobs = [TraceJob(id=f"j{i}", submit_s=i * 3600.0, team="lab/a", gpus=4, duration_s=3600.0) for i in range(6)]
    old = signal.signal(signal.SIGALRM, hung)
    signal.alarm(30)
    try:
        result = replay(budgets_file, jobs, "budget", horizon=None, mtbf_hours=1, repair_hours=0.5, seed=3)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    assert result.metrics["completed_jobs"] == 6
    assert result.horizon_s < 10 * DAY


@pytest.mark.parametrize("policy", POLICIES)
def test_a_forgotten_session_cut_at_its_limit_times_out_as_a_remembered_one_does(policy, budgets_file):
    """Work longer than the session's 4-hour limit, or than its own time limit, is cut there: a timeout whether
    its user would have forgotten the session or not (it used to be recorded as completed, never idle)."""
    jobs = [TraceJob(id="long", submit_s=0, team="lab/a", gpus=1, duration_s=20000, kind="debug", user="u1"),
            TraceJob(id="limited", submit_s=0, team="lab/b", gpus=1, duration_s=3600, kind="debug", user="u2",
                     time_limit_s=1800)]
    for share in (0.0, 1.0):
        result = replay(budgets_file, jobs, policy, debug_forget_share=share)
        rows = {r[0]: (r[5], r[6]) for r in result.schedule}
        assert rows == {"long": (4 * 3600, "timeout"), "limited": (1800, "timeout")}, share
        assert result.metrics["timeouts"] == 2 and result.metrics["debug_idle_gpu_hours"] == 0


def test_a_forgotten_session_whose_work_ends_in_its_last_grace_completed(budgets_file):
    """Signalled 30 s before its 4-hour limit, its work done 10 s before it: the session ends at its limit inside
    the grace, its work done (it was reported as a timeout)."""
    jobs = [TraceJob(id="s", submit_s=0, team="lab/a", gpus=1, duration_s=4 * 3600 - 10, kind="debug"),
            TraceJob(id="x", submit_s=4 * 3600 - 30, team="lab/b", gpus=1, duration_s=60)]  # a cycle then
    pol = _Scripted("s", 4 * 3600 - 30, 60, "debug")
    result = replay(budgets_file, jobs, pol, nodes="1x8:H100", debug_forget_share=1.0)
    assert [(r[5], r[6]) for r in result.schedule if r[0] == "s"] == [(4 * 3600, "completed")]
    assert result.metrics["timeouts"] == 0 and result.metrics["preemptions"] == 1


@pytest.mark.parametrize("policy", ["budget", "fifo-backfill"])
def test_a_replay_without_a_window_ends_at_its_last_event(policy, budgets_file):
    """One 8-GPU job of 100 s on 8 GPUs: the window is those 100 s, fully occupied (a heartbeat requested before
    the job ended used to move the clock to 300 s, occupancy 0.333)."""
    jobs = [TraceJob(id="j", submit_s=0, team="lab/a", gpus=8, duration_s=100)]
    result = replay(budgets_file, jobs, policy, nodes="1x8", horizon=None)
    assert result.horizon_s == 100 and result.metrics["occupancy"] == 1.0


def test_generated_sessions_are_no_larger_than_the_largest_node(budgets_file):
    """On nodes of one GPU the --debug-rate stream draws 1-GPU sessions (a 2-GPU one never started on 1x1); on
    8-GPU nodes it still draws 1 and 2."""
    def sizes(nodes):
        budgets = load_budgets(str(budgets_file))
        cfg = SimConfig(nodes=parse_nodes(nodes), budgets=budgets, horizon_s=DAY, debug_rate_per_hour=2,
                        progress=False)
        return {j.gpus for j in Simulator(cfg, [], make_policy("fifo-backfill")).job_list}

    assert sizes("1x1") == {1} and sizes("3x1") == {1} and sizes("2x8") == {1, 2}
    # without a window, sessions are drawn until the last submit and the replay runs until nothing can happen
    late = [TraceJob(id="late", submit_s=DAY, team="lab/a", gpus=1, duration_s=60)]
    result = replay(budgets_file, late, "budget", nodes="1x1", horizon=None, debug_rate_per_hour=0.5)
    assert result.metrics["debug_sessions"] > 5 and result.metrics["debug_never_started"] == 0


def test_explain_says_why_a_team_went_without_what_it_was_owed(budgets_file):
    """lab/b's 8-GPU job, borrowed work (its nominal share is 3.2 GPUs), holds the only node for 3 hours; lab/a's
    1-GPU job arrives at 10 minutes, owed one GPU. For the first hour lab/a waits out the reclaim wait (a GPU-hour
    short, docs/policy.md §6), then no plan can take lab/b's job (it would leave lab/b 7 GPUs below its share for
    a gain of 1). What lab/a went without is impact's whole loss, and ``--explain`` splits it so."""
    jobs = [TraceJob(id="b1", submit_s=0, team="lab/b", gpus=8, duration_s=3 * 3600),
            TraceJob(id="a1", submit_s=600, team="lab/a", gpus=1, duration_s=600)]
    m = replay(budgets_file, jobs, policy="budget", nodes="1x8:H100",
               policy_config=PolicyConfig(explain=True)).metrics
    why = m["impact_lost_by_reason"]
    assert set(why) == {"reclaim-wait", "no-plan"}
    assert sum(why.values()) == pytest.approx(1 - m["impact"])
    assert why["reclaim-wait"] == pytest.approx(why["no-plan"] * 3600 / (3 * 3600 - 600 - 3600), rel=0.05)
    # the same GPUs, by where they went: to lab/b beyond its entitlement
    assert m["impact_lost_over_share"] == pytest.approx(1 - m["impact"])
    # without reasons (the replay's default), nothing is split
    assert "impact_lost_by_reason" not in replay(budgets_file, jobs, policy="budget", nodes="1x8:H100").metrics


def test_explain_tells_jobs_larger_than_their_teams_whole_entitlement_from_those_larger_than_owed(budgets_file):
    """lab/a runs nine 1-GPU jobs within its share, protected for the 90 minutes replayed; lab/b's only job asks for 8
    GPUs, more than its whole entitlement (7 of the 16 GPUs lab/a leaves): lab/b goes without its 7 GPUs
    because its job is larger than its entitlement (``larger-than-entitled``), which no schedule of whole jobs could
    serve without costing lab/a. When lab/b runs a 4-GPU job and waits with another, its wait is ``larger-than-owed``:
    the job fits its entitlement, not what is left of it."""
    def why(b_jobs):
        jobs = [TraceJob(id=f"a{k}", submit_s=0, team="lab/a", gpus=1, duration_s=4 * 3600) for k in range(9)]
        jobs += [TraceJob(id=f"b{k}", submit_s=0, team="lab/b", gpus=g, duration_s=3600) for k, g in enumerate(b_jobs)]
        m = replay(budgets_file, jobs, policy="budget", horizon=5400, policy_config=PolicyConfig(explain=True),
                   whole_jobs=True).metrics
        return m, m["impact_lost_by_reason"]

    m, lost = why([8])
    assert max(lost, key=lost.get) == "larger-than-entitled" and "larger-than-owed" not in lost
    assert lost["larger-than-entitled"] == pytest.approx(7 / 16, rel=0.01)
    # whole jobs allow 15 of the 16 GPUs' worth: lab/b's 8 GPUs beside 8 of lab/a's, or lab/a's 9 alone
    assert m["impact_ceiling"] == pytest.approx(1.0) and m["impact_ceiling_whole_jobs"] == pytest.approx(15 / 16)
    m, lost = why([4, 4, 4])
    assert "larger-than-owed" in lost and "larger-than-entitled" not in lost


def test_explain_says_where_the_idle_gpus_sat(budgets_file):
    """Occupancy's loss split by place (``--explain``). A pool node lent to batch work keeps the debug headroom free
    (3 GPUs) while 1-GPU jobs wait: idle on the pool, nowhere else. Under fifo-backfill a 16-GPU job behind an 8-GPU
    one that runs for two hours keeps the other node free for itself (its reservation): idle there, and the
    three places sum to one minus occupancy."""
    hour = 3600.0
    lots = [TraceJob(id=f"j{k}", submit_s=0, team="lab/a", gpus=1, duration_s=8 * hour) for k in range(40)]
    m = replay(budgets_file, lots, policy="budget", horizon=4 * hour, debug_pool_nodes=1, idle_by_place=True).metrics
    idle = m["occupancy_idle_by_place"]
    assert idle["debug-pool"] == pytest.approx(3 / 16) and idle["reserved"] == idle["elsewhere"] == 0
    assert sum(idle.values()) == pytest.approx(1 - m["occupancy"])

    gang = [TraceJob(id="small", submit_s=0, team="lab/a", gpus=8, duration_s=2 * hour),
            TraceJob(id="big", submit_s=60, team="lab/b", gpus=16, duration_s=hour)]
    m = replay(budgets_file, gang, horizon=4 * hour, idle_by_place=True).metrics
    idle = m["occupancy_idle_by_place"]
    # 8 GPUs held for "big" from its first cycle to 2 h; after 3 h the cluster is empty
    assert idle["reserved"] == pytest.approx(8 * (2 * hour - 60) / (16 * 4 * hour), rel=0.01)
    assert idle["elsewhere"] == pytest.approx((60 * 8 + 16 * hour) / (16 * 4 * hour), rel=0.01)
    assert idle["debug-pool"] == 0 and sum(idle.values()) == pytest.approx(1 - m["occupancy"])
    # without --explain the replay does not count them
    assert "occupancy_idle_by_place" not in replay(budgets_file, gang, horizon=4 * hour).metrics


def test_a_paid_turn_that_keeps_no_nodes_yet_is_not_idle_on_reserved_nodes():
    """``turn-wait`` names the nodes a turn would pick but keeps none of them: their free GPUs are free for anyone.
    A reservation on the debug pool counts as the pool's."""
    idle = IdleByPlace(["p"])
    idle.add({"p": 2, "a": 3, "b": 8}, (Reservation("x", (("a", 8),), 0.0, "turn-wait"),
                                        Reservation("y", (("b", 8), ("p", 8)), 0.0, "gang")), 10.0)
    assert idle.gpu_s == {"debug-pool": 20.0, "reserved": 80.0, "elsewhere": 30.0}
