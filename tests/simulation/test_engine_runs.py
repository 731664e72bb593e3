"""A run's life in the simulator's engine, told by what a user of ``simulate`` reads: what each team is charged
while several of its jobs run and after one stops, which stops are refunded, when a run that reaches its time
limit times out, what a notice of preemption does (counted once per reason, once per job, inside or outside the
protected time, with or without a saved checkpoint), what a forgotten session's idle time costs, how failures
come and go, which starts the engine refuses and what each team's line of the report says. Each story holds a rule
that mutation testing of ``engine.py`` and ``report.py`` found no test held (docs/policy-history.md, "Sixth
round")."""

from __future__ import annotations

import pytest

from scheduling.policy.types import Plan, Preempt, Release, Start
from scheduling.simulation.baselines import FifoBackfill
from scheduling.simulation.model import SimulationError
from scheduling.simulation.trace import TraceJob, load_budgets, load_trace
from tests.simulation.test_engine import _Borrowing, _Scripted, replay

HOUR = 3600.0
DAY = 24 * HOUR


class _Notices:
    """Starts everything first come, first served, and sends the actions of ``script`` ((time, action), each once,
    at the first cycle at or after its time, whether or not its job still runs)."""

    name = "notices"

    def __init__(self, *script: tuple) -> None:
        self.script = sorted(script, key=lambda s: s[0])
        self.snaps = []
        self.inner = FifoBackfill()

    def plan(self, snap):
        self.snaps.append(snap)
        due = [s for s in self.script if s[0] <= snap.now_s]
        if due:
            self.script = [s for s in self.script if s not in due]
            return Plan(actions=tuple(action for _, action in due))
        return self.inner.plan(snap)


def notice(at_s: float, job: str, grace: float, reason: str = "fair-share") -> tuple[float, Preempt]:
    return at_s, Preempt(job, grace, reason, for_job=None)


# ---- charges -------------------------------------------------------------------------------------------------


def test_a_team_is_charged_for_each_job_only_while_it_runs(budgets_file):
    """Two jobs of one team run side by side: 4 B200 GPUs under the long contract (x1.5; its 2 days of work cut at
    its 1-hour limit) and 8 H100 GPUs for 3 hours. The team pays 4 x 2 x 1.5 + 8 x 3 = 36 GPU-hours (the first
    job's charge stopping with it, the second's going on), and its usage grows by the GPU-time at each type's
    price, the contract's aside (4 x 2 + 8 x 3 = 32 GPU-hours)."""
    jobs = [TraceJob(id="short", submit_s=0, team="lab/a", gpus=4, duration_s=2 * DAY, time_limit_s=HOUR,
                     gpu_type="B200"),
            TraceJob(id="long", submit_s=0, team="lab/a", gpus=8, duration_s=3 * HOUR, gpu_type="H100")]
    pol = _Scripted("none", 1e18, 0)
    result = replay(budgets_file, jobs, pol, nodes="1x8:H100,1x8:B200", horizon=4 * HOUR, per_team=True)
    assert {r[0]: r[6] for r in result.schedule} == {"short": "timeout", "long": "completed"}
    assert result.teams["lab/a"]["spent_gpu_hours"] == pytest.approx(36.0)
    after = [s for s in pol.snaps if 2 * HOUR <= s.now_s < 3 * HOUR]  # only the long job runs
    spent = [600 - {t.id: t for t in s.teams}["lab/a"].remaining_gpu_hours for s in after]
    assert after and spent == pytest.approx([12 + 8 * s.now_s / HOUR for s in after])
    usage = {t.id: t for t in pol.snaps[-1].teams}["lab/a"].usage_gpu_s
    assert 0.99 * 32 * HOUR < usage <= 32 * HOUR  # (a little decayed)


def test_borrowed_work_is_charged_at_the_scavenger_price_while_it_runs(budgets_file):
    """The same two jobs started as borrowed work: charged at the scavenger contract's half price (4 x 2 x 0.5 +
    8 x 3 x 0.5 = 16 GPU-hours), the second still charged once the first has stopped, and counted in usage at each
    type's price as before (32 GPU-hours)."""
    jobs = [TraceJob(id="short", submit_s=0, team="lab/a", gpus=4, duration_s=HOUR, gpu_type="B200"),
            TraceJob(id="long", submit_s=0, team="lab/a", gpus=8, duration_s=3 * HOUR, gpu_type="H100")]
    pol = _Borrowing("none", 1e18, 0)
    result = replay(budgets_file, jobs, pol, nodes="1x8:H100,1x8:B200", horizon=4 * HOUR, per_team=True)
    assert result.teams["lab/a"]["spent_gpu_hours"] == pytest.approx(16.0)
    usage = {t.id: t for t in pol.snaps[-1].teams}["lab/a"].usage_gpu_s
    assert 0.99 * 32 * HOUR < usage <= 32 * HOUR


