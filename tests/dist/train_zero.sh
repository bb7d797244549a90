#!/usr/bin/env bash
# Usage: train_zero.sh PRECIS_TRAIN WORKDIR MPIRUN-COMMAND... (ending in its -n flag)
# precis-train --distributed --zero (ZeRO-1) on a small BERT (f16 autocast and loss scaler, Adam,
# clipping, --accum 2) on a generated corpus, so that it runs everywhere:
# 1. at np 2 and np 3, every step's checkpoint equals plain --distributed's bit for bit
#    (parameters and optimizer state: the checkpoints are the same files);
# 2. a --zero run stopped after step 3 and resumed ends where the uninterrupted one does, and so
#    does one resumed with --zero from a plain run's checkpoint;
# 3. one rank SIGKILLed mid-run ends the whole job within 20 s, and resuming from the last
#    checkpoint ends where the uninterrupted run does.
set -u
train=$1 work=$2; shift 2
mpirun=("$@")
here=$(cd "$(dirname "$0")" && pwd)
rm -rf "$work" && mkdir -p "$work" || exit 1
python3 - "$work/corpus.txt" <<'PY'
import random, sys
random.seed(3)
words = "alpha beta gamma delta river stone light green quick slow house tree water fire cloud north south music paper glass".split()
with open(sys.argv[1], "w") as f:
    for _ in range(600):
        f.write(" ".join(random.choice(words) for _ in range(random.randint(6, 20))) + "\n")
PY
common=(bert-mini --data "$work/corpus.txt" --vocab "$work/vocab.txt" --vocab-size 64 --hidden 32 --layers 2 --heads 2
        --intermediate 64 --max-len 24 --batch 8 --limit-train 192 --limit-test 16 --epochs 2 --threads 1 --workers 0
        --precision f16 --optimizer adam --clip 0.5 --accum 2 --checkpoint-every 1 --keep 100 --quiet --distributed)
run() { echo "+ $*"; "$@" > /dev/null || { echo "train_zero: FAIL: the command failed"; exit 1; }; }
status=0
same() {  # same A B: bit-identical parameters and optimizer state
  python3 "$here/compare_checkpoints.py" "$1" "$2" || status=1
}
newest() { ls "$1"/step-*.safetensors 2>/dev/null | grep -E '/step-[0-9]+\.safetensors$' | sort | tail -1; }

for np in 2 3; do
  run "${mpirun[@]}" $np "$train" "${common[@]}" --checkpoint "$work/plain$np"
  run "${mpirun[@]}" $np "$train" "${common[@]}" --zero --checkpoint "$work/zero$np"
  n=0
  for f in "$work/plain$np"/step-*.safetensors; do
    echo "np $np, $(basename "$f"), --zero vs plain:"
    same "$f" "$work/zero$np/$(basename "$f")"
    n=$((n + 1))
  done
  (( n >= 8 )) || { echo "train_zero: FAIL: only $n steps at np $np (want 8 or more)"; status=1; }
done
last=$(basename "$(newest "$work/zero2")")

run "${mpirun[@]}" 2 "$train" "${common[@]}" --zero --checkpoint "$work/resumed" --stop-after-steps 3
run "${mpirun[@]}" 2 "$train" "${common[@]}" --zero --checkpoint "$work/resumed" --resume
echo "$last, --zero stopped after step 3 and resumed vs uninterrupted:"
same "$work/zero2/$last" "$work/resumed/$last"
mkdir -p "$work/from-plain" && cp "$work/plain2/step-000000003.safetensors" "$work/from-plain/"
run "${mpirun[@]}" 2 "$train" "${common[@]}" --zero --checkpoint "$work/from-plain" --resume
echo "$last, --zero resumed from plain's step 3 vs uninterrupted:"
same "$work/zero2/$last" "$work/from-plain/$last"

# A rank killed mid-run: the job must end by itself (mpirun sees the rank die and ends the others).
mkdir -p "$work/killed"
setsid "${mpirun[@]}" 2 "$train" "${common[@]}" --zero --checkpoint "$work/killed" > "$work/killed.log" 2>&1 &
job=$!
for _ in $(seq 1 600); do [[ -n $(newest "$work/killed") ]] && break; sleep 0.05; done
victim=$(pgrep -s "$job" -f "precis-train" | sort -n | tail -1)
if [[ -z $victim ]]; then
  echo "train_zero: note: the job finished before a rank could be killed; kill check not run"
  wait $job
else
  t0=$EPOCHREALTIME
  kill -9 "$victim"
  timeout 20 tail --pid=$job -f /dev/null; ended=$?
  ms=$(( (${EPOCHREALTIME/./} - ${t0/./}) / 1000 ))
  wait $job; rc=$?
  if (( ended != 0 )); then
    echo "train_zero: FAIL: the job still runs 20 s after rank pid $victim was killed"; kill -9 -- -$job; status=1
  else
    echo "rank pid $victim killed: the job ended after $ms ms with status $rc"
    (( rc != 0 )) || { echo "train_zero: FAIL: the job reported success"; status=1; }
  fi
  run "${mpirun[@]}" 2 "$train" "${common[@]}" --zero --checkpoint "$work/killed" --resume
  echo "$last, killed and resumed vs uninterrupted:"
  same "$work/zero2/$last" "$work/killed/$last"
fi
(( status == 0 )) && echo "train_zero: PASS" || echo "train_zero: FAIL"
exit $status
