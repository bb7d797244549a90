#!/usr/bin/env python3
"""Puts precis-bench records and a peer's records side by side in one markdown table.

    python3 benchmarks/report.py PRECIS.json[,MORE.json...] PEER.json[,MORE.json...]
                                 [--suite ops] [--by median|min] [--out FILE] [--merged FILE]

Both files hold JSON arrays of records {"suite", "case", "impl", "dtype", "threads", "median_ms",
"min_ms", "gflops", ...} (precis-bench --json, benchmarks/peers/*.py --json). Rows pair records by
(case, dtype, threads), in the precis file's order; GPU records (a "device" other than cpu) by
(case, dtype), the host's thread count being no part of their time. A peer record with a "variant"
(torch_models.py --device cuda: f32 with and without TF32, NCHW or channels_last, ...) gets a row
of its own, named "case [variant]", beside the precis record of the same math: when the precis
record has a variant too (precis-bench models --device cuda), the one whose variant is the same
with the layout ("-nchw", "-cl") and "compile-" left out (precis f32-tf32-nchw beside PyTorch's
f32-tf32-cl; f16-amp-nchw beside f16-amp-nchw, f16-amp-cl and compile-f16-amp-cl), so each precis
variant is ranked against the best PyTorch recipe of its math; without one, beside every variant
of its dtype. Peer records no precis record pairs with are listed as "no precis record".
Columns: both medians and minima, and the ratios precis/peer of each (below 1 = precis faster). The verdict uses the ratio chosen by --by
(median by default; on a loaded 2-vCPU machine `--by min` is the steadier figure, MACHINE.md):
  - "resnet18 conv total": ok when precis <= peer (the issue's target for the conv sum);
  - every other case: "SLOWER" when precis/peer > 1.25, else ok (a single conv shape over 1.25x
    is marked but not counted: the conv target is the total);
  - the models suite (whole training steps): ok when precis <= peer in step time and in peak
    memory. Its records carry peak_rss_mb (VmHWM of the process, the largest over the runs) and
    base_rss_mb; the peer's memory column also shows its peak net of its base (PyTorch's
    interpreter and import). GPU steps (precis-bench models --device cuda, torch_models.py
    --device cuda) carry peak_device_mb instead, the device allocator's peak over the case (warm-up,
    cuDNN's algorithm search and workspaces included; the largest over the runs), and
    peak_device_mb_steps, the same over the timed steps alone: memory is judged by the first, and
    both are shown ("peak (steps)"). CPU and GPU steps go to separate reports.
Share of peak: when the precis records carry "peak_gflops" (precis-bench measures the machine's
GEMM peak at start), the table adds the case's GFLOP (precis's "flops": counted by the ops, the
same work for both sides), the peak, and each side's share of it at the --by time
(flops / time / peak). Over several runs the largest measured peak is used (the conservative share).
Several runs per side (comma-separated files, e.g. precis and peer runs alternated on a loaded
machine) are combined as best-of-N: per (case, dtype, threads, variant) the lowest median and the
lowest minimum over the runs. --merged writes the combined records of both sides as one JSON array.
A file may hold both sides (a --merged file): the precis side reads its "precis" records, the peer
side the others.

Processors: every record names the processor it ran on (precis-bench and the peers write the model
name, vendor, family and model numbers and the kernel-relevant flags; precis-bench also the family,
"AMD Zen 5"). The report names it above the table; records of different processors are never
combined or compared: precis records from several processors give one table per processor, and
peer records from a processor no precis record ran on are left out (and counted below the table).
Records from files older than this (no processor) pair with anything, as before.

Charts: --svg FILE draws the report as an SVG (benchmarks/chart.py): precis vs the peer per case
(the --by figure) and, for the models suite, the AMP speed-up per model (f32 step time over bf16 /
f16) of precis beside the peer's. With --out, the chart goes beside the markdown (same name, .svg)
and the markdown links it. Charts need matplotlib, kept out of the build and the tests: install it
in a virtual environment (benchmarks/README.md, "Charts"); without it the table is still written
and a note says why there is no chart. The table itself needs only the standard library.
"""
import argparse
import json
import sys

LIMIT = 1.25
CONV_TOTAL = "resnet18 conv total"