def test_a_job_stopped_without_notice_is_charged_for_the_work_it_loses_unless_a_failure_stopped_it(budgets_file):
    """Stopped with no grace at 80 minutes, 20 minutes after its hourly checkpoint: the 20 minutes are lost and
    the team pays for them (its run went on to 80 minutes), then for the 4 hours the job still needs after its
    checkpoint, at B200's price (2). A node failure at the same moment loses the same work, refunded at the
    price it was charged: the portal refunds what failures lose, not what a preemption the team's contract allows
    loses."""
    job = TraceJob(id="v", submit_s=0, team="lab/a", gpus=8, duration_s=5 * HOUR)
    preempted = replay(budgets_file, [job], _Notices(notice(80 * 60, "v", 0)), nodes="1x8:B200",
                       checkpoint_minutes=60, per_team=True)
    failed = replay(budgets_file, [job], "fifo-backfill", nodes="1x8:B200", checkpoint_minutes=60, per_team=True,
                    failures=(("b200-000", 80 * 60.0),), repair_hours=0.01)
    for result in (preempted, failed):
        assert result.metrics["lost_gpu_hours"] == pytest.approx(8 * 20 / 60)
        assert [r[6] for r in sorted(result.schedule, key=lambda r: r[4])] == [
            "preempted" if result is preempted else "drained", "completed"]
    assert preempted.teams["lab/a"]["spent_gpu_hours"] == pytest.approx(2 * 8 * (80 / 60 + 4))
    assert failed.teams["lab/a"]["spent_gpu_hours"] == pytest.approx(2 * 8 * 5)


def test_lost_work_adds_up_over_every_stop(budgets_file):
    """Two jobs stopped without notice, each 20 minutes after its last checkpoint: 2 x 8 x 20 minutes lost."""
    jobs = [TraceJob(id=j, submit_s=0, team="lab/a", gpus=8, duration_s=5 * HOUR) for j in ("v", "w")]
    pol = _Notices(notice(80 * 60, "v", 0), notice(80 * 60, "w", 0, "fair-share"))
    result = replay(budgets_file, jobs, pol, checkpoint_minutes=60)
    assert result.metrics["lost_gpu_hours"] == pytest.approx(2 * 8 * 20 / 60)


# ---- time limits -------------------------------------------------------------------------------------------------


def test_a_run_that_starts_late_and_reaches_its_limit_times_out(budgets_file):
    """The second job starts at 2 hours, when the first frees the node, and is cut at its 1-hour limit: it timed
    out (not completed) at 3 hours, although its run is shorter than the time since the replay began."""
    jobs = [TraceJob(id="first", submit_s=0, team="lab/a", gpus=8, duration_s=2 * HOUR),
            TraceJob(id="late", submit_s=0, team="lab/b", gpus=8, duration_s=3 * HOUR, time_limit_s=HOUR)]
    result = replay(budgets_file, jobs, nodes="1x8:H100")
    rows = {r[0]: r[4:] for r in result.schedule}
    assert rows == {"first": (0.0, 2 * HOUR, "completed"), "late": (2 * HOUR, 3 * HOUR, "timeout")}
    assert (result.metrics["completed_jobs"], result.metrics["timeouts"]) == (1, 1)


# ---- notices of preemption ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("victim", ["nobody", "done"])
def test_a_notice_for_a_job_that_is_not_running_stops_the_replay_with_its_name_and_state(budgets_file, victim):
    """A policy that preempts a job it made up, or one already over, is a policy bug: the replay stops and says
    which job, in which state (rather than crash on it, or ignore it)."""
    jobs = [TraceJob(id="done", submit_s=0, team="lab/a", gpus=1, duration_s=600),
            TraceJob(id="keeps-the-replay-going", submit_s=0, team="lab/b", gpus=1, duration_s=2 * HOUR)]
    with pytest.raises(SimulationError, match=rf"Preempt of job '{victim}' which is not running "
                                              rf"\({'unknown' if victim == 'nobody' else 'done'}\) at t=\d+"):
        replay(budgets_file, jobs, _Notices(notice(HOUR, victim, 60)))


def test_a_second_notice_inside_the_grace_changes_nothing(budgets_file):
    """Signalled at 1 hour with 10 minutes of grace (the pessimistic model: the save takes the whole grace), then
    again 5 minutes later with no grace: the job keeps its first notice, is stopped once, at 1 h 10 min, and loses
    nothing."""
    jobs = [TraceJob(id="v", submit_s=0, team="lab/a", gpus=8, duration_s=5 * HOUR)]
    pol = _Notices(notice(HOUR, "v", 600), notice(HOUR + 300, "v", 0, "fair-share"))
    result = replay(budgets_file, jobs, pol, nodes="1x8:H100", checkpoint_save_s=None)
    first = sorted(result.schedule, key=lambda r: r[4])[0]
    assert (first[5], first[6]) == (HOUR + 600, "preempted")
    assert (result.metrics["preemptions"], result.metrics["lost_gpu_hours"]) == (1, 0)


def test_preemptions_add_up_by_reason(budgets_file):
    """Two notices of each reason (each to another job) count two of each, and two inside the protected time."""
    reasons = ("fair-share", "debug", "turn", "drain")
    jobs = [TraceJob(id=f"{r}{k}", submit_s=0, team="lab/a", gpus=1, duration_s=5 * HOUR)
            for r in reasons for k in (1, 2)]
    pol = _Notices(*(notice(HOUR, j.id, 60, j.id[:-1]) for j in jobs))
    m = replay(budgets_file, jobs, pol).metrics
    assert (m["preemptions"], m["preemptions_debug"], m["preemptions_turn"], m["preemptions_drain"]) == (8, 2, 2, 2)
    assert m["preempted_jobs"] == 6  # the drained jobs were not the policy's choice
    assert m["preempted_in_protected"] == 6  # at 1 hour, inside standard's 2 protected hours (drains aside)


