"""Write a Philly window as a normalized trace on a cluster with several GPU types, and its budget file.

The generalization cases of docs/simulation.md ("Clusters with several GPU types"): the 11 VCs in three groups
(``lab/vision``, ``lab/speech``, ``lab/nlp``), each VC's budget from docs/examples/philly-budgets.csv (VCs not in
it get 300 GPU-hours), group budgets the sums of their VCs'. A share of the jobs (``--typed``) asks for one GPU
type, drawn by ``--types`` weights; the others take any type. Jobs submitted before ``--start`` are left out (the
cluster starts empty, as with ``--format philly``). ``--copies N`` writes the window N times over, each copy's VCs
in a group of their own (``lab/copy0``, ``lab/copy1``, ...), for a cluster N times as large: the eight-fold case of
docs/simulation.md's replay speeds. Seeded, so the same arguments write the same files.

    python docs/examples/philly_typed.py --start 2017-10-01 --days 14 --typed 0.8 \\
        --trace /tmp/typed.csv --budgets /tmp/typed-budgets.csv
    python -m scheduling.simulation --trace /tmp/typed.csv --nodes 12x8:H100,4x8:B200 \\
        --budgets /tmp/typed-budgets.csv --days 14 --policy all
    python docs/examples/philly_typed.py --start 2017-10-01 --typed 0 --copies 8 \\
        --trace /tmp/p8.csv --budgets /tmp/p8-b.csv
    python -m scheduling.simulation --trace /tmp/p8.csv --budgets /tmp/p8-b.csv --nodes 128x8:H100 --days 14 \\
        --policy budget
"""

from __future__ import annotations

import argparse
import csv
import random
from datetime import datetime, timedelta
from pathlib import Path

HERE = Path(__file__).resolve().parent
PHILLY = HERE.parents[2] / "shared" / "traces" / "philly" / "philly-sep-oct-2017.csv"
GROUPS = {
    "6214e9": "vision", "7f04ca": "vision", "11cb48": "vision",
    "b436b2": "speech", "ee9e8c": "speech", "e13805": "speech",
    "6c71a0": "nlp", "2869ce": "nlp", "ed69ec": "nlp", "103959": "nlp", "0e4a51": "nlp", "23dbec": "nlp",
}
DEFAULT_VC_BUDGET = 300.0


def parse_types(text: str) -> list[tuple[str, float]]:
    out = []
    for part in text.split(","):
        name, _, weight = part.partition(":")
        out.append((name.strip(), float(weight or 1)))
    return out


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--philly", default=str(PHILLY), help="the Philly per-job CSV")
    p.add_argument("--start", required=True, help="window start, e.g. 2017-10-01")
    p.add_argument("--days", type=float, default=14)
    p.add_argument("--typed", type=float, default=0.3, help="share of jobs that ask for one GPU type")
    p.add_argument("--types", default="H100:0.7,B200:0.3", help="GPU types of typed jobs, with weights")
    p.add_argument("--copies", type=int, default=1, help="the window this many times over, a group per copy")
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--trace", required=True, help="normalized trace to write")
    p.add_argument("--budgets", required=True, help="budget CSV to write")
    opts = p.parse_args(argv)
    if opts.copies < 1:
        p.error(f"--copies must be >= 1, got {opts.copies}")

    rng = random.Random(opts.seed)
    names, weights = zip(*parse_types(opts.types))
    t0 = datetime.fromisoformat(opts.start)
    t1 = t0 + timedelta(days=opts.days)
    window = []
    with open(opts.philly, newline="") as fh:
        for r in csv.DictReader(fh):
            t = datetime.fromisoformat(r["timestamp"])
            if t0 <= t < t1:
                window.append((t, r))
    rows = []
    for copy in range(opts.copies):
        for t, r in window:
            vc = r["cluster"]
            group = GROUPS.get(vc, "misc") if opts.copies == 1 else f"copy{copy}"
            gpu_type = rng.choices(names, weights)[0] if rng.random() < opts.typed else ""
            rows.append({
                "job_id": f"j{len(rows)}",
                "submit_s": int((t - t0).total_seconds()),
                "team": f"lab/{group}/{vc}", "gpus": int(r["num_gpus"]),
                "duration_s": max(1.0, float(r["duration"])), "gpu_type": gpu_type,
            })
    rows.sort(key=lambda row: row["submit_s"])  # (stable: within a second, copy by copy)
    with open(opts.trace, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=["job_id", "submit_s", "team", "gpus", "duration_s", "gpu_type"])
        w.writeheader()
        w.writerows(rows)

    with open(HERE / "philly-budgets.csv", newline="") as fh:
        vc_budget = {r["team"].split("/")[-1]: float(r["gpu_hours"]) for r in csv.DictReader(fh)
                     if "/" in r["team"]}
    leaves = {team: vc_budget.get(team.split("/")[-1], DEFAULT_VC_BUDGET) for team in sorted({r["team"] for r in rows})}
    groups: dict[str, float] = {}
    for team, hours in leaves.items():
        group = team.rsplit("/", 1)[0]
        groups[group] = groups.get(group, 0.0) + hours
    with open(opts.budgets, "w", newline="") as fh:
        fh.write("team,gpu_hours\n")
        fh.write(f"lab,{sum(groups.values()):.0f}\n")
        for team, hours in {**groups, **leaves}.items():
            fh.write(f"{team},{hours:.0f}\n")
    print(f"{len(rows)} jobs, {sum(1 for r in rows if r['gpu_type'])} with a GPU type -> {opts.trace}, {opts.budgets}")


if __name__ == "__main__":
    main()
