#!/usr/bin/env python3
"""Before/after: two builds of precis-bench, alternated in one run, in one table.

    python3 benchmarks/ab.py BEFORE_BENCH AFTER_BENCH [--suites models,ops] [--rounds 3]
                             [--threads 2] [--out FILE.md] [--json FILE.json] [-- BENCH ARGS...]

Why alternated: on a shared 2-core machine (MACHINE.md) load drifts over minutes, so each round
runs every suite with the "before" binary and then the "after" binary, and the next round starts
with "after" (ABBA order), so that a slow stretch hits both sides alike. Per (suite, case, dtype,
threads) the table shows the best median and the best minimum over the rounds (best-of-N), the
ratio after/before of each, and each side's own spread: (largest median - smallest median) /
smallest median over its rounds. That spread is the noise: a case is marked "slower" only when
its after/before ratio of minima exceeds 1 + max(3 %, the larger spread of the two sides).

Arguments after "--" go to both binaries (e.g. --cases, --min-time).
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile


def run(binary, suite, threads, extra, path):
    cmd = [binary, suite, "--threads", threads, "--json", path] + extra
    print("+", " ".join(cmd), file=sys.stderr, flush=True)
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    with open(path) as f:
        return json.load(f)


def collect(records_per_round):
    """{key: [record per round]} for one side."""
    out = {}
    for records in records_per_round:
        for r in records:
            key = (r["suite"], r["case"], r["dtype"], r["threads"])
            out.setdefault(key, []).append(r)
    return out


def spread(rs):
    meds = [r["median_ms"] for r in rs]
    return (max(meds) - min(meds)) / min(meds) if min(meds) > 0 else 0.0


def main():
    argv = sys.argv[1:]
    extra = []
    if "--" in argv:
        i = argv.index("--")
        argv, extra = argv[:i], argv[i + 1:]
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("before")
    p.add_argument("after")
    p.add_argument("--suites", default="models,ops")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--threads", default="2")
    p.add_argument("--out")
    p.add_argument("--json")
    a = p.parse_args(argv)

    sides = {"before": [], "after": []}
    with tempfile.TemporaryDirectory() as tmp:
        for rnd in range(a.rounds):
            order = ["before", "after"] if rnd % 2 == 0 else ["after", "before"]
            for suite in a.suites.split(","):
                for side in order:
                    path = os.path.join(tmp, f"{side}-{suite}-{rnd}.json")
                    recs = run(getattr(a, side), suite, a.threads, extra, path)
                    for r in recs:
                        r["impl"] = side
                        r["round"] = rnd
                    sides[side].append(recs)

    before, after = collect(sides["before"]), collect(sides["after"])
    lines = [
        f"Before: `{a.before}`  ",
        f"After: `{a.after}`  ",
        f"{a.rounds} rounds, ABBA order, threads {a.threads}; best of {a.rounds} per side; "
        "spread = (max - min) / min of the side's medians over the rounds.",
        "",
        "| suite | case | dtype | before median ms | after median ms | after/before (median) "
        "| before min ms | after min ms | after/before (min) | spread before | spread after | verdict |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    slower = 0
    for key, brs in before.items():
        ars = after.get(key)
        if not ars:
            continue
        bm = min(r["median_ms"] for r in brs)
        am = min(r["median_ms"] for r in ars)
        bn = min(r["min_ms"] for r in brs)
        an = min(r["min_ms"] for r in ars)
        sb, sa = spread(brs), spread(ars)
        ratio_min = an / bn if bn > 0 else float("nan")
        noise = max(0.03, sb, sa)
        verdict = "slower" if ratio_min > 1 + noise else "within noise" if ratio_min >= 1 - noise else "faster"
        slower += verdict == "slower"
        suite, case, dtype, _ = key
        lines.append(
            f"| {suite} | {case} | {dtype} | {bm:.3f} | {am:.3f} | {am / bm:.3f} | {bn:.3f} | {an:.3f} "
            f"| {ratio_min:.3f} | {sb * 100:.1f} % | {sa * 100:.1f} % | {verdict} |")
    missing = sorted(set(before) ^ set(after))
    if missing:
        lines += ["", "Cases on one side only: " + ", ".join(f"{k[1]} {k[2]}" for k in missing)]
    lines += ["", f"Cases marked slower: {slower}"]
    text = "\n".join(lines) + "\n"
    if a.out:
        with open(a.out, "w") as f:
            f.write(text)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(sides["before"] + sides["after"], f, indent=1)
    print(text)


if __name__ == "__main__":
    main()