def test_a_job_preempted_then_drained_whose_run_ends_in_the_grace_still_counts_as_preempted(budgets_file):
    """Preempted at 1 hour (saved), it runs again from 1 h 01 min to 2 h 01 min; drained at 1 h 50 min with an
    hour's grace, its work ends inside the grace: that second run ends on its own, but the job was still preempted
    once."""
    jobs = [TraceJob(id="v", submit_s=0, team="lab/a", gpus=8, duration_s=2 * HOUR)]
    pol = _Notices(notice(HOUR, "v", 60), notice(110 * 60, "v", 3600, "drain"))
    result = replay(budgets_file, jobs, pol, nodes="1x8:H100", checkpoint_save_s=None)
    assert [r[6] for r in sorted(result.schedule, key=lambda r: r[4])] == ["preempted", "completed"]
    m = result.metrics
    assert (m["preemptions"], m["preemptions_drain"], m["preempted_jobs"]) == (2, 1, 1)


@pytest.mark.parametrize("at_s, breach", [(2 * HOUR - 300, 1), (2 * HOUR, 0)])
def test_protected_time_ends_at_its_last_second(budgets_file, at_s, breach):
    """Standard work is protected for 2 hours: a notice one cycle (a heartbeat) before is a breach, one at 2 hours
    is not."""
    jobs = [TraceJob(id="v", submit_s=0, team="lab/a", gpus=8, duration_s=5 * HOUR)]
    pol = _Notices(notice(at_s, "v", 60))
    result = replay(budgets_file, jobs, pol, nodes="1x8:H100")
    assert sorted(result.schedule, key=lambda r: r[4])[0][5] == at_s + 60
    assert result.metrics["preempted_in_protected"] == breach


@pytest.mark.parametrize("grace, save, lost_s", [(1, None, 0), (60, 60.0, 0), (59, 60.0, 1259), (0, None, 1200)])
def test_a_grace_saves_the_work_when_the_checkpoint_fits_in_it(budgets_file, grace, save, lost_s):
    """Signalled at 80 minutes, 20 minutes after its hourly checkpoint: a grace of even one second saves
    everything when saving takes the whole grace (the pessimistic model), so does a grace exactly as long as
    the save; with a grace a second short of the save the job works on unsaved to the grace's end and loses the
    work since its checkpoint, as with no grace at all (each ends with ``preempted``)."""
    jobs = [TraceJob(id="v", submit_s=0, team="lab/a", gpus=8, duration_s=5 * HOUR)]
    pol = _Notices(notice(80 * 60, "v", grace))
    result = replay(budgets_file, jobs, pol, nodes="1x8:H100", checkpoint_minutes=60, checkpoint_save_s=save)
    rows = sorted(result.schedule, key=lambda r: r[4])
    assert (rows[0][5], rows[0][6]) == (80 * 60 + grace, "preempted")
    assert result.metrics["lost_gpu_hours"] == pytest.approx(8 * lost_s / HOUR)
    resumed_from = 80 * 60 if lost_s == 0 else 60 * 60
    assert rows[1][5] - rows[1][4] == pytest.approx(5 * HOUR - resumed_from)
    # it runs again when its grace ends (a cycle then), or at the next regular cycle when stopped at once
    assert rows[1][4] == 80 * 60 + (grace or 30)


def test_a_job_saved_at_its_notice_resumes_where_it_stopped_whenever_it_started(budgets_file):
    """A job that started at 2 hours (after another) and is signalled at 3 hours saves its hour of work: its next
    run needs the 3 hours left, not more, not less."""
    jobs = [TraceJob(id="first", submit_s=0, team="lab/b", gpus=8, duration_s=2 * HOUR),
            TraceJob(id="v", submit_s=0, team="lab/a", gpus=8, duration_s=4 * HOUR)]
    pol = _Notices(notice(3 * HOUR, "v", 60))
    result = replay(budgets_file, jobs, pol, nodes="1x8:H100", checkpoint_save_s=None)
    runs = sorted((r for r in result.schedule if r[0] == "v"), key=lambda r: r[4])
    assert [(r[4], r[5], r[6]) for r in runs[:1]] == [(2 * HOUR, 3 * HOUR + 60, "preempted")]
    assert runs[1][5] - runs[1][4] == pytest.approx(3 * HOUR)
    assert runs[1][6] == "completed"


