"""Write a synthetic lab trace (normalized format) and its budget file, for cases no public trace covers.

A lab of 13 teams in 4 departments (``lab/<dept>/<team>``), 4-20 users each, team sizes drawn from a Pareto
law (a few large teams, many small ones), jobs submitted uniformly over ``--days`` until the GPU-hours asked
reach ``--demand`` times the cluster's capacity:

- ``--mix helios``: 70% 1-GPU jobs, 10% 8-GPU, 3% 16-64 GPUs (the rest 2-4 or 12): close to the Helios and Philly
  size mixes, but with run times of hours rather than minutes (lognormal, median 3 h, ``sigma`` 1.8, at most 10
  days; ``--median-run-hours 0.25`` gives Philly's minutes); the case of docs/policy.md, Known gaps, "Fewer,
  longer jobs";
- ``--mix gangs``: 40% 1-GPU jobs, 18% 8-GPU, 14% 12-64 GPUs.

12% of the jobs are interactive (``kind=debug``, 1-8 GPUs, 10 min to 4 h, low utilization; with ``--no-debug`` the
same jobs are submitted as batch jobs; ``--debug-share`` sets another share: with shorter training runs the jobs
multiply for the same demand, and so would the sessions); 13% are evaluations; 40% ask for a GPU type (drawn in
proportion to the GPUs of each type) unless ``--untyped``: the same seed gives the same jobs with and without both
options. Budgets are proportional to the team sizes, the root being the cluster's GPU-hours over the window at the
simulator's price factors (a B200 hour costs two), so that the teams together can spend what the cluster delivers.
Seeded: the same arguments write the same files.

    python docs/examples/synthetic_trace.py --seed 2 --trace /tmp/s.csv --budgets /tmp/s-b.csv
    python -m scheduling.simulation --trace /tmp/s.csv --budgets /tmp/s-b.csv --nodes 24x8:H100,8x8:B200 \\
        --days 14 --policy all
"""

from __future__ import annotations

import argparse
import csv
import math
import random

DEPARTMENTS = {
    "vision": ["det", "seg", "gen"],
    "nlp": ["pre", "ft", "rl", "eval"],
    "sys": ["infra", "comp"],
    "sci": ["bio", "chem", "phys", "climate"],
}
SIZES = {  # GPUs of a training job -> weight
    "helios": {1: 70, 2: 8, 3: 1, 4: 7, 8: 10, 12: 0.5, 16: 2, 24: 0.5, 32: 0.7, 64: 0.3},
    "gangs": {1: 40, 2: 12, 3: 2, 4: 12, 8: 18, 12: 2, 16: 7, 24: 2, 32: 4, 64: 1},
}
PRICE = {"H100": 1.0, "B200": 2.0}  # as scheduling/simulation/model.DEFAULT_PRICES
HOUR = 3600.0


def parse_nodes(spec: str) -> dict[str, int]:
    """``24x8:H100,8x8:B200`` -> GPUs per type."""
    out: dict[str, int] = {}
    for part in spec.split(","):
        count, _, rest = part.partition("x")
        gpus, _, gpu_type = rest.partition(":")
        out[gpu_type] = out.get(gpu_type, 0) + int(count) * int(gpus)
    return out


