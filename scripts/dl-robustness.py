#!/usr/bin/env python3
"""The DL robustness grid of issue 31: least-delay against first-fit and iadeep under every truth.

For each truth model (how the simulated GPUs answer the sets nobody measured: predictor,
pair-max, pair-sum; sim/dl_truth.h), each pair of equal levers (fifo/none, fifo/joint) and each
least-delay setting given with --variant, runs `gpumux simulate --workload dl` over the seeds
and loads and prints, per load: least-delay's average-JCT margin over first-fit and over iadeep
(positive = least-delay lower), the seeds on which its average JCT was lower, and its p95 against
iadeep's (positive = least-delay's p95 higher). A cell passes issue 31's bar when both margins
are positive and the p95 is at most 5 % above iadeep's.

    python3 scripts/dl-robustness.py build/gpumux --seeds 100-109
    python3 scripts/dl-robustness.py build/gpumux --seeds 200-209 --truths pair-max \\
        --variant "guard 0.99=--saturated-busy 0.99" --extra "--work-spread 1"

Baselines run once per (truth, levers); each variant adds least-delay runs only. Standard
library only; the simulator does the work (10 to 20 minutes per seed range on 2 cores).
"""
import argparse
import json
import subprocess
import sys


def run(binary, policies, seeds, loads, truth, tuner, extra):
    cmd = [binary, "simulate", "--workload", "dl", "--policy", ",".join(policies), "--seeds", seeds,
           "--loads", loads, "--truth-model", truth, "--queue", "fifo", "--tuner", tuner,
           "--no-report", "-q", "--format", "json"] + extra
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    by = {}
    for r in json.loads(out)["runs"]:
        by.setdefault((r["policy"], r["load"]), {})[r["seed"]] = r["metrics"]
    return by


def mean(xs):
    return sum(xs) / len(xs)


def compare(ld, base):
    seeds = sorted(ld)
    avg_ld = mean([ld[s]["avg_jct_s"] for s in seeds])
    avg_b = mean([base[s]["avg_jct_s"] for s in seeds])
    p95_ld = mean([ld[s]["p95_jct_s"] for s in seeds])
    p95_b = mean([base[s]["p95_jct_s"] for s in seeds])
    won = sum(1 for s in seeds if ld[s]["avg_jct_s"] < base[s]["avg_jct_s"])
    return 100 * (1 - avg_ld / avg_b), won, 100 * (p95_ld / p95_b - 1), len(seeds)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("binary")
    ap.add_argument("--seeds", default="100-109")
    ap.add_argument("--loads", default="1,2,4")
    ap.add_argument("--truths", default="predictor,pair-max,pair-sum")
    ap.add_argument("--levers", default="none,joint", help="tuners, each with --queue fifo")
    ap.add_argument("--variant", action="append", default=[],
                    help="NAME=OPTIONS: a least-delay setting (options added to its runs only); "
                         "default: one variant 'default' with no options")
    ap.add_argument("--extra", default="", help="options for every run (e.g. --work-spread 1)")
    a = ap.parse_args()
    variants = [v.split("=", 1) for v in a.variant] or [["default", ""]]
    extra = a.extra.split()
    failures = 0
    print(f"seeds {a.seeds}, loads {a.loads}{', ' + a.extra if a.extra else ''}")
    print("truth      levers     least-delay setting       load  vs first-fit     vs iadeep        p95 vs iadeep")
    for truth in a.truths.split(","):
        for tuner in a.levers.split(","):
            base = run(a.binary, ["first-fit", "iadeep"], a.seeds, a.loads, truth, tuner, extra)
            for name, opts in variants:
                ld = run(a.binary, ["least-delay"], a.seeds, a.loads, truth, tuner, extra + opts.split())
                for load in [float(x) for x in a.loads.split(",")]:
                    mine = ld[("least-delay", load)]
                    ff = compare(mine, base[("first-fit", load)])
                    ia = compare(mine, base[("iadeep", load)])
                    ok = ff[0] > 0 and ia[0] > 0 and ia[2] <= 5
                    failures += not ok
                    print(f"{truth:<10} fifo/{tuner:<5} {name:<25} {load:>4g}  "
                          f"{ff[0]:+5.1f}% ({ff[1]:>2}/{ff[3]})  {ia[0]:+5.1f}% ({ia[1]:>2}/{ia[3]})  "
                          f"{ia[2]:+5.1f}%{'' if ok else '  MISSES'}")
                sys.stdout.flush()
    print(f"{failures} cell(s) miss the bar")


if __name__ == "__main__":
    main()