@pytest.mark.parametrize("save, checkpoint", [(None, 80 * 60), (900.0, 60 * 60)])
def test_the_policy_sees_a_saved_job_checkpointed_at_its_notice(budgets_file, save, checkpoint):
    """While a job that saved at its notice holds its GPUs, the snapshot says its last checkpoint is the notice
    (what a policy weighing that job's loss would read); one whose save does not fit in its 10 minutes of grace
    still has only its last periodic checkpoint."""
    jobs = [TraceJob(id="v", submit_s=0, team="lab/a", gpus=8, duration_s=5 * HOUR)]
    pol = _Notices(notice(80 * 60, "v", 600))
    replay(budgets_file, jobs, pol, nodes="1x8:H100", checkpoint_minutes=60, checkpoint_save_s=save)
    during = [r for s in pol.snaps if 80 * 60 < s.now_s < 90 * 60 for r in s.running if r.id == "v"]
    assert during and {r.last_checkpoint_s for r in during} == {checkpoint}
    before = [r for s in pol.snaps if 60 * 60 <= s.now_s < 80 * 60 for r in s.running if r.id == "v"]
    assert before and {r.last_checkpoint_s for r in before} == {60 * 60}


# ---- debug sessions ------------------------------------------------------------------------------------------------


def test_a_forgotten_session_uses_nothing_while_it_sits_idle(budgets_file):
    """A session of 2 GPUs at 50% works 30 minutes, then sits open and idle to its 4-hour limit (a baseline does
    not release it), beside a 1-GPU job of its team at 80% for 6 hours: of the 14 GPU-hours held, 0.5 + 4.8 were
    used (nothing of the session's idle time, nor of it once ended). From its idle moment on the policy sees the
    session at 0% utilization, idle since then (what the squatting flags and the idle release read)."""
    jobs = [TraceJob(id="s", submit_s=0, team="lab/a", gpus=2, duration_s=1800, kind="debug", utilization=0.5),
            TraceJob(id="j", submit_s=0, team="lab/a", gpus=1, duration_s=6 * HOUR, utilization=0.8)]
    pol = _Scripted("none", 1e18, 0)
    result = replay(budgets_file, jobs, pol, debug_forget_share=1.0)
    assert {r[0]: (r[5], r[6]) for r in result.schedule} == {"s": (4 * HOUR, "completed"),  # (its work was done)
                                                             "j": (6 * HOUR, "completed")}
    assert result.metrics["utilization"] == pytest.approx((2 * 0.5 * 0.5 + 0.8 * 6) / (2 * 4 + 6))
    seen = {(r.utilization, r.idle_since_s) for snap in pol.snaps if snap.now_s > 1800 for r in snap.running
            if r.id == "s"}
    assert seen == {(0.0, 1800)}


def test_a_session_released_or_refused_leaves_its_users_slot_free(budgets_file):
    """One open session a person (the portal's limit, here 1); every session is left open after its work, and the
    budget policy releases it once idle. s2 comes after s1's release: a session. s3 and s4 come while s2 is open:
    each refused, run as a 5-hour batch job. s5 comes after s2's release, while s3 and s4 still run: a session,
    since a refused session holds no slot."""
    def session(job_id, at, hours=0.5):
        return TraceJob(id=job_id, submit_s=at, team="lab/a", user="rita", gpus=1, duration_s=hours * HOUR,
                        kind="debug")

    jobs = [session("s1", 0), session("s2", 2 * HOUR), session("s3", 2 * HOUR + 60, 5),
            session("s4", 2 * HOUR + 120, 5), session("s5", 4 * HOUR)]
    result = replay(budgets_file, jobs, "budget", debug_forget_share=1.0, debug_sessions_per_user=1)
    m = result.metrics
    assert (m["debug_sessions"], m["debug_as_batch"], m["debug_over_user_limit"]) == (3, 2, 2)
    ends = {r[0]: (r[5], r[6]) for r in result.schedule}
    assert {j: e[1] for j, e in ends.items()} == {"s1": "released", "s2": "released", "s3": "completed",
                                                  "s4": "completed", "s5": "released"}
    assert ends["s1"][0] < 2 * HOUR and ends["s2"][0] < 4 * HOUR < ends["s3"][0]
    assert (m["releases"], m["lost_gpu_hours"]) == (3, 0)


def test_a_release_of_a_job_that_is_not_running_stops_the_replay(budgets_file):
    jobs = [TraceJob(id="done", submit_s=0, team="lab/a", gpus=1, duration_s=600),
            TraceJob(id="keeps-the-replay-going", submit_s=0, team="lab/b", gpus=1, duration_s=2 * HOUR)]
    with pytest.raises(SimulationError, match=r"notices: Release of job 'done' which is not running"):
        replay(budgets_file, jobs, _Notices((HOUR, Release("done", "idle"))))


# ---- node failures -------------------------------------------------------------------------------------------------


def test_random_failures_recur_at_their_mean_rate(budgets_file):
    """4 nodes that fail every 20 hours on average and take 4 hours to repair, over 30 days: each fails about
    720 / 24 = 30 times (120 in all, give or take twice its spread), and is up 20 / 24 of the time."""
    m = replay(budgets_file, [], nodes="4x8:H100", horizon=30 * DAY, mtbf_hours=20, repair_hours=4, seed=1).metrics
    assert 120 - 2 * 120 ** 0.5 <= m["node_failures"] <= 120 + 2 * 120 ** 0.5
    assert m["availability"] == pytest.approx(20 / 24, abs=0.04)