def load(paths, suite):
    """Records of the comma-separated files; repeated (case, dtype, threads, impl, variant) keep the
    best median and the best minimum over the files (best-of-N)."""
    best, order = {}, []
    for path in paths.split(","):
        with open(path) as f:
            for r in json.load(f):
                if suite is not None and r.get("suite") != suite:
                    continue
                key = (r["case"], r["dtype"], r["threads"], r["impl"], r.get("variant"), cpu_of(r))
                if key not in best:
                    best[key] = dict(r, runs=1)
                    order.append(key)
                    continue
                b = best[key]
                b["runs"] += 1
                if r["median_ms"] < b["median_ms"]:
                    b.update(median_ms=r["median_ms"], gflops=r["gflops"])
                b["min_ms"] = min(b["min_ms"], r["min_ms"])
                if "peak_gflops" in r:
                    b["peak_gflops"] = max(b.get("peak_gflops", 0), r["peak_gflops"])
                if r.get("flops") and not b.get("flops"):
                    b["flops"] = r["flops"]
                if "peak_rss_mb" in r:
                    b["peak_rss_mb"] = max(b.get("peak_rss_mb", 0), r["peak_rss_mb"])
                    b["base_rss_mb"] = max(b.get("base_rss_mb", 0), r.get("base_rss_mb", 0))
                for field in ("peak_device_mb", "peak_device_mb_steps"):
                    if field in r:
                        b[field] = max(b.get(field, 0), r[field])
    # The conv total of the best runs is the sum of the best conv cases (not the best total).
    for key in order:
        case = key[0]
        if case != CONV_TOTAL or best[key]["runs"] == 1:
            continue
        convs = [best[k] for k in order if k[0].startswith("conv2d ") and k[1:] == key[1:]]
        flops = sum(r["gflops"] * r["median_ms"] * 1e6 for r in convs)
        median = sum(r["median_ms"] for r in convs)
        best[key].update(median_ms=round(median, 4), min_ms=round(sum(r["min_ms"] for r in convs), 4),
                         gflops=round(flops / (median * 1e6), 2) if median else 0.0, flops=round(flops))
    return [best[k] for k in order]


def cpu_of(r):
    """The processor a record ran on (precis-bench and the peers write it; None in older files):
    best-of-N combines and rows compare records of one processor only."""
    if "cpu_vendor" not in r:
        return None
    return (r["cpu_vendor"], r["cpu_family"], r["cpu_model"], r["processor"])


def processor_heading(records):
    """'AMD Zen 5 (AMD EPYC; avx2 avx512f avx512_bf16)' from a group's records."""
    r = records[0]
    if cpu_of(r) is None:
        return "processor not recorded (files from before precis-bench named it)"
    family = next((x["processor_family"] for x in records if x.get("processor_family")), None)
    family = family or f"{r['cpu_vendor']} family {r['cpu_family']} model {r['cpu_model']}"
    return f"{family} ({r['processor']}; {r.get('cpu_flags') or 'none of avx2 avx512f avx512_bf16 amx'})"


def by_processor(precis, peer):
    """[(heading, precis records, peer records)], one per processor the precis records ran on.
    A peer record that names no processor joins every group (an older file: assumed the same
    machine); one that names another processor joins none."""
    groups = {}
    for r in precis:
        groups.setdefault(cpu_of(r), []).append(r)
    return [(processor_heading(rs), rs, [p for p in peer if cpu_of(p) in (cpu, None)]) for cpu, rs in groups.items()]


def on_gpu(r):
    """Whether a record ran on a GPU (a "device" other than cpu)."""
    return r.get("device", "cpu") != "cpu"


def memory_kind(records):
    """Which memory the whole-step records of a report carry: "rss" (CPU steps: peak_rss_mb),
    "device" (GPU steps: peak_device_mb) or None (op cases); ValueError for both at once."""
    kinds = {"device" if on_gpu(r) else "rss" for r in records if "peak_rss_mb" in r or "peak_device_mb" in r}
    if len(kinds) > 1:
        raise ValueError("CPU and GPU training steps in one report: their memory is not the same measure; "
                         "report them separately (precis-bench models, and precis-bench models --device cuda)")
    return kinds.pop() if kinds else None


def device_memory(r):
    """A GPU record's peak device memory as a cell: "peak (steps)" in MiB, "—" when not measured."""
    if r is None or "peak_device_mb" not in r:
        return "—"
    steps = r.get("peak_device_mb_steps")
    return f"{r['peak_device_mb']:.0f}" + (f" ({steps:.0f})" if steps is not None else "")


def pair_key(r):
    """What pairs a precis record with the peer's: (case, dtype, threads); GPU records leave the
    threads out, as the host's thread count does not make their time."""
    return (r["case"], r["dtype"], None if on_gpu(r) else r["threads"])


