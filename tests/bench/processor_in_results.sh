#!/usr/bin/env bash
# Usage: processor_in_results.sh PRECIS_BENCH REPORT_PY
# Every result names its processor: precis-bench's markdown header and each JSON record carry
# /proc/cpuinfo's model name and family numbers; report.py names the processor above its table
# and never compares records of two processors.
set -u
bench=$1 report=$2
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail() { echo "processor_in_results: FAIL: $*"; exit 1; }
model=$(grep -m1 '^model name' /proc/cpuinfo | sed 's/^[^:]*: //')
family=$(grep -m1 '^cpu family' /proc/cpuinfo | sed 's/^[^:]*: //')
out=$("$bench" ops --no-peak --threads 1 --repeat 1 --min-time 0 --cases "softmax 16x4x128x128" --json "$dir/a.json" 2>&1) \
  || fail "precis-bench failed: $out"
grep -q "UTC, .*($model; " <<<"$out" || fail "the markdown header does not name '$model'"
python3 - "$dir/a.json" "$model" "$family" <<'PY' || fail "a JSON record does not name the processor"
import json, sys
records = json.load(open(sys.argv[1]))
assert records, "no records"
for r in records:
    assert r["processor"] == sys.argv[2], r
    assert r["cpu_family"] == int(sys.argv[3]), r
    assert r["processor_family"], r
PY
# A peer record from this processor is compared; the same case from another processor is not.
python3 - "$dir" <<'PY'
import json, sys
d = sys.argv[1]
mine = json.load(open(f"{d}/a.json"))
peer = [dict(r, impl="torch", median_ms=r["median_ms"] * 2, min_ms=r["min_ms"] * 2) for r in mine]
elsewhere = dict(cpu_family=mine[0]["cpu_family"] + 100, processor="Elsewhere CPU", processor_family="Elsewhere")
other = [dict(r, impl="torch", median_ms=1e-6, min_ms=1e-6, **elsewhere) for r in mine]
json.dump(peer + other, open(f"{d}/peer.json", "w"))
json.dump([dict(r, **elsewhere) for r in mine] + mine, open(f"{d}/two.json", "w"))
PY
text=$(python3 "$report" "$dir/a.json" "$dir/peer.json") || fail "report.py failed: $text"
echo "$text"
grep -q "^Processor: .*($model; " <<<"$text" || fail "report.py does not name the processor"
grep -q "| softmax 16x4x128x128 | f32 | 1 | .* | 0.50 | .* | ok |" <<<"$text" || fail "this processor's peer record was not compared"
grep -q "1 peer records ran on a processor no precis record ran on (.*Elsewhere CPU" <<<"$text" \
  || fail "the other processor's peer record was not left out"
text=$(python3 "$report" "$dir/two.json" "$dir/peer.json") || fail "report.py failed: $text"
echo "$text"
(( $(grep -c '^## ' <<<"$text") == 2 )) || fail "records of two processors did not give two tables"
grep -q "^## .*Elsewhere CPU" <<<"$text" || fail "no table for the second processor"
echo "processor_in_results: PASS"