def test_overlapping_failures_count_every_gpu_back_when_repaired(budgets_file):
    """One node down from 1 h to 2 h, the other from 1.5 h to 2.5 h, over 4 hours: 16 GPUs, then 8, none, 8 and
    16 again: availability (16 + 4 + 0 + 4 + 24) / 64 = 0.75. Each failure stops the job on its node."""
    jobs = [TraceJob(id=f"j{i}", submit_s=0, team="lab/a", gpus=4, duration_s=2 * HOUR) for i in range(2)]
    m = replay(budgets_file, jobs, nodes="1x8:H100,1x8:B200", horizon=4 * HOUR, repair_hours=1,
               failures=(("h100-000", HOUR), ("b200-000", 1.5 * HOUR))).metrics
    assert m["availability"] == pytest.approx(0.75)
    assert (m["node_failures"], m["failure_stops"]) == (2, 2)


def test_a_debug_pool_node_is_back_in_the_pool_after_its_repair(budgets_file):
    pol = _Scripted("none", 1e18, 0)
    jobs = [TraceJob(id="j", submit_s=0, team="lab/a", gpus=1, duration_s=4 * HOUR)]
    replay(budgets_file, jobs, pol, debug_pool_nodes=1, failures=(("h100-000", HOUR),), repair_hours=1)
    after = [n for snap in pol.snaps if snap.now_s > 2 * HOUR for n in snap.nodes if n.id == "h100-000"]
    assert after and all(n.debug_pool and n.health == "healthy" for n in after)


# ---- budgets ------------------------------------------------------------------------------------------------------


def test_a_team_runs_out_of_budget_when_its_charges_reach_its_grant(tmp_path, write_file):
    """lab/b's 1 GPU-hour lasts 450 s on 8 GPUs: its report says when it ran out (at the next event or heartbeat,
    DESIGN's soft landing), and lab/a, far from its grant, never did."""
    budgets = write_file(tmp_path / "b.csv", "team,gpu_hours\nlab,10\nlab/a,9\nlab/b,1\n")
    jobs = [TraceJob(id="b", submit_s=0, team="lab/b", gpus=8, duration_s=HOUR),
            TraceJob(id="a", submit_s=0, team="lab/a", gpus=1, duration_s=HOUR)]
    teams = replay(budgets, jobs, per_team=True).teams
    assert 450 <= teams["lab/b"]["ran_out_s"] <= 450 + 300
    assert teams["lab/a"]["ran_out_s"] is None


def test_a_spent_teams_work_fills_the_cluster_and_counts_in_its_ceiling(tmp_path, write_file):
    """A team with no budget left runs its 8-GPU job on 16 idle GPUs for the whole hour: half the cluster was
    occupied, and half could have been (its demand counts in the occupancy ceiling, whatever its budget)."""
    budgets = write_file(tmp_path / "b.csv", "team,gpu_hours\nlab,10\nlab/a,10\nlab/b,0\n")
    jobs = [TraceJob(id="b", submit_s=0, team="lab/b", gpus=8, duration_s=HOUR)]
    m = replay(budgets, jobs, horizon=HOUR).metrics
    assert (m["occupancy"], m["occupancy_ceiling"]) == (pytest.approx(0.5), pytest.approx(0.5))


def test_idle_session_time_adds_up_over_sessions_and_leaves_squatters_out(budgets_file):
    """Two forgotten sessions of 1 and 2 GPUs, each idle from its 30 minutes of work to its 4-hour limit: 3.5 + 7
    idle GPU-hours. Squatters (batch jobs idle from their start) are the squatting flags' business, not this
    figure's."""
    jobs = [TraceJob(id=f"s{g}", submit_s=0, team="lab/a", gpus=g, duration_s=1800, kind="debug", user=f"u{g}")
            for g in (1, 2)]
    m = replay(budgets_file, jobs, debug_forget_share=1.0, squatters=2, horizon=DAY).metrics
    assert m["debug_idle_gpu_hours"] == pytest.approx(3.5 + 7)


def test_a_calm_replay_counts_nothing_that_did_not_happen(budgets_file, tiny_trace):
    result = replay(budgets_file, load_trace(str(tiny_trace), load_budgets(str(budgets_file)).teams), "budget")
    counts = ("preemptions", "failure_stops", "node_failures", "releases", "squatting_flags", "timeouts",
              "preempted_in_protected")
    assert {k: result.metrics[k] for k in counts} == dict.fromkeys(counts, 0)


def test_a_run_ending_inside_its_grace_hands_its_gpus_over_at_once(budgets_file):
    """Signalled at 1 hour with 10 minutes of grace, its work ends 10 s later: the job waiting for its node starts
    then, not at the next regular cycle."""
    jobs = [TraceJob(id="v", submit_s=0, team="lab/a", gpus=8, duration_s=HOUR + 10),
            TraceJob(id="w", submit_s=0, team="lab/b", gpus=8, duration_s=HOUR)]
    result = replay(budgets_file, jobs, _Notices(notice(HOUR, "v", 600)), nodes="1x8:H100",
                    checkpoint_save_s=None)
    rows = {r[0]: r[4:] for r in result.schedule}
    assert rows["v"] == (0.0, HOUR + 10, "completed") and rows["w"][0] == HOUR + 10


