"""Stories about what a waiting job is told (``Plan.waiting``): its team's standing, the teams served before it,
and the figures of when it may start or claim GPUs."""

from dataclasses import replace

from tests.policy.policy_builders import HOUR, NOW, check_plan, flat_teams, nodes, pend, preempts, run, snap

from scheduling.policy import BudgetPolicy, Shortfall, TeamState
from scheduling.policy.reasons import _mins

policy = BudgetPolicy()
RECENT = NOW - 300  # started 5 minutes ago: inside its protected hour


def _plan(s):
    plan = policy.plan(s)
    check_plan(s, plan)
    return plan


def test_a_waiting_job_is_told_how_many_teams_the_fair_tree_serves_before_its_team():
    """Three equal teams on 3 x 8 GPUs, every job protected: a runs 2 of its 8, b 6, c 16. Each waits with an
    8-GPU job: a is served first, then b, then c, and each job says so with its team's figures."""
    running = [run("a1", "lab/a", [("n0", 2)], started=RECENT), run("b1", "lab/b", [("n0", 6)], started=RECENT),
               run("c1", "lab/c", [("n1", 8)], started=RECENT), run("c2", "lab/c", [("n2", 8)], started=RECENT)]
    s = snap(nodes(3), flat_teams({"a": 1, "b": 1, "c": 1}), running,
             [pend("aw", "lab/a", 8), pend("bw", "lab/b", 8), pend("cw", "lab/c", 8)])
    plan = _plan(s)
    assert plan.waiting_code == {"aw": "no-plan", "bw": "beyond-claim", "cw": "at-share"}
    assert plan.waiting["aw"].endswith("(runs 2 of 8.0 entitled GPUs) and is served first as GPUs free up; "
                                       "0 teams ahead")
    assert "(it is owed 2.0)" in plan.waiting["bw"] and plan.waiting["bw"].endswith("; 1 team ahead")
    assert "(runs 16 GPUs, entitled to 8.0 now); 2 teams ahead;" in plan.waiting["cw"]


def test_a_team_short_of_its_share_is_told_how_much_more_it_must_go_without_before_it_may_preempt():
    """lab/a (4 GPUs short) has gone without half of the GPU-hour of its share it must go without before lab/b's
    jobs past their protected time are preempted for it: the other half takes about 8 minutes at 4 GPUs short."""
    s = snap(nodes(2), flat_teams({"a": 1, "b": 1}), [run("b1", "lab/b", [("n0", 8)]), run("b2", "lab/b", [("n1", 8)])],
             [pend("aw", "lab/a", 4)])
    plan = _plan(replace(s, shortfall=Shortfall(NOW, {"lab/a": (0.5 * HOUR, 4.0)})))
    assert not preempts(plan) and plan.waiting_code["aw"] == "reclaim-wait"
    assert ("after 10 min of waiting, and once team lab/a has gone without 1.0 GPU-hours of its share (0.5 so far: "
            "about 8 min more at 4 GPUs short), jobs past their protected time") in plan.waiting["aw"]


def test_a_job_of_a_team_that_runs_no_batch_work_is_told_when_its_turn_comes():
    """Everything lab/b runs is protected, so no plan frees 4 GPUs for lab/a's job, submitted an hour ago; a team
    that runs no batch work gets a turn for a job of one node after a day's wait: in about 23 hours."""
    running = [run(f"b{i}", "lab/b", [(f"n{i}", 8)], started=RECENT) for i in range(4)]
    s = snap(nodes(4), flat_teams({"a": 1, "b": 3}), running, [pend("aw", "lab/a", 4)])
    plan = _plan(replace(s, shortfall=Shortfall(NOW, {"lab/a": (4000.0, 4.0)})))
    assert plan.waiting_code["aw"] == "no-plan"
    assert plan.waiting["aw"].endswith("while its team runs no batch work, it gets a turn (a node freed for it, its "
                                       "jobs preempted once out of their protected time) in about 23.0 h")


