#!/usr/bin/env python3
"""Puts precis-bench records and a peer's records side by side in one markdown table.

    python3 benchmarks/report.py PRECIS.json PEER.json [--suite ops] [--by median|min] [--out FILE]

Both files hold JSON arrays of records {"suite", "case", "impl", "dtype", "threads", "median_ms",
"min_ms", "gflops", ...} (precis-bench --json, benchmarks/peers/*.py --json). Rows pair records by
(case, dtype, threads), in the precis file's order. Columns: both medians and minima, and the
ratios precis/peer of each (below 1 = precis faster). The verdict uses the ratio chosen by --by
(median by default; on a loaded 2-vCPU machine `--by min` is the steadier figure, MACHINE.md):
  - "resnet18 conv total": ok when precis <= peer (the issue's target for the conv sum);
  - every other case: "SLOWER" when precis/peer > 1.25, else ok (a single conv shape over 1.25x
    is marked but not counted: the conv target is the total).
Only the standard library is needed.
"""
import argparse
import json
import sys

LIMIT = 1.25
CONV_TOTAL = "resnet18 conv total"


def load(path, suite):
    with open(path) as f:
        return [r for r in json.load(f) if suite is None or r.get("suite") == suite]


def fmt(v, digits=3):
    return f"{v:.{digits}f}" if v is not None else "—"


def ratio(a, b):
    return a / b if a is not None and b not in (None, 0) else None


def report(precis, peer, by):
    peer_impls = sorted({r["impl"] for r in peer})
    peer_name = peer_impls[0] if len(peer_impls) == 1 else "peer"
    index = {(r["case"], r["dtype"], r["threads"]): r for r in peer}
    lines = [f"| case | threads | precis median ms | {peer_name} median ms | precis/{peer_name} (median) | "
             f"precis min ms | {peer_name} min ms | precis/{peer_name} (min) | verdict (by {by}) |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---|"]
    failures, seen = [], set()
    mine = [r for r in precis if r["impl"] == "precis"]
    for r in mine:
        key = (r["case"], r["dtype"], r["threads"])
        seen.add(key)
        p = index.get(key)
        rm = ratio(r["median_ms"], p and p["median_ms"])
        rn = ratio(r["min_ms"], p and p["min_ms"])
        judged = rm if by == "median" else rn
        if judged is None:
            verdict = "no peer"
        elif r["case"] == CONV_TOTAL:
            verdict = "ok (<= peer)" if judged <= 1.0 else "OVER PEER"
        elif judged <= LIMIT:
            verdict = "ok"
        elif r["case"].startswith("conv2d "):
            verdict = f">{LIMIT}x (the conv target is the total)"
        else:
            verdict = f"SLOWER (>{LIMIT}x)"
        if verdict.startswith(("SLOWER", "OVER")):
            failures.append(f"{r['case']} ({r['threads']} threads): {judged:.2f}x")
        name = f"**{r['case']}**" if r["case"] == CONV_TOTAL else r["case"]
        lines.append(f"| {name} | {r['threads']} | {fmt(r['median_ms'])} | {fmt(p and p['median_ms'])} | "
                     f"{fmt(rm, 2)} | {fmt(r['min_ms'])} | {fmt(p and p['min_ms'])} | {fmt(rn, 2)} | {verdict} |")
    for key, p in index.items():
        if key not in seen:
            lines.append(f"| {p['case']} | {p['threads']} | — | {fmt(p['median_ms'])} | — | — | {fmt(p['min_ms'])} | — | "
                         "no precis record |")
    summary = ("All cases within target." if not failures else
               "Over target: " + "; ".join(failures) + ".")
    return "\n".join(lines) + "\n\n" + summary + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("precis")
    ap.add_argument("peer")
    ap.add_argument("--suite", default="ops", help="suite to report (default ops; 'all' for every record)")
    ap.add_argument("--by", choices=["median", "min"], default="median")
    ap.add_argument("--out", help="write the markdown here instead of stdout")
    args = ap.parse_args()
    suite = None if args.suite == "all" else args.suite
    text = report(load(args.precis, suite), load(args.peer, suite), args.by)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)
    else:
        sys.stdout.write(text)


if __name__ == "__main__":
    main()