def test_a_preempted_session_is_over_and_leaves_its_users_slot_free(budgets_file):
    """A session is not requeued when preempted: its user, held to one open session, starts another at once."""
    jobs = [TraceJob(id="s1", submit_s=0, team="lab/a", user="rita", gpus=1, duration_s=2 * HOUR, kind="debug"),
            TraceJob(id="s2", submit_s=HOUR + 60, team="lab/a", user="rita", gpus=1, duration_s=600,
                     kind="debug")]
    result = replay(budgets_file, jobs, _Notices(notice(HOUR, "s1", 60, "debug")), debug_sessions_per_user=1)
    m = result.metrics
    assert (m["debug_sessions"], m["debug_as_batch"]) == (2, 0)
    assert {r[0]: r[6] for r in result.schedule} == {"s1": "preempted", "s2": "completed"}


def test_each_run_of_a_job_preempted_twice_knows_how_many_came_before(budgets_file):
    jobs = [TraceJob(id="v", submit_s=0, team="lab/a", gpus=8, duration_s=5 * HOUR)]
    pol = _Notices(notice(HOUR, "v", 60), notice(2 * HOUR, "v", 60))
    result = replay(budgets_file, jobs, pol, nodes="1x8:H100")
    assert [r[6] for r in sorted(result.schedule, key=lambda r: r[4])] == ["preempted", "preempted", "completed"]
    runs = {(r.started_s, r.runs) for s in pol.snaps for r in s.running}
    assert sorted(k for _, k in runs) == [0, 1, 2]


@pytest.mark.parametrize("work_s, forgotten, reason", [
    (5 * HOUR, 1.0, "timeout"),  # a session's work beyond its 4-hour limit, forgotten or not
    (5 * HOUR, 0.0, "timeout"),
    (4 * HOUR, 0.0, "completed"),  # work exactly as long as the limit: done, forgotten or not
    (4 * HOUR, 1.0, "completed"),
])
def test_a_session_signalled_just_before_its_limit_ends_there_by_its_work(budgets_file, work_s, forgotten, reason):
    jobs = [TraceJob(id="s", submit_s=0, team="lab/a", gpus=1, duration_s=work_s, kind="debug")]
    pol = _Notices(notice(4 * HOUR - 300, "s", 600, "debug"))
    result = replay(budgets_file, jobs, pol, nodes="1x8:H100", debug_forget_share=forgotten,
                    checkpoint_save_s=None)
    assert [(r[5], r[6]) for r in result.schedule] == [(4 * HOUR, reason)]


# ---- the replay's set-up -------------------------------------------------------------------------------------------


def test_two_jobs_with_one_id_are_refused(budgets_file):
    jobs = [TraceJob(id="j", submit_s=0, team="lab/a", gpus=1, duration_s=60)] * 2
    with pytest.raises(ValueError, match="^duplicate job ids$"):
        replay(budgets_file, jobs)


def test_a_replay_of_nothing_without_a_window_is_empty(budgets_file):
    result = replay(budgets_file, [], horizon=None)
    assert (result.horizon_s, result.metrics["jobs"], result.schedule) == (0.0, 0, [])


def test_a_team_with_nothing_of_its_own_to_spend_ran_out_at_the_start(tmp_path, write_file):
    budgets = write_file(tmp_path / "b.csv", "team,gpu_hours\nlab,10\nlab/a,10\nlab/b,0\n")
    teams = replay(budgets, [TraceJob(id="b", submit_s=0, team="lab/b", gpus=1, duration_s=60)], per_team=True).teams
    assert (teams["lab/b"]["ran_out_s"], teams["lab/a"]["ran_out_s"]) == (0.0, None)


@pytest.mark.parametrize("policy", ["budget", "fifo-backfill"])
def test_the_policy_plans_at_most_every_30_seconds_but_for_sessions(budgets_file, policy):
    """A batch job arriving 10 s after a cycle, on free GPUs, starts at the next cycle 30 s after the last one
    (the simulator plans at most every ``cycle_s``); a session arriving then starts at once."""
    jobs = [TraceJob(id="first", submit_s=0, team="lab/a", gpus=1, duration_s=HOUR),
            TraceJob(id="batch", submit_s=10, team="lab/a", gpus=1, duration_s=HOUR),
            TraceJob(id="late", submit_s=HOUR + 100, team="lab/b", gpus=1, duration_s=HOUR),
            TraceJob(id="session", submit_s=HOUR + 110, team="lab/b", gpus=1, duration_s=600, kind="debug")]
    starts = {r[0]: r[4] for r in replay(budgets_file, jobs, policy).schedule}
    assert starts == {"first": 0, "batch": 30, "late": HOUR + 100, "session": HOUR + 110}


