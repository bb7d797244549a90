# Interleaved (ABBA) before/after CPU-time runs of membound-2026-12-02b-harness.cpp, built as
# ./harness_before and ./harness_after against the two libprecis.a; usage: MODES ROUNDS THREADS OUT.json
import json, subprocess, sys, statistics
modes = sys.argv[1].split(",")
rounds = int(sys.argv[2])
threads = sys.argv[3] if len(sys.argv) > 3 else "1"
res = {}
def run(side, mode):
    out = subprocess.run(["nice", "-n", "19", f"./harness_{side}", mode, threads, "8"], capture_output=True, text=True).stdout
    f = out.split()
    return float(f[f.index("cpu") + 1]), float(f[f.index("wall") + 1])
for mode in modes:
    r = {"before": [], "after": []}
    for k in range(rounds):
        order = ["before", "after"] if k % 2 == 0 else ["after", "before"]
        for side in order:
            r[side].append(run(side, mode))
    b = [c for c, _ in r["before"]]; a = [c for c, _ in r["after"]]
    ratios = [x / y for x, y in zip(a, b)]
    res[mode] = {"threads": int(threads), "before_cpu_ms": b, "after_cpu_ms": a,
                 "before_wall_ms": [w for _, w in r["before"]], "after_wall_ms": [w for _, w in r["after"]],
                 "ratio_min_cpu": min(a) / min(b), "ratio_per_round_min": min(ratios), "ratio_per_round_max": max(ratios)}
    print(mode, "before", [round(x, 2) for x in b], "after", [round(x, 2) for x in a],
          "min-ratio %.3f, per-round %.3f..%.3f" % (min(a) / min(b), min(ratios), max(ratios)), flush=True)
json.dump(res, open(sys.argv[4] if len(sys.argv) > 4 else "abcpu.json", "w"), indent=1)
