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

With `--cache FILE` every simulation is appended to FILE (one JSON object a line: the point,
the result without its edge list, and the wall and CPU seconds it took) as soon as it is done,
and simulations already in FILE are not run again: a long run can be read while it goes,
stopped and resumed, or split over several processes (`--parts`) that share the file.
`--table-only` prints the tables from FILE alone (missing simulations are shown as `—`).

Multicast (issue 32, docs/multicast.md): the part `multicast` simulates `pipecast sim --tree
multicast` (the multicast model's segment; `--loss` per frame and link, seed `--loss-seed`) at
every point and prints a third table: multicast against the best simulated tree and both
against T(m), the root's port carrying the message once at the profile's streaming rate. Only
the multicast simulations are cheap: with `--parts multicast --cache FILE` the trees come from
an earlier run's cache (bench/results/sim-auto-20261124/).
"""

import argparse
import json
import os
import resource
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


class Cache:
    """Simulations done, by point; appended to a JSONL file as they finish (None: memory)."""

    def __init__(self, path, point):
        self.path, self.point, self.done = path, point, {}
        if path and os.path.exists(path):
            with open(path) as f:
                for line in f:
                    if line.strip():
                        row = json.loads(line)
                        self.done[self.key(row["machines"], row["size"], row["tree"],
                                           row["segment"])] = row

    def key(self, p, size, tree, segment):
        return (self.point, p, parse_size(size), tree,
                parse_size(segment) if segment else None)

    def get(self, p, size, tree, segment):
        row = self.done.get(self.key(p, size, tree, segment))
        return row["result"] if row else None

    def put(self, p, size, tree, segment, result, wall, cpu):
        row = {"machines": p, "size": size, "tree": tree, "segment": segment,
               "point": list(self.point), "wall_s": round(wall, 2), "cpu_s": round(cpu, 2),
               "load": os.getloadavg()[0], "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
               "result": result}
        self.done[self.key(p, size, tree, segment)] = row
        if self.path:
            with open(self.path, "a") as f:
                f.write(json.dumps(row) + "\n")


def sim(binary, topology, trees, size, segment, profile, cache=None, p=None, run=True):
    """The results of `trees` at one point, from the cache or simulated (one `pipecast sim`
    for the trees not cached); trees neither cached nor run (`run` false) are left out."""
    cached = {t: cache.get(p, size, t, segment) for t in trees} if cache else {}
    todo = [t for t in trees if cached.get(t) is None]
    if todo and run:
        cmd = [binary, "sim", "--topology", topology, "--tree", ",".join(todo),
               "--msize", size, "--profile", profile, "--json"]
        if segment:
            cmd += ["--segment", segment]
        before, wall = resource.getrusage(resource.RUSAGE_CHILDREN), time.time()
        out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
        after, wall = resource.getrusage(resource.RUSAGE_CHILDREN), time.time() - wall
        cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        for t, r in zip(todo, json.loads(out)["results"]):
            r.pop("edges", None)
            r.pop("ranks_us", None)
            cached[t] = r
            if cache:
                cache.put(p, size, t, segment, r, wall / len(todo), cpu / len(todo))
    return [cached[t] for t in trees if cached.get(t) is not None]


def sim_multicast(binary, topology, size, profile, loss, seed, name, cache, p, run):
    """The multicast simulation at one point (cached under `name`), or None."""
    row = cache.get(p, size, name, None) if cache else None
    if row is None and run:
        cmd = [binary, "sim", "--topology", topology, "--tree", "multicast", "--msize", size,
               "--profile", profile, "--loss", str(loss), "--seed", str(seed), "--json"]
        before, wall = resource.getrusage(resource.RUSAGE_CHILDREN), time.time()
        out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
        after, wall = resource.getrusage(resource.RUSAGE_CHILDREN), time.time() - wall
        cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        row = json.loads(out)["results"][0]
        row.pop("edges", None)
        row.pop("ranks_us", None)
        if cache:
            cache.put(p, size, name, None, row, wall, cpu)
    return row


def stream_us(profile, msize):
    """T(m): the message once through the root's port at the profile's streaming rate (its
    largest size over its g), µs."""
    path = profile if os.path.exists(profile) else os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..", "profiles", f"table2-{profile}.json")
    with open(path) as f:
        last = json.load(f)["points"][-1]
    return msize * last["g_us"] / last["bytes"]


def print_multicast(rows, args):
    if not any(mc for _, _, mc, _ in rows):
        return
    loss = f", frame loss {args.loss} per link (seed {args.loss_seed})" if args.loss else ""
    print(f"\nMulticast (simulated, `pipecast sim --tree multicast`{loss}) against the best "
          "simulated tree; T(m) = the message once through the root's port at the profile's "
          "streaming rate:\n")
    print("| machines | size | T(m) ms | multicast ms | segment | model ms | best tree | ms | "
          "multicast / best | multicast / T(m) | best / T(m) | repairs |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for p, size, mc, top in rows:
        t = stream_us(args.profile, parse_size(size))
        ms = lambda us: f"{us / 1e3:.2f}" if us is not None else "—"
        if not mc:
            continue
        done = mc["completion_us"]
        best = top[1][0] if top else None
        ratio = f"{done / best:.3f}" if best else "—"
        bt = f"{best / t:.3f}" if best else "—"
        reps = (mc.get("multicast") or {}).get("repairs", 0)
        print(f"| {p} | {size} | {ms(t)} | {ms(done)} | {mc['segment_bytes']} | "
              f"{ms(mc['predicted_us'])} | {top[0] if top else '—'} | {ms(best)} | {ratio} | "
              f"{done / t:.3f} | {bt} | {reps} |")


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
    ap.add_argument("--cache", help="JSONL file of simulations done: appended to, and resumed")
    ap.add_argument("--parts", default="auto,grid,whole,multicast",
                    help="what to simulate (the rest only from --cache): auto, grid, whole, "
                    "multicast")
    ap.add_argument("--loss", type=float, default=0.0,
                    help="multicast: chance that a 1500-byte frame is lost on a link")
    ap.add_argument("--loss-seed", type=int, default=1, help="multicast: seed of the losses")
    ap.add_argument("--table-only", action="store_true",
                    help="simulate nothing: the tables from --cache")
    args = ap.parse_args()
    parts = set() if args.table_only else set(args.parts.split(","))
    cache = Cache(args.cache, (args.per_switch, args.seed, args.profile))
    chosen = args.trees.split(",")
    pipelined = [t for t in PIPELINED + ["naive-linear"] if t in chosen]

    auto_rows, tree_rows, mc_rows = [], [], []
    mc_name = "multicast" if args.loss == 0 else f"multicast@{args.loss}/{args.loss_seed}"
    started = time.time()
    with tempfile.TemporaryDirectory() as tmp:
        for p in [int(x) for x in args.machines.split(",")]:
            topology = os.path.join(tmp, f"r{p}.json")
            if parts:
                subprocess.run([args.pipecast, "topo", "gen", "random", "--switches",
                                str(max(1, p // args.per_switch)), "--machines", str(p),
                                "--seed", str(args.seed), "-o", topology], check=True)
            for size in args.sizes.split(","):
                msize = parse_size(size)
                auto = sim(args.pipecast, topology, ["auto"], size, None, args.profile, cache,
                           p, "auto" in parts)
                auto = auto[0] if auto else None
                best = {}  # tree -> (completion_us, segment)
                for seg in args.segments.split(","):
                    if parse_size(seg) > max(msize, 1) or msize // parse_size(seg) > MAX_SEGMENTS:
                        continue
                    if not pipelined:
                        continue
                    for r in sim(args.pipecast, topology, pipelined, size, seg, args.profile,
                                 cache, p, "grid" in parts):
                        if r["tree"] not in best or r["completion_us"] < best[r["tree"]][0]:
                            best[r["tree"]] = (r["completion_us"], r["segment_bytes"])
                whole = ["binomial"] + (["scatter-allgather"] if p <= args.sa_max else [])
                whole = [t for t in whole if t in chosen]
                runs = sim(args.pipecast, topology, whole, size, None, args.profile, cache, p,
                           "whole" in parts) if whole else []
                for r in runs:
                    best[r["tree"]] = (r["completion_us"], r["segment_bytes"])
                # auto's own choice is a candidate too (its segment may be off the grid).
                if auto:
                    name = auto["tree"].split("=", 1)[-1]
                    if name not in best or auto["completion_us"] < best[name][0]:
                        best[name] = (auto["completion_us"], auto["segment_bytes"])
                top = min(best.items(), key=lambda kv: kv[1][0]) if best else None
                tree_rows.append((p, size, best))
                mc = sim_multicast(args.pipecast, topology, size, args.profile, args.loss,
                                   args.loss_seed, mc_name, cache, p, "multicast" in parts)
                mc_rows.append((p, size, mc, top))
                if not auto or not top:
                    auto_rows.append((p, size, "— (not simulated)", None, None, None,
                                      top[0] if top else "—", top[1][1] if top else None,
                                      top[1][0] if top else None))
                    continue
                auto_rows.append((p, size, auto["tree"], auto["segment_bytes"],
                                  auto["completion_us"], auto["predicted_us"], top[0],
                                  top[1][1], top[1][0]))
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
        ms = lambda us: f"{us / 1e3:.2f}" if us is not None else "—"
        ratio = f"{done / bdone:.3f}" if done and bdone else "—"
        print(f"| {p} | {size} | {tree} | {seg or '—'} | {ms(done)} | {ms(pred)} | "
              f"{btree} | {bseg or '—'} | {ms(bdone)} | {ratio} |")
    print_multicast(mc_rows, args)
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