# ---- starts --------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("start, message", [
    (Start("nobody", (("h100-000", 1),)), r"Start of job 'nobody' which is not pending \(unknown\) at t=0"),
    (Start("b", (("h100-000", 1),)), r"Start of job 'b' which is not pending \(running\) at t=0"),
    (Start("a", (("h100-000", 1), ("h100-000", 1))), r"placement of a not sorted/unique"),
    (Start("a", (("h100-000", 1), ("b200-000", 1))), r"placement of a not sorted/unique"),
    (Start("a", (("h100-000", 1),)), r"a needs 2 GPUs, placement gives 1"),
    (Start("a", (("nowhere", 2),)), r"Start of a on unknown node 'nowhere'"),
    (Start("a", (("h100-000", 9),)), r"double booking: Start of a puts 9 GPUs on h100-000 which has 7 free"),
    (Start("typed", (("h100-000", 1),)), r"typed wants B200, got h100-000 \(H100\)"),
    (Start("a", (("h100-001", 2),)), r"Start of a on down node h100-001"),
])
def test_a_start_the_cluster_cannot_honour_stops_the_replay_and_says_why(budgets_file, start, message):
    jobs = [TraceJob(id="a", submit_s=0, team="lab/a", gpus=2, duration_s=HOUR),
            TraceJob(id="b", submit_s=0, team="lab/a", gpus=1, duration_s=HOUR),
            TraceJob(id="typed", submit_s=0, team="lab/a", gpus=1, duration_s=HOUR, gpu_type="B200")]
    pol = _Notices((0, Start("b", (("h100-000", 1),))), (0, start))  # both at the first cycle
    with pytest.raises(SimulationError, match=rf"^notices: {message}"):
        replay(budgets_file, jobs, pol, nodes="2x8:H100,1x8:B200", failures=(("h100-001", 0.0),), repair_hours=1)


def test_a_gang_is_charged_for_every_gpu_on_every_node_at_its_types_price(budgets_file):
    """A 16-GPU job over two B200 nodes for an hour costs 16 x 2 GPU-hours; 8 GPUs of a type the price list does
    not name cost 1 a GPU-hour."""
    gang = replay(budgets_file, [TraceJob(id="g", submit_s=0, team="lab/a", gpus=16, duration_s=HOUR)],
                  nodes="2x8:B200", per_team=True)
    assert gang.teams["lab/a"]["spent_gpu_hours"] == pytest.approx(32.0)
    other = replay(budgets_file, [TraceJob(id="j", submit_s=0, team="lab/a", gpus=8, duration_s=HOUR)],
                   nodes="1x8:X1", per_team=True)
    assert other.teams["lab/a"]["spent_gpu_hours"] == pytest.approx(8.0)


