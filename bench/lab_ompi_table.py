#!/usr/bin/env python3
"""Markdown table from bench/lab_ompi.sh's results.jsonl (bench/mpi_bcast.c's JSON lines).

Every time is reported as a ratio to T(msize), the point-to-point time measured in the same run
(bcast_s / p2p_s), so rows from runs on a busier or calmer machine stay comparable. Per
placement and size: Open MPI's default, its best forced pipeline and chain (best segment size
in brackets), pipecast, and pipecast's speed-ups against the default and the best forced one.
Usage: lab_ompi_table.py results.jsonl
"""
import json
import statistics
import sys
from collections import defaultdict


def human(n):
    for unit, shift in (("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift} {unit}"
    return f"{n} B"


def main(path):
    rows = defaultdict(dict)  # (placement, bytes) -> config -> (ratio, line)
    bad = []
    with open(path) as f:
        for text in f:
            text = text.strip()
            if not text.startswith("{"):
                continue
            r = json.loads(text)
            placement, config = r["label"].split("/", 1)
            if not r["ok"]:
                bad.append(r["label"])
            if r["p2p_s"] <= 0:
                continue
            rows[(placement, r["bytes"])].setdefault(config, []).append(r)
    # One entry per configuration: the median over rounds of bcast / T(msize) (bench/lab_ompi.sh
    # ROUNDS; of two rounds, their mean), a round's line for T(msize), and every round's lines
    # for the spread.
    for c in rows.values():
        for config, runs in c.items():
            runs.sort(key=lambda r: r["bcast_s"] / r["p2p_s"])
            ratio = statistics.median(r["bcast_s"] / r["p2p_s"] for r in runs)
            c[config] = (ratio, runs[len(runs) // 2], runs)
    if bad:
        print(f"WRONG DATA in: {', '.join(sorted(set(bad)))}\n")
    placements = sorted({p for p, _ in rows}, key=lambda p: (len(p), p))
    if any("tuned" in c for c in rows.values()):
        return ompi5(rows, placements)
    for placement in placements:
        print(f"### {placement}\n")
        print("| size | T(msize) s | OMPI default | best pipeline | best chain | pipecast "
              "| pipecast, fixed segment | pipecast, window | pipecast raweth | vs default | vs best forced "
              "| raweth vs default | raweth vs best forced |")
        print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
        for (p, size) in sorted(k for k in rows if k[0] == placement):
            c = rows[(p, size)]

            def best(prefix):
                found = [(v[0], k.split("-", 1)[1]) for k, v in c.items() if k.startswith(prefix + "-")]
                return min(found) if found else None

            d = c.get("default")
            fixed = best("pipecast_seg")
            win = best("pipecast_win")
            pl, ch, pc = best("pipeline"), best("chain"), c.get("pipecast")
            raw = c.get("raweth")
            wcell = lambda x: "—" if x is None else f"{x[0]:.2f} (W {x[1]})"
            cell = lambda x: "—" if x is None else f"{x[0]:.2f}"
            seg = lambda x: "—" if x is None else f"{x[0]:.2f} ({human(int(x[1]))})"
            t = (pc or d or next(iter(c.values())))[1]["p2p_s"]
            forced = min([x for x in (pl, ch) if x], default=None)
            speedup = lambda ref, x: f"{ref[0] / x[0]:.2f}×" if ref and x else "—"
            print(f"| {human(size)} | {t:.4f} | {cell(d)} | {seg(pl)} | {seg(ch)} | {cell(pc)} | {seg(fixed)} | {wcell(win)} "
                  f"| {cell(raw)} | {speedup(d, pc)} | {speedup(forced, pc)} | {speedup(d, raw)} | {speedup(forced, raw)} |")
        print()


def ompi5(rows, placements):
    """Open MPI 5 (MPI=ompi5): HAN (its default), tuned (HAN excluded) and the component.
    Each cell: the median round's bcast / T(msize), with the range over rounds in brackets
    when there were several; "worst iteration" is the longest single iteration of any round
    over T(msize); the speed-ups compare medians."""
    for placement in placements:
        print(f"### {placement}\n")
        print("| size | T(msize) s | HAN | tuned | pipecast | pipecast worst iteration "
              "| HAN worst iteration | pipecast vs HAN | vs best of HAN, tuned |")
        print("|---|---|---|---|---|---|---|---|---|")
        for (p, size) in sorted(k for k in rows if k[0] == placement):
            c = rows[(p, size)]

            def cell(x):
                if x is None:
                    return "—"
                ratios = [r["bcast_s"] / r["p2p_s"] for r in x[2]]
                spread = f" [{min(ratios):.2f}–{max(ratios):.2f}]" if len(ratios) > 1 else ""
                return f"{x[0]:.2f}{spread}"

            def worst(x):
                if x is None or "iter_max_s" not in x[1]:
                    return "—"
                return f"{max(r['iter_max_s'] / r['p2p_s'] for r in x[2]):.2f}"

            han, tuned, pc = c.get("default"), c.get("tuned"), c.get("pipecast")
            t = (pc or han or next(iter(c.values())))[1]["p2p_s"]
            best = min([x for x in (han, tuned) if x], default=None, key=lambda x: x[0])
            speedup = lambda ref, x: f"{ref[0] / x[0]:.2f}×" if ref and x else "—"
            print(f"| {human(size)} | {t:.4f} | {cell(han)} | {cell(tuned)} | {cell(pc)} | {worst(pc)} "
                  f"| {worst(han)} | {speedup(han, pc)} | {speedup(best, pc)} |")
        print()


if __name__ == "__main__":
    main(sys.argv[1])
