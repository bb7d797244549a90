#!/usr/bin/env bash
# precis-train --tensorboard, checked with TensorBoard itself:
#
#   scripts/check-tensorboard.sh [BUILD_DIR] [OUT_DIR]      (defaults: build, BUILD_DIR/tensorboard-check)
#
# 1. trains a small f16 ResNet-20 on Fashion-MNIST with --tensorboard and --metrics, interrupted
#    after some steps and resumed from an earlier checkpoint (so steps are logged twice and
#    TensorBoard must keep them once);
# 2. installs TensorBoard from PyPI into a throw-away virtual environment and reads the run with
#    its event reader (EventAccumulator): scripts/check_tensorboard.py checks every tag and value
#    against the CSV and the JSON line;
# 3. starts the TensorBoard server on 127.0.0.1 and screenshots its scalars page with headless
#    Chromium (Debian's `chromium`, installed here when missing) into OUT_DIR/scalars.png.
#
# Needs precis-train built with TensorBoard support and the Fashion-MNIST package
# (scripts/install-deps.sh --data). Environment: STEPS (optimizer steps per epoch, 24), PYTHON
# (python3), TENSORBOARD_SPEC (the pip requirement, tensorboard), KEEP_VENV=1 keeps the venv.
set -euo pipefail

build=${1:-build}
out=${2:-$build/tensorboard-check}
steps=${STEPS:-24}
python=${PYTHON:-python3}
here=$(cd "$(dirname "$0")" && pwd)
say() { echo "check-tensorboard: $*"; }
die() { echo "check-tensorboard: error: $*" >&2; exit 1; }

exe=$build/models/tools/precis-train
[[ -x $exe ]] || die "$exe not found: build it first (make build)"
data=/usr/share/datasets/fashion-mnist
[[ -d $data ]] || die "no Fashion-MNIST in $data: run scripts/install-deps.sh --data"

work=$(mktemp -d "${TMPDIR:-/tmp}/precis-tensorboard.XXXXXX")
tb_pid=""
cleanup() {
  [[ -n $tb_pid ]] && kill "$tb_pid" 2>/dev/null && wait "$tb_pid" 2>/dev/null
  if [[ ${KEEP_VENV:-0} == 1 ]]; then say "kept $work"; else rm -rf "$work"; fi
}
trap cleanup EXIT
rm -rf "$out"
mkdir -p "$out"
run=$out/run

# ---- 1. the run: 2 epochs of $steps steps; stopped after 1.5 epochs, resumed from the
# checkpoint at step steps/2 (so steps steps/2+1 .. 1.5*steps are logged twice).
batch=32
every=$((steps / 4))
common=(resnet --precision f16 --width 8 --batch "$batch" --epochs 2 --limit-train $((steps * batch))
        --limit-test 512 --threads "${THREADS:-2}" --workers 1 --tensorboard "$run" --tensorboard-histograms "$every"
        --metrics "$out/metrics.csv" --checkpoint "$out/ckpt" --checkpoint-every $((steps / 2)) --keep 10 --log-every "$every")
say "training: $exe ${common[*]}"
"$exe" "${common[@]}" --stop-after-steps $((steps * 3 / 2)) > "$out/train-1.log"
ckpt=$(printf '%s/ckpt/step-%09d.safetensors' "$out" $((steps / 2)))
"$exe" "${common[@]}" --resume --resume-from "$ckpt" > "$out/train-2.log"
tail -n 1 "$out/train-2.log" > "$out/summary.json"
say "$(ls "$run" | wc -l) event files; $(cat "$out/summary.json")"

# ---- 2. TensorBoard's reader
venv=$work/venv
"$python" -m venv "$venv"
"$venv/bin/pip" install -q --disable-pip-version-check "${TENSORBOARD_SPEC:-tensorboard}" ||
  die "pip could not install ${TENSORBOARD_SPEC:-tensorboard} from PyPI"
say "$("$venv/bin/python" -c 'import tensorboard; print("tensorboard", tensorboard.__version__)')"
"$venv/bin/python" "$here/check_tensorboard.py" "$run" "$out/metrics.csv" "$out/summary.json" "$every"

# ---- 3. the server and a screenshot of its scalars page
if ! command -v chromium >/dev/null 2>&1; then
  say "installing Debian's chromium"
  sudo_cmd=()
  (( EUID == 0 )) || sudo_cmd=(sudo -n)
  "${sudo_cmd[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium >/dev/null ||
    die "could not install chromium (apt-get install chromium)"
fi
port=$("$venv/bin/python" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
"$venv/bin/tensorboard" --logdir "$run" --host 127.0.0.1 --port "$port" --load_fast=false \
  > "$out/tensorboard.log" 2>&1 &
tb_pid=$!
for _ in $(seq 1 60); do
  curl -fsS "http://127.0.0.1:$port/data/runs" >/dev/null 2>&1 && break
  kill -0 "$tb_pid" 2>/dev/null || die "tensorboard exited: $(tail -n 5 "$out/tensorboard.log")"
  sleep 1
done
curl -fsS "http://127.0.0.1:$port/data/runs" >/dev/null || die "tensorboard did not answer on port $port"
# The page's own data requests, as the charts make them: the server must serve train/loss.
curl -fsS "http://127.0.0.1:$port/data/plugin/scalars/scalars?run=.&tag=train%2Floss" > "$out/train_loss.json" ||
  die "the server does not serve train/loss"
# The server merges the files itself (its own purge rule): each step once, 1..N.
"$venv/bin/python" - "$out/train_loss.json" "$out/summary.json" <<'PY' || die "the server's train/loss is not steps 1..N once each"
import json, sys
steps = [point[1] for point in json.load(open(sys.argv[1]))]
n = json.loads(open(sys.argv[2]).read())["steps"]
print(f"check-tensorboard: the server serves train/loss at {len(steps)} steps, {steps[:3]}...{steps[-3:]}")
sys.exit(0 if steps == list(range(1, n + 1)) else 1)
PY
# Only the loss and loss-scale cards, expanded; virtual time lets the page's scripts finish.
url="http://127.0.0.1:$port/?smoothing=0#scalars&tagFilter=train%2Floss&_smoothingWeight=0"
chromium --headless=new --no-sandbox --disable-gpu --hide-scrollbars --user-data-dir="$work/chromium" \
  --window-size=1600,1000 --virtual-time-budget=20000 --screenshot="$out/scalars.png" "$url" \
  > "$out/chromium.log" 2>&1 || die "chromium failed: $(tail -n 5 "$out/chromium.log")"
[[ -s $out/scalars.png ]] || die "no screenshot written"
say "screenshot: $out/scalars.png ($(stat -c %s "$out/scalars.png") bytes) of $url"
say "OK"
