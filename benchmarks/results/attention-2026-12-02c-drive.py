# Driver of benchmarks/results/attention-2026-12-02c.md: for 1 and 2 threads and the additive and
# bool masks, ROUNDS rounds of the harness in fused and composed mode (order swapped each round),
# then the matmuls-only mode; prints the best CPU times and ratios and writes them to OUT (JSON).
# usage: python3 attention-2026-12-02c-drive.py HARNESS ROUNDS REPS OUT
import json, subprocess, statistics, sys, os
H = sys.argv[1]; rounds = int(sys.argv[2]); reps = sys.argv[3]; out = sys.argv[4]
env = dict(os.environ, OMP_WAIT_POLICY="passive")
res = []
for threads in (1, 2):
    for mask in ("additive", "bool"):
        runs = {"fused": [], "composed": []}
        for r in range(rounds):
            order = ("fused", "composed") if r % 2 == 0 else ("composed", "fused")
            for m in order:
                line = subprocess.run(["nice", "-n", "19", H, m, mask, str(threads), reps], env=env,
                                      capture_output=True, text=True, check=True).stdout.split()
                d = dict(kv.split("=") for kv in line[2:])
                runs[m].append({k: float(v) for k, v in d.items()})
        f = [x["cpu_min_ms"] for x in runs["fused"]]; c = [x["cpu_min_ms"] for x in runs["composed"]]
        pair = [a / b for a, b in zip(f, c)]
        row = {"threads": threads, "mask": mask, "fused_cpu_min_ms": f, "composed_cpu_min_ms": c,
               "fused_best": min(f), "composed_best": min(c), "ratio_best": min(f) / min(c),
               "ratio_pairs_median": statistics.median(pair), "ratio_pairs_range": [min(pair), max(pair)],
               "checksums_equal": all(a["checksum"] == b["checksum"] for a, b in zip(runs["fused"], runs["composed"])),
               "runs": runs}
        print(threads, mask, "fused best %.3f composed best %.3f ratio %.3f pairs median %.3f range %.3f-%.3f eq %s" % (
            row["fused_best"], row["composed_best"], row["ratio_best"], row["ratio_pairs_median"], *row["ratio_pairs_range"], row["checksums_equal"]), flush=True)
        res.append(row)
mm = {}
for threads in (1, 2):
    c = []
    for r in range(rounds):
        line = subprocess.run(["nice", "-n", "19", H, "matmuls", "none", str(threads), reps], env=env,
                              capture_output=True, text=True, check=True).stdout.split()
        c.append(float(dict(kv.split("=") for kv in line[2:])["cpu_min_ms"]))
    mm[threads] = c
    print(threads, "matmuls only best %.3f" % min(c), flush=True)
json.dump({"sdpa": res, "matmuls_cpu_min_ms": mm}, open(out, "w"), indent=1)