def test_the_policy_sees_each_running_job_as_it_started(budgets_file):
    """What a policy reads of a running job: its GPU type, its user, whether it started as borrowed work, and its
    last periodic checkpoint (every 30 minutes from its start; at its start, nothing to lose yet), whatever other
    jobs ended meanwhile. Each cycle is one plan."""
    jobs = [TraceJob(id="a", submit_s=0, team="lab/b", gpus=1, duration_s=600),
            TraceJob(id="j", submit_s=0, team="lab/a", user="rita", gpus=2, duration_s=2 * HOUR)]
    for pol, borrowed in ((_Scripted("none", 1e18, 0), False), (_Borrowing("none", 1e18, 0), True)):
        result = replay(budgets_file, jobs, pol, nodes="1x8:B200", checkpoint_minutes=30)
        assert result.cycles == result.metrics["cycles"] == len(pol.snaps)
        seen = {(r.gpu_type, r.user, r.scavenger, r.started_s) for s in pol.snaps for r in s.running if r.id == "j"}
        assert seen == {("B200", "rita", borrowed, 0.0)}
        checkpoints = sorted({(s.now_s, r.last_checkpoint_s) for s in pol.snaps for r in s.running if r.id == "j"})
        assert checkpoints[0][0] < 1800 and checkpoints[0][1] == 0.0 and checkpoints[-1][0] >= 5400
        assert all(ckpt == 1800 * (now // 1800) for now, ckpt in checkpoints)


def test_a_job_inside_its_grace_keeps_the_checkpoint_it_saved_at_its_notice(budgets_file):
    """Signalled at 110 minutes with 20 minutes of grace (its save takes all of it), the job's hourly checkpoint
    would fall at 120 minutes: the policy still sees the one it saved at its notice."""
    jobs = [TraceJob(id="v", submit_s=0, team="lab/a", gpus=8, duration_s=5 * HOUR)]
    pol = _Notices(notice(110 * 60, "v", 1200))
    replay(budgets_file, jobs, pol, nodes="1x8:H100", checkpoint_minutes=60, checkpoint_save_s=None)
    during = {r.last_checkpoint_s for s in pol.snaps if 120 * 60 <= s.now_s < 130 * 60 for r in s.running}
    assert during == {110 * 60}


class _Reader(FifoBackfill):
    """First come, first served, reading the whole queue (``Snapshot.pending``) each cycle."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[tuple[float, tuple[str, ...]]] = []

    def plan(self, snap):
        self.seen.append((snap.now_s, tuple(p.id for p in snap.pending)))
        return super().plan(snap)


def test_a_policy_that_reads_the_whole_queue_sees_it_every_cycle(budgets_file):
    """The only node is down for the first hour: the job that arrives meanwhile waits, and the cycle at the repair
    still shows it waiting, the queue unchanged since the first cycle read it (the whole queue, once read, is kept
    for the cycles after), and starts it; later cycles show the next job waiting behind it."""
    jobs = [TraceJob(id="first", submit_s=0, team="lab/a", gpus=8, duration_s=2 * HOUR),
            TraceJob(id="next", submit_s=HOUR + 600, team="lab/b", gpus=8, duration_s=HOUR)]
    pol = _Reader()
    result = replay(budgets_file, jobs, pol, nodes="1x8:H100", failures=(("h100-000", 0.0),), repair_hours=1)
    seen = dict(pol.seen)
    assert (seen[0.0], seen[HOUR]) == (("first",), ("first",))
    assert {r[0]: r[4] for r in result.schedule} == {"first": HOUR, "next": 3 * HOUR}
    after = [ids for now, ids in pol.seen if HOUR + 600 <= now < 3 * HOUR]
    assert len(after) >= 10 and set(after) == {("next",)}


# ---- the replay's end and its report -------------------------------------------------------------------------------


def test_a_run_cut_by_the_windows_end_loses_nothing_and_says_so(budgets_file):
    jobs = [TraceJob(id="j", submit_s=0, team="lab/a", gpus=8, duration_s=5 * HOUR)]
    result = replay(budgets_file, jobs, "budget", horizon=HOUR)
    assert (result.policy, result.schedule) == ("budget", [("j", "lab/a", 8, "h100-000:8", 0.0, HOUR, "window_end")])
    assert result.metrics["lost_gpu_hours"] == 0 and result.metrics["completed_jobs"] == 0


def test_every_squatter_flagged_is_counted_once(budgets_file):
    m = replay(budgets_file, [], "budget", squatters=3, horizon=DAY).metrics
    assert (m["squatting_flags"], m["squatters_flagged"]) == (3, 3)


def test_a_scripted_failure_on_a_node_the_cluster_lacks_is_refused(budgets_file):
    with pytest.raises(ValueError, match=r"^scripted failure on unknown node 'h100-009'$"):
        replay(budgets_file, [], failures=(("h100-009", 60.0),), horizon=HOUR)


def test_an_action_the_simulator_does_not_know_stops_the_replay(budgets_file):
    jobs = [TraceJob(id="j", submit_s=0, team="lab/a", gpus=1, duration_s=60)]
    with pytest.raises(SimulationError, match=r"^notices: unknown action 'nonsense'$"):
        replay(budgets_file, jobs, _Notices((0, "nonsense")))


def test_each_teams_report_tells_its_own_story(budgets_file):
    """One node, first come first served. a's 2-hour job starts at once and is preempted at 1 hour (saved at the
    notice, its minute of grace held); first in line still, it runs its last hour at once. b's 1-hour job, waiting
    since 10 s, runs after it. Each team's line of ``--teams-csv``: a held 8 GPUs for 2 hours and a minute, b for 1;
    each started one job, a's was preempted; b waited 7,250 s, running nothing meanwhile, and a never waited."""
    jobs = [TraceJob(id="a1", submit_s=0, team="lab/a", gpus=8, duration_s=2 * HOUR),
            TraceJob(id="b1", submit_s=10, team="lab/b", gpus=8, duration_s=HOUR)]
    result = replay(budgets_file, jobs, _Notices(notice(HOUR, "a1", 60)), nodes="1x8:H100", per_team=True,
                    checkpoint_save_s=None)
    assert sorted((r[0], r[4], r[5]) for r in result.schedule) == [
        ("a1", 0.0, HOUR + 60), ("a1", HOUR + 60, 2 * HOUR + 60), ("b1", 2 * HOUR + 60, 3 * HOUR + 60)]
    a, b = result.teams["lab/a"], result.teams["lab/b"]
    assert (a["held_gpu_hours"], b["held_gpu_hours"]) == (pytest.approx(8 * (2 + 1 / 60)), pytest.approx(8.0))
    assert (a["started_jobs"], a["preempted_jobs"], b["started_jobs"], b["preempted_jobs"]) == (1, 1, 1, 0)
    assert (a["wait_p95_s"], b["wait_p50_s"], b["wait_p95_s"]) == (0.0, 2 * HOUR + 50, 2 * HOUR + 50)
    assert (a["longest_starved_s"], b["longest_starved_s"]) == (0.0, 2 * HOUR + 50)
    for team in (a, b):  # what each wanted and received, within what the node could give
        assert 0 < team["received_gpu_hours"] <= team["wanted_gpu_hours"] <= 8 * 4


def test_sessions_that_never_start_are_counted(budgets_file):
    """A baseline lets a 2-day batch job hold the only node: the two sessions that come meanwhile never start
    within the day, and the report says so (a session started is not among them)."""
    jobs = [TraceJob(id="s0", submit_s=0, team="lab/b", gpus=1, duration_s=600, kind="debug"),
            TraceJob(id="hog", submit_s=0, team="lab/a", gpus=7, duration_s=2 * DAY),
            TraceJob(id="s1", submit_s=HOUR, team="lab/b", gpus=2, duration_s=600, kind="debug"),
            TraceJob(id="s2", submit_s=2 * HOUR, team="lab/b", gpus=2, duration_s=600, kind="debug")]
    m = replay(budgets_file, jobs, nodes="1x8:H100", horizon=DAY).metrics
    assert (m["debug_sessions"], m["debug_never_started"]) == (3, 2)