def math_of(variant):
    """A variant's math without its layout, compilation or graph capture: "f32-tf32-cl" -> "f32-tf32",
    "compile-f16-amp-cl" -> "f16-amp", "graphs-bf16-amp-cl" -> "bf16-amp", "f32-nchw" -> "f32"
    (PyTorch's defaults)."""
    v = variant
    for prefix in ("compile-", "graphs-"):
        if v.startswith(prefix):
            v = v[len(prefix):]
    for suffix in ("-nchw", "-cl"):
        if v.endswith(suffix):
            v = v[: -len(suffix)]
    return v


def peers_of(r, candidates):
    """The peer records of r's key that r is compared with: those of the same math when both
    sides name variants, else all of them."""
    if not r.get("variant"):
        return candidates
    return [p for p in candidates if not p.get("variant") or math_of(p["variant"]) == math_of(r["variant"])]


def peer_index(peer):
    """{pair_key: [peer records]}: one record per key, or one per variant when the peer ran several
    (torch_models.py --device cuda: f32 with and without TF32, NCHW and channels_last, ...)."""
    index = {}
    for r in peer:
        index.setdefault(pair_key(r), []).append(r)
    return index


def label(r, mine=None):
    """The case as a row names it: with the variants in brackets, precis's first when it has one."""
    variants = [v for v in ((mine or {}).get("variant"), r.get("variant")) if v]
    return f"{r['case']} [{' vs '.join(variants)}]" if variants else r["case"]


def fmt(v, digits=3):
    return f"{v:.{digits}f}" if v is not None else "—"


def ratio(a, b):
    return a / b if a is not None and b not in (None, 0) else None


def flops_of(r):
    """FLOPs of one repetition: the record's count, else from its GFLOP/s and median (older files)."""
    if r.get("flops"):
        return r["flops"]
    return r.get("gflops", 0) * r["median_ms"] * 1e6


def share(flops, ms, peak):
    """Share of the peak, in percent, of `flops` done in `ms` milliseconds."""
    if not flops or not ms or not peak:
        return None
    return 100.0 * flops / (ms * 1e6) / peak


