#!/usr/bin/env python3
"""`pipecast sim` against `pipecast bench` on the lab (issue 15, docs/sim.md).

For each placement (examples/hub4x4.json, examples/hub4x4-interleaved.json) it builds the lab
(`pipecast lab up`, every link direction shaped to RATE), runs `pipecast bench` RUNS times
(ITERS iterations each, root 0) over the trees and sizes, tears the lab down (also on error or
Ctrl-C), then simulates every (tree, size) with `pipecast sim` at the segment the bench ran,
and prints one table: simulated ms, measured median ms (with the spread of all iterations),
and measured / simulated. Needs root, or a user namespace (docs/lab.md).

    python3 bench/sim_vs_lab.py [--pipecast target/release/pipecast] [--out DIR]
        [--runs 3] [--iters 3] [--sizes 1M,4M,16M] [--transport tcp]
        [--trees linear,binary,naive-linear,binomial,scatter-allgather]
        [--placements hub4x4,hub4x4-interleaved] [--rate 100mbit] [--profile 100mbit]
        [--segment S] [--nice N] [--svg PREFIX]
    python3 bench/sim_vs_lab.py --sim-only --out DIR   # the table again from DIR's raw JSON

Raw output: DIR/bench-PLACEMENT-RUN.json (rank 0's JSON line of `pipecast bench`, with
`times_us`: every iteration's time of the slowest rank = broadcast + barrier, bench's method),
DIR/sim-PLACEMENT.json (one `pipecast sim --json` result per line), DIR/table.md.
"""

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run(cmd, **kw):
    return subprocess.run(cmd, check=True, text=True, capture_output=True, **kw)


def loadavg():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def measure(a, placement, name):
    """RUNS bench runs on a lab built from the placement's topology file."""
    topo = os.path.join(HERE, "examples", placement + ".json")
    subprocess.run([a.pipecast, "lab", "down", "--name", name], capture_output=True)
    run([a.pipecast, "lab", "up", "--name", name, "--topology", topo, "--rate", a.rate])
    try:
        for i in range(a.runs):
            out = os.path.join(a.out, f"bench-{placement}-{i}.json")
            before = loadavg()
            nice = ["nice", "-n", str(a.nice)] if a.nice else []
            p = subprocess.run(
                nice + [a.pipecast, "lab", "run", "--name", name, "--timeout", "1800", "--",
                 a.pipecast, "bench", "--json", "--topology", topo, "--transport", a.transport,
                 "--sizes", a.sizes, "--tree", a.trees, "--iters", str(a.iters), "--root", "0",
                 "--timeout-ms", "30000"] + (["--segment", a.segment] if a.segment else []),
                text=True, capture_output=True)
            if p.returncode != 0:
                sys.stderr.write(p.stderr[-3000:])
                raise SystemExit(f"bench failed on {placement} (run {i})")
            line = next(l[5:] for l in p.stdout.splitlines() if l.startswith("[r0] {"))
            report = json.loads(line)
            report["load_before"], report["load_after"] = before, loadavg()
            with open(out, "w") as f:
                json.dump(report, f)
            print(f"# {placement} run {i}: load {before} -> {report['load_after']}",
                  file=sys.stderr, flush=True)
    finally:
        subprocess.run([a.pipecast, "lab", "down", "--name", name], capture_output=True)


def simulate(a, placement, rows):
    """One `pipecast sim --json` per (tree, size), at the segment the bench ran."""
    topo = os.path.join(HERE, "examples", placement + ".json")
    out = []
    for (tree, size), seg in sorted(rows.items()):
        p = run([a.pipecast, "sim", "--json", "--topology", topo, "--tree", tree,
                 "--msize", str(size), "--segment", str(seg), "--profile", a.profile])
        out.append(json.loads(p.stdout)["results"][0])
    with open(os.path.join(a.out, f"sim-{placement}.json"), "w") as f:
        for r in out:
            f.write(json.dumps(r) + "\n")
    return {(r["tree"], r["bytes"]): r for r in out}


COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b"]


def svg(path, placement, trees, sims, times):
    """Time against size, log-log: the simulator's lines, the lab's medians (dots) and
    min–max (bars), one color per tree."""
    import math
    w, h, left, right, top, bottom = 720, 480, 70, 150, 40, 50
    keys = [k for k in sims if k in times]
    xs = [math.log10(b) for _, b in keys]
    ys = [math.log10(v) for k in keys for v in (sims[k], min(times[k]), max(times[k]))]
    x0, x1 = min(xs) - 0.12, max(xs) + 0.12
    y0, y1 = math.floor(min(ys)), math.ceil(max(ys))
    px = lambda x: left + (x - x0) / (x1 - x0) * (w - left - right)
    py = lambda y: h - bottom - (y - y0) / (y1 - y0) * (h - bottom - top)
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" '
           f'font-family="sans-serif" font-size="12">',
           '<rect width="100%" height="100%" fill="white"/>',
           f'<text x="{left}" y="20">{placement}, 100 mbit: pipecast sim (lines) vs the lab '
           f'(dots: median, bars: min-max), ms</text>',
           f'<path d="M{left} {top} V{h - bottom} H{w - right}" stroke="black" fill="none"/>']
    for b in sorted({b for _, b in keys}):
        x = px(math.log10(b))
        out.append(f'<text x="{x:.1f}" y="{h - bottom + 18}" text-anchor="middle">'
                   f'{b >> 20} MiB</text>')
    for d in range(y0, y1 + 1):
        y = py(d)
        out.append(f'<text x="{left - 6}" y="{y + 4:.1f}" text-anchor="end">{10 ** d / 1e3:g}'
                   f'</text><path d="M{left} {y:.1f} H{w - right}" stroke="#ddd"/>')
    for i, tree in enumerate(trees):
        c = COLORS[i % len(COLORS)]
        pts = sorted((b, v) for (t, b), v in sims.items() if t == tree)
        if not pts:
            continue
        line = " ".join(f"{px(math.log10(b)):.1f},{py(math.log10(v)):.1f}" for b, v in pts)
        out.append(f'<polyline points="{line}" fill="none" stroke="{c}" stroke-width="2"/>')
        for b, _ in pts:
            t = times.get((tree, b))
            if not t:
                continue
            x = px(math.log10(b)) + (i - len(trees) / 2) * 4
            out.append(f'<path d="M{x:.1f} {py(math.log10(min(t))):.1f} '
                       f'V{py(math.log10(max(t))):.1f}" stroke="{c}"/>')
            out.append(f'<circle cx="{x:.1f}" cy="{py(math.log10(statistics.median(t))):.1f}" '
                       f'r="4" fill="{c}"/>')
        out.append(f'<text x="{w - right + 10}" y="{top + 16 * (i + 1)}" fill="{c}">{tree}</text>')
    out.append("</svg>")
    with open(path, "w") as f:
        f.write("\n".join(out) + "\n")


