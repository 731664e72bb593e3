"""The schedule checker finds a GPU given twice (and passes a sound schedule)."""

from scheduling.simulation.check import check_schedule
from scheduling.simulation.trace import parse_nodes

HEAD = "job_id,team,gpus,placement,start_s,end_s,end_reason\n"
CAP = {"n0": 8, "n1": 8}


def test_sound_schedule_passes(tmp_path):
    path = tmp_path / "ok.csv"
    path.write_text(HEAD + "a,t,8,n0:8,0,100,completed\nb,t,8,n0:8,100,200,completed\nc,t,4,n0:2;n1:2,0,50,preempted\n"
                    .replace("c,t,4,n0:2;n1:2,0,50", "c,t,4,n1:2;n1:2,0,50"))
    # c is odd but legal: two parts on one node add up to 4 GPUs of n1
    assert check_schedule(str(path), CAP) == []


def test_overlap_on_a_node_is_found(tmp_path):
    path = tmp_path / "bad.csv"
    path.write_text(HEAD + "a,t,6,n0:6,0,100,completed\nb,t,4,n0:2;n1:2,50,150,completed\n"
                    "c,t,1,n0:1,99,101,completed\n")
    problems = check_schedule(str(path), CAP)
    assert len(problems) == 1 and "node n0 holds 9 GPUs of 8 at t=99" in problems[0]
    assert "a, b, c" in problems[0]


def test_bad_rows_are_reported(tmp_path):
    path = tmp_path / "bad.csv"
    path.write_text(HEAD + "a,t,2,n0:1,0,100,completed\nb,t,1,n9:1,0,10,completed\na,t,1,n1:1,50,60,lost\n")
    problems = "\n".join(check_schedule(str(path), CAP))
    assert "placement gives 1" in problems
    assert "unknown node 'n9'" in problems
    assert "unknown end_reason 'lost'" in problems
    assert "job a holds two allocations at once" in problems


def test_a_placement_over_two_gpu_types_is_found_when_the_nodes_are_given(tmp_path):
    nodes = parse_nodes("1x8:H100,1x8:B200")
    path = tmp_path / "span.csv"
    path.write_text(HEAD + "a,t,8,h100-000:8,0,100,completed\nb,t,12,h100-000:4;b200-000:8,100,200,completed\n")
    problems = check_schedule(str(path), nodes)
    assert len(problems) == 1 and "job b spans GPU types B200, H100" in problems[0]


def test_each_bad_row_is_named_by_its_line_and_only_once(tmp_path):
    """Line numbers count the header as line 1. A row with a bad number says so and nothing more; a placement with
    a bad part or an unknown node still adds up its other parts; an allocation of no length is sound."""
    path = tmp_path / "bad.csv"
    path.write_text(HEAD + "a,t,x,n0:1,0,100,completed\n"  # line 2
                    "b,t,2,n0:1,100,50,completed\n"  # line 3
                    "c,t,3,n0:oops;n9:1;n1:3,0,10,completed\n"  # line 4
                    "d,t,1,n1:1,20,20,preempted\n")  # line 5: no length, sound
    assert check_schedule(str(path), CAP) == [
        f"{path}:2: bad number in gpus/start_s/end_s",
        f"{path}:3: job b ends (50.0) before it starts (100.0)",
        f"{path}:3: job b has 2 GPUs but its placement gives 1",
        f"{path}:4: bad placement part 'n0:oops'",
        f"{path}:4: unknown node 'n9'",
    ]


def test_a_schedule_saved_with_a_byte_order_mark_or_missing_columns(tmp_path):
    """A spreadsheet may save the file with a byte-order mark: it is read as it is. A file without the columns
    says which are missing."""
    path = tmp_path / "bom.csv"
    path.write_bytes(("\ufeff" + HEAD + "a,t,8,n0:8,0,100,completed\r\n").encode("utf-8"))
    assert check_schedule(str(path), CAP) == []
    path.write_text("job_id,team,gpus,start_s,end_s\n")
    assert check_schedule(str(path), CAP) == [f"{path}: missing columns placement, end_reason"]


def test_an_overflow_names_only_the_jobs_on_the_node_at_that_moment(tmp_path):
    path = tmp_path / "over.csv"
    path.write_text(HEAD + "old,t,8,n0:8,0,50,completed\na,t,6,n0:6,50,100,completed\n"
                    "b,t,3,n0:3,60,70,completed\n")
    assert check_schedule(str(path), CAP) == ["node n0 holds 9 GPUs of 8 at t=60 (jobs a, b)"]