def generate(seed: int, days: float, demand: float, mix: str, nodes: dict[str, int], debug: bool,
             typed: bool, median_run_s: float = 3 * HOUR, debug_share: float = 0.12, n_teams: int | None = None
             ) -> tuple[list[list], dict[str, float]]:
    rnd = random.Random(seed)
    teams = [f"lab/{d}/{t}" for d, ts in DEPARTMENTS.items() for t in ts]
    if n_teams is not None:  # as many teams, spread over the same departments
        depts = list(DEPARTMENTS)
        teams = [f"lab/{depts[i % len(depts)]}/team{i}" for i in range(n_teams)]
    weights = [rnd.paretovariate(1.2) for _ in teams]
    users = {t: [f"{t.rsplit('/', 1)[1]}{i}" for i in range(rnd.randint(4, 20))] for t in teams}
    sizes, size_w = zip(*SIZES[mix].items())
    window = days * 86400
    capacity = sum(nodes.values())
    target = demand * capacity * window / HOUR
    types = list(nodes)
    rows: list[list] = []
    asked = 0.0
    while asked < target:
        submit = rnd.uniform(0, window)
        team = rnd.choices(teams, weights)[0]
        r = rnd.random()
        if r < debug_share:
            kind, gpus, duration, util = "debug", rnd.choice([1, 1, 1, 2, 2, 4, 8]), rnd.uniform(600, 4 * HOUR), \
                rnd.uniform(0.0, 0.4)
        elif r < debug_share + 0.13:
            kind, gpus = "eval", rnd.choice([1, 1, 2, 4, 8])
            duration, util = math.exp(rnd.gauss(math.log(1200), 1.2)), rnd.uniform(0.3, 0.9)
        else:
            kind, gpus = "train", rnd.choices(sizes, size_w)[0]
            duration = math.exp(rnd.gauss(math.log(median_run_s), 1.8))
            util = rnd.uniform(0.5, 1.0) if rnd.random() < 0.8 else None
        if kind == "debug" and not debug:
            kind = "train"  # the same job, submitted as a batch job
        duration = min(max(duration, 5.0), 10 * 86400)
        gpu_type = ""
        if len(types) > 1 and rnd.random() < 0.4:
            gpu_type = rnd.choices(types, [nodes[t] for t in types])[0]
            if gpus > nodes[gpu_type] or not typed:
                gpu_type = ""
        rows.append([f"s{len(rows) + 1}", round(submit, 1), team, rnd.choice(users[team]), gpus, round(duration, 1),
                     gpu_type, kind, "" if util is None else round(util, 2)])
        asked += gpus * min(duration, window - submit) / HOUR
    rows.sort(key=lambda row: row[1])
    root = sum(n * PRICE.get(t, 1.0) for t, n in nodes.items()) * window / HOUR
    total = sum(weights)
    budgets = {team: math.floor(root * w / total) for team, w in zip(teams, weights)}
    budgets["lab"] = math.ceil(root)
    return rows, budgets


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--days", type=float, default=14)
    p.add_argument("--demand", type=float, default=2.5, help="GPU-hours asked over the cluster's, default 2.5")
    p.add_argument("--mix", choices=sorted(SIZES), default="helios")
    p.add_argument("--nodes", default="24x8:H100,8x8:B200", help="the cluster the demand is sized for")
    p.add_argument("--no-debug", dest="debug", action="store_false", help="no interactive jobs")
    p.add_argument("--untyped", dest="typed", action="store_false", help="no job asks for a GPU type")
    p.add_argument("--median-run-hours", type=float, default=3.0,
                   help="median run time of the training jobs (lognormal, sigma 1.8; default 3 hours; Philly's "
                        "is about a quarter of an hour)")
    p.add_argument("--teams", type=int, default=None,
                   help="this many teams (team0, team1, ... over the four departments) instead of the 13 named ones")
    p.add_argument("--debug-share", type=float, default=0.12,
                   help="share of the jobs that are interactive sessions (default 0.12)")
    p.add_argument("--trace", required=True)
    p.add_argument("--budgets", required=True)
    opts = p.parse_args(argv)
    if not opts.median_run_hours > 0:
        p.error("--median-run-hours must be > 0")
    if not 0 <= opts.debug_share <= 0.87:
        p.error("--debug-share must be between 0 and 0.87 (13% of the jobs are evaluations)")
    if opts.teams is not None and opts.teams < 1:
        p.error("--teams must be >= 1")
    rows, budgets = generate(opts.seed, opts.days, opts.demand, opts.mix, parse_nodes(opts.nodes), opts.debug,
                             opts.typed, opts.median_run_hours * HOUR, opts.debug_share, opts.teams)
    with open(opts.trace, "w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(["job_id", "submit_s", "team", "user", "gpus", "duration_s", "gpu_type", "kind", "utilization"])
        w.writerows(rows)
    with open(opts.budgets, "w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(["team", "gpu_hours"])
        w.writerow(["lab", budgets.pop("lab")])
        w.writerows(sorted(budgets.items()))
    print(f"{len(rows)} jobs -> {opts.trace}; budgets -> {opts.budgets}")


if __name__ == "__main__":
    main()