def report(precis, peer, by):
    peer_impls = sorted({r["impl"] for r in peer})
    peer_name = peer_impls[0] if len(peer_impls) == 1 else "peer"
    index = peer_index(peer)
    # Whole-model records (the models suite) carry memory, and their target is the peer itself.
    kind = memory_kind(precis)
    models = kind is not None
    mem_head = {"rss": f" precis peak RSS MB | {peer_name} peak RSS MB (net of base) |",
                "device": f" precis peak device MiB (steps) | {peer_name} peak device MiB (steps) |",
                None: ""}[kind]
    peaks = any(r.get("peak_gflops") for r in precis)
    peak_head = f" GFLOP | peak GFLOP/s | precis % of peak ({by}) | {peer_name} % of peak ({by}) |" if peaks else ""
    lines = [f"| case | dtype | threads | precis median ms | {peer_name} median ms | precis/{peer_name} (median) | "
             f"precis min ms | {peer_name} min ms | precis/{peer_name} (min) |{mem_head}{peak_head} verdict (by {by}) |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|" + ("---:|---:|" if models else "") +
             ("---:|---:|---:|---:|" if peaks else "") + "---|"]
    failures, seen = [], set()
    mine = [r for r in precis if r["impl"] == "precis"]
    # One row per precis record and peer record it is compared with: several when the peer ran
    # variants of its math.
    rows = [(r, p) for r in mine for p in peers_of(r, index.get(pair_key(r), [])) or [None]]
    for r, p in rows:
        if p is not None:
            seen.add(id(p))
        rm = ratio(r["median_ms"], p and p["median_ms"])
        rn = ratio(r["min_ms"], p and p["min_ms"])
        judged = rm if by == "median" else rn
        mem = ""
        if kind == "rss":
            pm, mine_mem = (p.get("peak_rss_mb") if p else None), r.get("peak_rss_mb", 0)
            net = f" ({pm - p.get('base_rss_mb', 0):.0f})" if pm is not None else ""
            mem = f" {mine_mem:.0f} | {fmt(pm, 0)}{net} |"
        elif kind == "device":
            pm, mine_mem = (p.get("peak_device_mb") if p else None), r.get("peak_device_mb", 0)
            mem = f" {device_memory(r)} | {device_memory(p)} |"
        if peaks:
            field = "median_ms" if by == "median" else "min_ms"
            flops, peak = flops_of(r), r.get("peak_gflops")
            counted = flops > 0 and peak
            mem += (f" {fmt(flops * 1e-9 if flops else None, 2)} | {fmt(peak if counted else None, 1)} | "
                    f"{fmt(share(flops, r[field], peak) if counted else None, 1)} | "
                    f"{fmt(share(flops, p and p[field], peak) if counted else None, 1)} |")
        over = ""
        if judged is None:
            verdict = "no peer"
        elif models:
            over_mem = pm is not None and mine_mem > pm
            verdict = "OVER PEER" if judged > 1.0 or over_mem else "ok (<= peer)"
            unit = "MiB" if kind == "device" else "MB"
            over = f", memory {mine_mem:.0f} > {pm:.0f} {unit}" if over_mem else ""
        elif r["case"] == CONV_TOTAL:
            verdict = "ok (<= peer)" if judged <= 1.0 else "OVER PEER"
        elif judged <= LIMIT:
            verdict = "ok"
        elif r["case"].startswith("conv2d "):
            verdict = f">{LIMIT}x (the conv target is the total)"
        else:
            verdict = f"SLOWER (>{LIMIT}x)"
        name = label(p, r) if p else label(r)
        if verdict.startswith(("SLOWER", "OVER")):
            threads = f" ({r['threads']} threads)" if pair_key(r)[2] is not None else ""
            failures.append(f"{name}{threads}: {judged:.2f}x{over}")
        name = f"**{name}**" if r["case"] == CONV_TOTAL else name
        lines.append(f"| {name} | {r['dtype']} | {r['threads']} | {fmt(r['median_ms'])} | {fmt(p and p['median_ms'])} | "
                     f"{fmt(rm, 2)} | {fmt(r['min_ms'])} | {fmt(p and p['min_ms'])} | {fmt(rn, 2)} |{mem} {verdict} |")
    for ps in index.values():
        for p in ps:
            if id(p) in seen:
                continue
            lines.append(f"| {label(p)} | {p['dtype']} | {p['threads']} | — | {fmt(p['median_ms'])} | — | — | "
                         f"{fmt(p['min_ms'])} | — |{' — | — |' if models else ''}{' — | — | — | — |' if peaks else ''}"
                         f" no precis record |")
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
    ap.add_argument("--merged", help="write the combined records of both sides here (JSON)")
    ap.add_argument("--svg", help="write the chart here (needs matplotlib; default with --out: beside it)")
    ap.add_argument("--title", help="the chart's title (default: the suite and the peer)")
    args = ap.parse_args()
    suite = None if args.suite == "all" else args.suite
    precis = [r for r in load(args.precis, suite) if r["impl"] == "precis"]
    peer = [r for r in load(args.peer, suite) if r["impl"] != "precis"]
    try:
        memory_kind(precis)
    except ValueError as e:
        sys.exit(f"report.py: {e}")
    groups = by_processor(precis, peer)
    if len(groups) == 1:
        heading, mine, theirs = groups[0]
        text = f"Processor: {heading}.\n\n" + report(mine, theirs, args.by)
    else:
        # Times from different processors are not comparable: one table per processor.
        text = "".join(f"## {heading}\n\n" + report(mine, theirs, args.by) + "\n" for heading, mine, theirs in groups)
    foreign = [p for p in peer if cpu_of(p) is not None and all(cpu_of(p) != cpu_of(rs[0]) for _, rs, _ in groups)]
    if foreign:
        text += (f"\n{len(foreign)} peer records ran on a processor no precis record ran on "
                 f"({processor_heading(foreign)}) and are not compared.\n")
    svg = args.svg or (args.out[:-3] + ".svg" if args.out and args.out.endswith(".md") else None)
    if svg:
        try:
            import chart  # benchmarks/chart.py: imports matplotlib
        except ImportError as e:
            if args.svg:
                sys.exit(f"report.py: --svg needs matplotlib ({e}); see benchmarks/README.md, 'Charts'")
            print(f"report.py: no chart beside {args.out}: {e} (benchmarks/README.md, 'Charts')", file=sys.stderr)
        else:
            chart.draw(precis, peer, args.by, svg, args.title)
            if args.out:
                import os
                text += f"\n![precis vs {peer[0]['impl'] if peer else 'peer'}]({os.path.basename(svg)})\n"
    if args.merged:
        with open(args.merged, "w") as f:
            json.dump(precis + peer, f, indent=1)
            f.write("\n")
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)
    else:
        sys.stdout.write(text)


if __name__ == "__main__":
    main()
