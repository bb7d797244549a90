#!/usr/bin/env bash
# Usage: train_equivalence.sh PRECIS_TRAIN WORKDIR MPIRUN-COMMAND... (ending in its -n flag)
# 1. `mpirun -np 2 precis-train resnet --batch 16 --distributed` gives, after every one of its 4
#    steps, parameters and optimizer state bit-identical (f32) to `precis-train --batch 16 --accum 2`.
#    Its --metrics rows (train loss and accuracy, reduced over the ranks) equal --accum 2's.
# 2. The same distributed run stopped after step 2 and resumed (--resume) ends bit-identical to the
#    uninterrupted one, BatchNorm buffers included.
# 3. With --precision fp8 (the linear head's GEMMs in fp8, bf16 elsewhere) np 2 equals --accum 2
#    after every step too, the head's input and weight amax histories and scales included: each
#    rank records its micro-batch's amaxes and the max over the ranks is taken before the scales
#    move, as one process folds its micro-batches' amaxes. The output gradient's amaxes are twice
#    --accum 2's, exactly (--accum 2 halves each micro-batch's loss; DDP averages afterwards), so
#    its scales are half and its fp8 codes, hence every update, the same.
# (Fashion-MNIST from the Debian package; the test is skipped, exit 77, when it is absent.)
set -u
train=$1 work=$2; shift 2
data=/usr/share/datasets/fashion-mnist
[[ -d $data ]] || { echo "SKIPPED: $data is absent (scripts/install-deps.sh --data)"; exit 77; }
here=$(cd "$(dirname "$0")" && pwd)
rm -rf "$work" && mkdir -p "$work" || exit 1
common=(resnet --data "$data" --limit-train 128 --limit-test 64 --width 4 --epochs 1 --batch 16 --threads 1
        --workers 0 --eval-batch 32 --precision f32 --checkpoint-every 1 --keep 10 --quiet)
run() { echo "+ $*"; "$@" || { echo "train_equivalence: FAIL: the command failed"; exit 1; }; }
run "$train" "${common[@]}" --accum 2 --checkpoint "$work/accum" --metrics "$work/accum.csv"
run "$@" 2 "$train" "${common[@]}" --distributed --checkpoint "$work/np2" --metrics "$work/np2.csv"
run "$@" 2 "$train" "${common[@]}" --distributed --checkpoint "$work/resumed" --stop-after-steps 2
run "$@" 2 "$train" "${common[@]}" --distributed --checkpoint "$work/resumed" --resume
fp8=("${common[@]/#f32/fp8}" --fp8-history 4)
run "$train" "${fp8[@]}" --accum 2 --checkpoint "$work/fp8-accum"
run "$@" 2 "$train" "${fp8[@]}" --distributed --checkpoint "$work/fp8-np2"
status=0
for s in 1 2 3 4; do
  f=step-00000000$s.safetensors
  echo "step $s, np 2 vs --accum 2:"
  python3 "$here/compare_checkpoints.py" "$work/accum/$f" "$work/np2/$f" || status=1
done
# The logged train figures are the job's (reduced over the ranks), so the same as --accum 2's:
# epoch, step, epoch_step, lr, loss, accuracy of every step.
echo "--metrics loss and accuracy, np 2 vs --accum 2:"
if diff <(cut -d, -f1-6 "$work/accum.csv") <(cut -d, -f1-6 "$work/np2.csv"); then echo "same"; else status=1; fi
grad_state=grad_output_amax_history,grad_output_scale,grad_output_scale_inv
for s in 1 2 3 4; do
  f=step-00000000$s.safetensors
  echo "step $s, --precision fp8, np 2 vs --accum 2 (fp8 input and weight state included):"
  python3 "$here/compare_checkpoints.py" --skip "$grad_state" "$work/fp8-accum/$f" "$work/fp8-np2/$f" || status=1
  python3 - "$work/fp8-accum/$f" "$work/fp8-np2/$f" <<'PY' || status=1
import json, struct, sys
def fp8_state(path):
    data = open(path, "rb").read()
    n = struct.unpack("<Q", data[:8])[0]
    header, body = json.loads(data[8:8 + n]), data[8 + n:]
    out = {}
    for k, v in header.items():
        if ".fp8.grad_output_" in k:
            a, b = v["data_offsets"]
            out[k.rsplit(".", 1)[1]] = struct.unpack(f"<{(b - a) // 4}f", body[a:b])
    return out
accum, np2 = fp8_state(sys.argv[1]), fp8_state(sys.argv[2])
ok = (len(accum) == 3 and all(y == 2 * x for x, y in zip(accum["grad_output_amax_history"], np2["grad_output_amax_history"]))
      and all(y == x / 2 for x, y in zip(accum["grad_output_scale"], np2["grad_output_scale"]))
      and all(y == 2 * x for x, y in zip(accum["grad_output_scale_inv"], np2["grad_output_scale_inv"])))
print("  output-gradient fp8 state: np 2's amaxes twice --accum 2's, scales half:", "yes" if ok else "NO")
sys.exit(0 if ok else 1)
PY
done
echo "step 4, np 2 resumed after step 2 vs uninterrupted:"
python3 "$here/compare_checkpoints.py" --with-buffers "$work/np2/step-000000004.safetensors" "$work/resumed/step-000000004.safetensors" || status=1
(( status == 0 )) && echo "train_equivalence: PASS" || echo "train_equivalence: FAIL"
exit $status
