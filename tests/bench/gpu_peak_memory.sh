#!/usr/bin/env bash
# Usage: gpu_peak_memory.sh PRECIS_BENCH REPORT_PY FAKE_CUDA_BACKEND
# A GPU training step's record names its peak device memory twice, as torch_models.py's do: over
# the case (warm-up included: cuDNN's algorithm search and workspaces on a GPU) and over the timed
# steps alone; report.py sets both beside the peer's and judges GPU steps as CPU ones: ok only when
# precis is at or under the peer in step time and in peak memory. Runs one BERT-mini step case on
# the fake CUDA device (tests/support/fake_cuda: the real device allocator over host memory).
set -u
bench=$1 report=$2 fake=$3
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail() { echo "gpu_peak_memory: FAIL: $*"; exit 1; }
out=$(PRECIS_CUDA_BACKEND=$fake "$bench" models --device cuda --threads 2 --repeat 1 --min-time 0 \
        --cases "bert_mini b64x128 bf16-amp" --json "$dir/precis.json" 2>&1) || fail "precis-bench failed: $out"
echo "$out" | tail -n 3
python3 - "$dir" <<'PY' || fail "the record's peaks are missing or inconsistent"
import json, sys
d = sys.argv[1]
recs = json.load(open(f"{d}/precis.json"))
assert len(recs) == 1, recs
r = recs[0]
assert r["device"] == "cuda:0" and r["variant"] == "bf16-amp", r
# BERT-mini's parameters, gradients and momentum alone are ~128 MiB in f32.
assert 128 < r["peak_device_mb_steps"] <= r["peak_device_mb"], r
faster_smaller = dict(r, impl="torch", median_ms=r["median_ms"] / 2, min_ms=r["min_ms"] / 2,
                      peak_device_mb=r["peak_device_mb"] / 2, peak_device_mb_steps=r["peak_device_mb_steps"] / 2)
slower_bigger = dict(r, impl="torch", variant="graphs-bf16-amp", median_ms=r["median_ms"] * 2,
                     min_ms=r["min_ms"] * 2, peak_device_mb=r["peak_device_mb"] * 2,
                     peak_device_mb_steps=r["peak_device_mb_steps"] * 2)
json.dump([faster_smaller, slower_bigger], open(f"{d}/peer.json", "w"))
json.dump([dict(r, impl="torch", median_ms=r["median_ms"] * 2, min_ms=r["min_ms"] * 2,
                peak_device_mb=r["peak_device_mb"] * 0.9)], open(f"{d}/smaller.json", "w"))
cpu = {k: v for k, v in r.items() if k not in ("device", "peak_device_mb", "peak_device_mb_steps")}
json.dump([r, dict(cpu, case="bert_mini b16x128", peak_rss_mb=500.0, base_rss_mb=100.0)], open(f"{d}/mixed.json", "w"))
PY
text=$(python3 "$report" "$dir/precis.json" "$dir/peer.json" --suite models) || fail "report.py failed: $text"
echo "$text"
peak=$(python3 -c "import json,sys; r=json.load(open(sys.argv[1]))[0]; print(f\"{r['peak_device_mb']:.0f} ({r['peak_device_mb_steps']:.0f})\")" "$dir/precis.json")
grep -q "precis peak device MiB (steps) | torch peak device MiB (steps) |" <<<"$text" || fail "no device memory columns"
grep -q "^| bert_mini b64x128 \[bf16-amp vs bf16-amp\] | .* | $peak | .* | OVER PEER |" <<<"$text" \
  || fail "a peer faster and smaller is not marked OVER PEER, or precis's peaks are not shown"
grep -q "^| bert_mini b64x128 \[bf16-amp vs graphs-bf16-amp\] | .* | ok (<= peer) |" <<<"$text" \
  || fail "a peer slower and bigger is not ok"
# Faster than the peer but over its memory: over target, and the summary says it is the memory.
text=$(python3 "$report" "$dir/precis.json" "$dir/smaller.json" --suite models) || fail "report.py failed: $text"
echo "$text"
grep -q "| OVER PEER |" <<<"$text" || fail "more memory than the peer is not OVER PEER"
grep -q "^Over target: .*: 0.50x, memory [0-9]* > [0-9]* MiB\.$" <<<"$text" || fail "the summary does not name the memory"
# CPU and GPU steps measure different memory: one report refuses both.
text=$(python3 "$report" "$dir/mixed.json" "$dir/peer.json" --suite models 2>&1) && fail "a mixed report was written: $text"
grep -q "CPU and GPU training steps in one report" <<<"$text" || fail "the refusal does not say why: $text"
echo "gpu_peak_memory: PASS"