def table(a):
    lines = [
        f"| placement | tree | bytes | segment | sim ms | lab median ms | lab min–max ms | n | "
        f"lab / sim | busy edges |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    p2p = []
    for placement in a.placements.split(","):
        runs = []
        i = 0
        while os.path.exists(os.path.join(a.out, f"bench-{placement}-{i}.json")):
            with open(os.path.join(a.out, f"bench-{placement}-{i}.json")) as f:
                runs.append(json.load(f))
            i += 1
        if not runs:
            raise SystemExit(f"no bench-{placement}-*.json in {a.out}")
        times, segs, ok, t_m = {}, {}, True, {}
        for rep in runs:
            for r in rep["results"]:
                key = (r["tree"], r["bytes"])
                times.setdefault(key, []).extend(r.get("times_us") or [r["avg_us"]])
                segs[key] = r["segment_bytes"]
                ok &= r["verified"]
                t_m.setdefault(r["bytes"], set()).add(r["p2p_us"])
        sims = simulate(a, placement, segs)
        if a.svg:
            svg(f"{a.svg}-{placement}.svg", placement, a.trees.split(","),
                {k: r["completion_us"] for k, r in sims.items()}, times)
        order = {t: i for i, t in enumerate(a.trees.split(","))}
        for key in sorted(times, key=lambda k: (k[1], order.get(k[0], 99))):
            t = times[key]
            sim = sims[key]["completion_us"]
            # The simulated mean of directed edges busy at once: the packets per second the
            # lab's host forwards for the whole emulated network.
            busy = sum(e["busy_us"] for e in sims[key]["edges"]) / sim
            med = statistics.median(t)
            lines.append(
                f"| {placement} | {key[0]} | {key[1] >> 20} MiB | {segs[key]} | {sim / 1e3:.1f} | "
                f"{med / 1e3:.1f} | {min(t) / 1e3:.1f}–{max(t) / 1e3:.1f} | {len(t)} | "
                f"**{med / sim:.3f}** | {busy:.1f} |")
        for b in sorted(t_m):
            p2p.append(f"{placement} T({b >> 20} MiB) point-to-point: median "
                       f"{statistics.median(sorted(t_m[b])) / 1e3:.1f} ms over {len(t_m[b])} runs")
        if not ok:
            lines.append(f"| {placement} | **some rank received wrong bytes** | | | | | | | | |")
        loads = ", ".join(f"{r.get('load_before', '?')} -> {r.get('load_after', '?')}" for r in runs)
        p2p.append(f"{placement}: transport {runs[0]['transport']}, load per run: {loads}")
    text = "\n".join(lines + [""] + p2p) + "\n"
    with open(os.path.join(a.out, "table.md"), "w") as f:
        f.write(text)
    print(text)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pipecast", default=os.path.join(HERE, "target/release/pipecast"))
    ap.add_argument("--out")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--iters", type=int, default=3)
    ap.add_argument("--sizes", default="1M,4M,16M")
    ap.add_argument("--trees", default="linear,binary,naive-linear,binomial,scatter-allgather")
    ap.add_argument("--placements", default="hub4x4,hub4x4-interleaved")
    ap.add_argument("--transport", default="tcp")
    ap.add_argument("--rate", default="100mbit")
    ap.add_argument("--profile", default="100mbit")
    ap.add_argument("--segment", help="segment size of the pipelined trees (default: the model's)")
    ap.add_argument("--nice", type=int, default=0,
                    help="run the ranks at this niceness (e.g. -10: shielded from other load)")
    ap.add_argument("--svg", help="also plot sim against the lab to SVG-PLACEMENT.svg")
    ap.add_argument("--sim-only", action="store_true")
    a = ap.parse_args()
    a.pipecast = os.path.abspath(a.pipecast)
    a.out = a.out or tempfile.mkdtemp(prefix="sim_vs_lab.")
    os.makedirs(a.out, exist_ok=True)
    # The model's trees and segments from the profile the simulator uses.
    os.environ["PIPECAST_PROFILE"] = a.profile
    print(f"# sim vs lab: rate {a.rate}, profile {a.profile}, transport {a.transport}, "
          f"{a.runs} runs x {a.iters} iterations, out {a.out}", file=sys.stderr)
    print(f"# {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}, {os.cpu_count()} cores, "
          f"load {loadavg()}", file=sys.stderr, flush=True)
    if not a.sim_only:
        name = f"lv{os.getpid() % 100000}"
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
        for placement in a.placements.split(","):
            measure(a, placement, name)
    table(a)


if __name__ == "__main__":
    main()
