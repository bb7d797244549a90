"""SVG charts of benchmark reports, for benchmarks/report.py (optional tooling: needs matplotlib,
which the build and the tests never use).

draw() makes one figure:
  - per case (case, dtype, threads; one per peer variant where the peer ran several, as in
    report.py's table): precis beside the peer, horizontal bars of the --by figure (median or
    min ms) on a log axis, labelled with precis/peer;
  - for the models suite (records with peak_rss_mb): the AMP speed-up per model, f32 step time over
    bf16 (and f16 when measured), precis beside the peer. That is the figure mixed-precision users
    quote (e.g. "ResNet-50 1.62x" for PyTorch AMP on a GPU); here it is measured on whatever
    machine ran the suite.
"""
import math

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from report import label, pair_key, peer_index, peers_of  # noqa: E402

PRECIS_COLOR, PEER_COLOR = "#1f77b4", "#ff7f0e"


def _value(r, by):
    return r["median_ms" if by == "median" else "min_ms"]


def _speedups(records, by):
    """{model case: {dtype: f32 time / dtype time}} for the low-precision dtypes measured; where a
    dtype ran in several variants (TF32 or not, layouts), its fastest."""
    by_case = {}
    for r in records:
        t = by_case.setdefault(r["case"], {})
        t[r["dtype"]] = min(t.get(r["dtype"], float("inf")), _value(r, by))
    out = {}
    for case, t in by_case.items():
        if "f32" not in t:
            continue
        s = {d: t["f32"] / t[d] for d in ("bf16", "f16") if d in t and t[d] > 0}
        if s:
            out[case] = s
    return out


def draw(precis, peer, by, path, title=None):
    peer_name = sorted({r["impl"] for r in peer})[0] if peer else "peer"
    # The rows of report.py's table: one per peer variant of the record's math where the peer ran several.
    index = peer_index(peer)
    rows = [(r, p) for r in precis for p in peers_of(r, index.get(pair_key(r), [])) or [None]]
    models = any("peak_rss_mb" in r for r in precis)
    suite = precis[0]["suite"] if precis else "?"

    amp = {}
    if models:
        mine, theirs = _speedups(precis, by), _speedups(peer, by)
        amp = {case: (mine[case], theirs.get(case, {})) for case in mine}

    ncols = 2 if amp else 1
    height = max(3.0, 0.42 * len(rows) + 1.6)
    fig, axes = plt.subplots(1, ncols, figsize=(7.5 * ncols, height), squeeze=False)
    ax = axes[0][0]
    labels = [f"{label(p, r) if p else label(r)} {r['dtype']} {r['threads']}t" for r, p in rows]
    y = list(range(len(rows)))
    h = 0.38
    mine_v = [_value(r, by) for r, _ in rows]
    peer_v = [_value(p, by) if p else 0 for _, p in rows]
    ax.barh([i - h / 2 for i in y], mine_v, h, color=PRECIS_COLOR, label="precis")
    ax.barh([i + h / 2 for i in y], peer_v, h, color=PEER_COLOR, label=peer_name)
    for i, (m, p) in enumerate(zip(mine_v, peer_v)):
        if p:
            ax.text(max(m, p) * 1.08, i, f"{m / p:.2f}x", va="center", fontsize=8)
    ax.set_yticks(y)
    ax.set_yticklabels(labels, fontsize=8)
    ax.invert_yaxis()
    ax.set_xscale("log")
    ax.set_xlabel(f"{by} ms per {'training step' if models else 'call'} (log scale; label: precis/{peer_name})")
    # Log-scale bars start at a power of ten below every value, so their lengths compare fairly.
    smallest = min(v for v in mine_v + peer_v if v > 0)
    ax.set_xlim(left=10 ** math.floor(math.log10(smallest * 0.9)), right=max(mine_v + peer_v) * 2.5)
    ax.legend(loc="lower right", fontsize=8)
    ax.set_title(title or f"{suite}: precis vs {peer_name} ({by} ms, lower is faster)", fontsize=10)
    ax.grid(axis="x", which="both", alpha=0.25)

    if amp:
        ax = axes[0][1]
        bars = []  # (label, precis speed-up, peer speed-up)
        for case, (m, p) in amp.items():
            for dtype in ("bf16", "f16"):
                if dtype in m:
                    bars.append((f"{case}\n{dtype} over f32", m[dtype], p.get(dtype)))
        x = list(range(len(bars)))
        w = 0.38
        ax.bar([i - w / 2 for i in x], [b[1] for b in bars], w, color=PRECIS_COLOR, label="precis")
        ax.bar([i + w / 2 for i in x], [b[2] or 0 for b in bars], w, color=PEER_COLOR, label=peer_name)
        for i, (_, m, p) in enumerate(bars):
            ax.text(i - w / 2, m + 0.02, f"{m:.2f}x", ha="center", fontsize=8)
            if p:
                ax.text(i + w / 2, p + 0.02, f"{p:.2f}x", ha="center", fontsize=8)
        ax.axhline(1.0, color="gray", linewidth=0.8, linestyle="--")
        ax.set_xticks(x)
        ax.set_xticklabels([b[0] for b in bars], fontsize=8)
        ax.set_ylabel(f"f32 step time / bf16 or f16 step time ({by})")
        ax.set_ylim(0, max([b[1] for b in bars] + [b[2] or 0 for b in bars]) * 1.2)
        ax.legend(fontsize=8)
        ax.set_title("AMP speed-up per model (higher is better)", fontsize=10)
        ax.grid(axis="y", alpha=0.25)

    fig.tight_layout()
    # A fixed hash salt and no date keep the SVG the same for the same records.
    matplotlib.rcParams["svg.hashsalt"] = "precis"
    fig.savefig(path, format="svg", metadata={"Date": None})
    plt.close(fig)
