"""Write a Philly window as a normalized trace with every job's GPU count redrawn: a gang-heavy trace.

The gang cases of docs/policy.md (Known gaps, "Gang-heavy traces"): Philly asks for one GPU in 93% of its jobs,
a lab training large models asks for whole nodes and more. Each job keeps its submit time, its team
(``philly/<vc>``, the teams of docs/examples/philly-budgets.csv) and its GPU-hours; its size is drawn from
``--mix`` and its run time scaled to keep the GPU-hours (at least one second). Jobs submitted before ``--start``
are left out (the cluster starts empty, as with ``--format philly``). Seeded, so the same arguments write the
same file. ``--mix none`` keeps every job's size (the window as ``--format philly`` reads it); ``--add
VC:GPUS:HOURS:DAY`` appends a job of ``philly/VC`` submitted ``DAY`` days into the window (the large gangs of
docs/policy.md, section 7, "Turns").

    python docs/examples/philly_gangs.py --start 2017-10-01 --mix heavy --trace /tmp/gangs.csv
    python -m scheduling.simulation --trace /tmp/gangs.csv --budgets docs/examples/philly-budgets.csv \\
        --nodes 16x8:H100 --days 14 --policy all
"""

from __future__ import annotations

import argparse
import csv
import random
from datetime import datetime, timedelta
from pathlib import Path

HERE = Path(__file__).resolve().parent
PHILLY = HERE.parents[2] / "shared" / "traces" / "philly" / "philly-sep-oct-2017.csv"
# (GPUs, weight) of each mix; "heavy": half the jobs 1 GPU, a fifth whole 8-GPU nodes, 5% gangs of 16-32
MIXES = {
    "heavy": ((1, 50), (2, 12.5), (4, 12.5), (8, 20), (16, 2.5), (32, 2.5)),
    "mild": ((1, 70), (2, 9), (4, 9), (8, 10), (16, 1), (32, 1)),
}


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--philly", default=str(PHILLY), help="the Philly per-job CSV")
    p.add_argument("--start", required=True, help="window start, e.g. 2017-10-01")
    p.add_argument("--days", type=float, default=14)
    p.add_argument("--mix", choices=[*sorted(MIXES), "none"], default="heavy")
    p.add_argument("--add", action="append", default=[], metavar="VC:GPUS:HOURS:DAY",
                   help="append a job of philly/VC (repeatable)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--trace", required=True, help="normalized trace to write")
    opts = p.parse_args(argv)

    rng = random.Random(opts.seed)
    sizes, weights = zip(*MIXES[opts.mix]) if opts.mix != "none" else ((), ())
    t0 = datetime.fromisoformat(opts.start)
    t1 = t0 + timedelta(days=opts.days)
    rows = []
    with open(opts.philly, newline="") as fh:
        for r in csv.DictReader(fh):
            t = datetime.fromisoformat(r["timestamp"])
            gpus, duration = int(r["num_gpus"]), float(r["duration"])
            if not t0 <= t < t1 or duration <= 0:
                continue
            size = rng.choices(sizes, weights)[0] if sizes else gpus
            rows.append(((t - t0).total_seconds(), f"philly/{r['cluster']}", size, max(1.0, duration * gpus / size)))
    for spec in opts.add:
        try:
            vc, gpus, hours, day = spec.split(":")
            rows.append((float(day) * 86400, f"philly/{vc}", int(gpus), float(hours) * 3600))
        except ValueError:
            p.error(f"--add {spec!r}: expected VC:GPUS:HOURS:DAY, e.g. 6c71a0:128:1:1")
    rows.sort(key=lambda row: row[0])
    with open(opts.trace, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["job_id", "submit_s", "team", "gpus", "duration_s"])
        for i, (submit, team, size, duration) in enumerate(rows):
            w.writerow([f"g{i}", f"{submit:.0f}", team, size, f"{duration:.0f}"])
    print(f"{len(rows)} jobs -> {opts.trace}")


if __name__ == "__main__":
    main()