def test_a_job_whose_plan_failed_and_that_reserved_nodes_is_told_about_its_reservation():
    """Everything lab/b runs is protected: lab/a's 8-GPU job finds no plan, reserves the node that frees first, and
    is told of that reservation, not only that no plan was found."""
    running = [run(f"b{i}", "lab/b", [(f"n{i}", 8)], started=RECENT + 60 * i) for i in range(4)]
    s = snap(nodes(4), flat_teams({"a": 1, "b": 3}), running, [pend("aw", "lab/a", 8)])
    plan = _plan(replace(s, shortfall=Shortfall(NOW, {"lab/a": (4000.0, 8.0)})))
    assert [(r.kind, r.placement) for r in plan.reservations] == [("gang", (("n0", 8),))]
    assert plan.waiting_code["aw"] == "gang-reserved"
    assert plan.waiting["aw"].startswith("waiting for 8 GPUs on whole nodes; reserved nodes n0 (0 of 8 GPUs free")


def test_a_waiting_session_is_told_when_the_first_job_that_could_yield_for_it_leaves_its_protected_time():
    """lab/b is above its share: its job protected for 10 more minutes is the first that could yield; lab/c's job,
    out of protection in 2 minutes, is within lab/c's share and would never be taken for the session."""
    running = [run("b1", "lab/b", [("n0", 8)], started=NOW - 600), run("b2", "lab/b", [("n1", 8)], started=NOW - 3000),
               run("c1", "lab/c", [("n2", 8)], started=NOW - 3500)]
    s = snap(nodes(3), flat_teams({"a": 1, "b": 1, "c": 1}), running, [pend("dbg", "lab/a", 1, contract="debug")])
    plan = _plan(s)
    assert plan.waiting_code["dbg"] == "debug-protected"
    assert "the first job that could yield for it leaves its protected time in 10 min;" in plan.waiting["dbg"]


def test_a_job_held_for_is_told_when_its_victims_are_gone_at_the_latest():
    """The victim runs under the long contract: half an hour of checkpoint grace."""
    running = [run("b1", "lab/b", [("n0", 8)], contract="long", started=NOW - 30 * HOUR),
               run("b2", "lab/b", [("n1", 8)], started=RECENT)]
    s = snap(nodes(2), flat_teams({"a": 1, "b": 1}), running, [pend("aw", "lab/a", 8)])
    plan = _plan(s)
    assert preempts(plan)["b1"].for_job == "aw" and plan.waiting_code["aw"] == "held"
    assert plan.waiting["aw"] == ("8 GPUs on n0 are held for it while preempted jobs checkpoint (at the latest in "
                                  "30 min)")
    # 35 minutes on, b1 has had its grace and still runs (a slow checkpoint): the hold stands, "0 min" would not do
    hold, (b1, b2) = plan.reservations[0], running
    later = snap(nodes(2), s.teams, [replace(b1, preempting=True, preempt_deadline_s=NOW + 1800), b2],
                 s.pending, (hold,), now=NOW + 35 * 60)
    plan = _plan(later)
    assert plan.waiting_code["aw"] == "held" and plan.waiting["aw"].endswith(
        "checkpoint (their grace is over: they stop any moment now)")


def test_a_job_of_a_team_whose_own_budget_is_spent_is_told_so_and_its_childs_job_is_not():
    """lab/a's own remainder is used up, its child lab/a/x has budget left: on a full node only lab/a's job is told
    that it runs as scavenger work."""
    teams = (TeamState("lab", None, 2), TeamState("lab/a", "lab", 1, remaining_gpu_hours=-5),
             TeamState("lab/a/x", "lab/a", 1, remaining_gpu_hours=100), TeamState("lab/b", "lab", 1))
    s = snap(nodes(1), teams, [run("b1", "lab/b", [("n0", 8)], started=RECENT)],
             [pend("a0", "lab/a"), pend("x0", "lab/a/x")])
    plan = _plan(s)
    assert plan.waiting_code["a0"] == "spent" and plan.waiting["a0"].startswith(
        "budget spent (its GPU-hours for the period are used up): it runs only on idle GPUs as scavenger work")
    assert plan.waiting_code["x0"] != "spent" and "budget spent" not in plan.waiting["x0"]


def test_durations_read_in_whole_minutes_below_two_hours_then_in_hours():
    assert [_mins(t) for t in (-5, 0, 1, 60, 61, 7140, 7141, 7200, 9000)] == [
        "0 min", "0 min", "1 min", "1 min", "2 min", "119 min", "2.0 h", "2.0 h", "2.5 h"]
