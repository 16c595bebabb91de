#!/usr/bin/env python3
"""`auto` against the simulator, and the seeds' comparisons at scale (issue 15).

On seed 003's random clusters (`pipecast topo gen random`: a random switch tree, machines
placed uniformly; seed 003 §5, Figure 5 uses 8 and 16 machines per switch), for every machine
count and message size:

1. `auto`: the tree and segment the LogP model (seed 003 §4.2) picks, simulated
   (`pipecast sim --tree auto`);
2. every candidate tree at every candidate segment size, simulated; the best of each tree and
   the best overall;
3. the ratio auto / best (the issue's goal: at most 1.10).

Prints two markdown tables: auto against the best, and the best time of each tree (the
seeds' comparisons: contention-free linear/binary/k-ary/k-binomial against topology-unaware
binomial and scatter-allgather, seed 000/003; k-binomial against binomial, seed 001 §5;
linear against binary against scatter-allgather as P grows, seed 002 Table 1).

Reproduce (release build; minutes per machine count at the larger sizes):

    cargo build --release --bin pipecast
    python3 bench/sim_auto.py --machines 256,1024 --sizes 4K,64K,1M,16M
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

PIPELINED = ["linear", "binary", "kary:3", "kary:4", "kbinomial"]
WHOLE = ["binomial", "naive-linear"]  # naive-linear is pipelined but topology-unaware
SEGMENTS = ["256", "1K", "4K", "16K", "64K", "256K", "1M"]
# Segment sizes that cut the message into more than this many segments are skipped.
MAX_SEGMENTS = 4096


def parse_size(s):
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    s = s.strip()
    return int(s[:-1]) * units[s[-1].upper()] if s[-1].upper() in units else int(s)


def sim(binary, topology, trees, size, segment, profile):
    cmd = [binary, "sim", "--topology", topology, "--tree", ",".join(trees),
           "--msize", size, "--profile", profile, "--json"]
    if segment:
        cmd += ["--segment", segment]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out)["results"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pipecast", default=os.path.join(
        os.environ.get("CARGO_TARGET_DIR", "target"), "release", "pipecast"))
    ap.add_argument("--machines", default="256,1024")
    ap.add_argument("--sizes", default="4K,64K,1M,16M")
    ap.add_argument("--per-switch", type=int, default=16)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--profile", default="100mbit")
    ap.add_argument("--trees", default=",".join(PIPELINED + WHOLE + ["scatter-allgather"]),
                    help="candidate trees (fewer: cheaper points at 4096 machines)")
    ap.add_argument("--segments", default=",".join(SEGMENTS),
                    help="candidate segment sizes of the pipelined trees")
    ap.add_argument("--sa-max", type=int, default=256,
                    help="simulate scatter-allgather up to this many machines (it is O(P^2))")
    args = ap.parse_args()
    chosen = args.trees.split(",")
    pipelined = [t for t in PIPELINED + ["naive-linear"] if t in chosen]

    auto_rows, tree_rows = [], []
    started = time.time()
    with tempfile.TemporaryDirectory() as tmp:
        for p in [int(x) for x in args.machines.split(",")]:
            topology = os.path.join(tmp, f"r{p}.json")
            subprocess.run([args.pipecast, "topo", "gen", "random", "--switches",
                            str(max(1, p // args.per_switch)), "--machines", str(p),
                            "--seed", str(args.seed), "-o", topology], check=True)
            for size in args.sizes.split(","):
                msize = parse_size(size)
                auto = sim(args.pipecast, topology, ["auto"], size, None, args.profile)[0]
                best = {}  # tree -> (completion_us, segment)
                for seg in args.segments.split(","):
                    if parse_size(seg) > max(msize, 1) or msize // parse_size(seg) > MAX_SEGMENTS:
                        continue
                    if not pipelined:
                        continue
                    for r in sim(args.pipecast, topology, pipelined, size, seg, args.profile):
                        if r["tree"] not in best or r["completion_us"] < best[r["tree"]][0]:
                            best[r["tree"]] = (r["completion_us"], r["segment_bytes"])
                whole = ["binomial"] + (["scatter-allgather"] if p <= args.sa_max else [])
                whole = [t for t in whole if t in chosen]
                runs = sim(args.pipecast, topology, whole, size, None, args.profile) if whole else []
                for r in runs:
                    best[r["tree"]] = (r["completion_us"], r["segment_bytes"])
                # auto's own choice is a candidate too (its segment may be off the grid).
                name = auto["tree"].split("=", 1)[-1]
                if name not in best or auto["completion_us"] < best[name][0]:
                    best[name] = (auto["completion_us"], auto["segment_bytes"])
                top = min(best.items(), key=lambda kv: kv[1][0])
                auto_rows.append((p, size, auto["tree"], auto["segment_bytes"],
                                  auto["completion_us"], auto["predicted_us"], top[0],
                                  top[1][1], top[1][0]))
                tree_rows.append((p, size, best))
                print(f"# {p} machines {size}: auto {auto['tree']} {auto['segment_bytes']} "
                      f"{auto['completion_us']:.0f} us, best {top[0]} {top[1][1]} "
                      f"{top[1][0]:.0f} us ({time.time() - started:.0f} s) "
                      f"{json.dumps(best)}", file=sys.stderr, flush=True)

    print(f"Profile `{args.profile}`, seed {args.seed}, {args.per_switch} machines per switch; "
          f"`python3 bench/sim_auto.py --machines {args.machines} --sizes {args.sizes} "
          f"--per-switch {args.per_switch} --seed {args.seed} --trees {args.trees} "
          f"--segments {args.segments}`\n")
    print("| machines | size | auto | segment | simulated ms | model ms | best simulated | "
          "segment | ms | auto / best |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for p, size, tree, seg, done, pred, btree, bseg, bdone in auto_rows:
        print(f"| {p} | {size} | {tree} | {seg} | {done / 1e3:.2f} | {pred / 1e3:.2f} | "
              f"{btree} | {bseg} | {bdone / 1e3:.2f} | {done / bdone:.3f} |")
    trees = [t for t in PIPELINED + ["naive-linear", "binomial", "scatter-allgather"]
             if t in chosen]
    print("\nBest simulated time of each tree over the segment sizes "
          f"({args.segments.replace(',', ', ')}), ms (segment in brackets):\n")
    print("| machines | size | " + " | ".join(trees) + " |")
    print("|---|---|" + "---|" * len(trees))
    for p, size, best in tree_rows:
        cells = []
        for t in trees:
            if t in best:
                done, seg = best[t]
                cells.append(f"{done / 1e3:.1f} ({seg})")
            else:
                cells.append("—")
        print(f"| {p} | {size} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
