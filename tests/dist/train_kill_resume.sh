#!/usr/bin/env bash
# Usage: train_kill_resume.sh PRECIS_TRAIN WORKDIR KILLS MPIRUN-COMMAND... (ending in its -n flag)
# Real SIGKILLs of a whole `mpirun -np 2 precis-train --distributed` job (mpirun and both ranks,
# one signal to the job's process group) at random moments, uniform over the time an uninterrupted
# run takes here, like tests/models/train_kill_test.cpp does for one process. After every kill no
# process of the job is left, and every checkpoint the folder offers is whole (a partial file is
# never taken for one); each chain of killed runs, resumed with --resume from whatever the last
# kill left, ends bit for bit (BatchNorm buffers included) where the uninterrupted run ends.
# Prints the figures. (Fashion-MNIST from the Debian package; skipped, exit 77, when absent.)
set -u
train=$1 work=$2 kills_wanted=$3; shift 3
mpirun=("$@")
data=/usr/share/datasets/fashion-mnist
[[ -d $data ]] || { echo "SKIPPED: $data is absent (scripts/install-deps.sh --data)"; exit 77; }
command -v setsid >/dev/null || { echo "train_kill_resume: FAIL: setsid (util-linux) is missing"; exit 1; }
here=$(cd "$(dirname "$0")" && pwd)
rm -rf "$work" && mkdir -p "$work" || exit 1
common=(resnet --data "$data" --limit-train 128 --limit-test 32 --width 4 --epochs 2 --batch 16 --threads 1
        --workers 0 --eval-batch 32 --precision bf16 --checkpoint-every 1 --keep 3 --quiet --distributed)
RANDOM=20261201  # a fixed sequence of kill moments

newest() { ls "$1"/step-*.safetensors 2>/dev/null | grep -E '/step-[0-9]+\.safetensors$' | sort | tail -1; }
# Every offered checkpoint is a whole safetensors file (header parses, data as long as it says).
whole() {
  python3 - "$@" <<'PY'
import json, os, struct, sys
for p in sys.argv[1:]:
    data = open(p, "rb").read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    end = max((v["data_offsets"][1] for k, v in header.items() if k != "__metadata__"), default=0)
    if len(data) != 8 + n + end:
        sys.exit(f"{p}: {len(data)} bytes, the header says {8 + n + end}")
PY
}

# The uninterrupted run, timed.
t0=$EPOCHREALTIME
"${mpirun[@]}" 2 "$train" "${common[@]}" --checkpoint "$work/reference" > "$work/reference.log" 2>&1 ||
  { cat "$work/reference.log"; echo "train_kill_resume: FAIL: the uninterrupted run failed"; exit 1; }
run_ms=$(( (${EPOCHREALTIME/./} - ${t0/./}) / 1000 ))
reference=$(newest "$work/reference")
echo "uninterrupted run: $run_ms ms, ends at $(basename "$reference")"

kills=0 chains=0 finished_first=0 during_write=0 status=0
while (( kills < kills_wanted )); do
  dir="$work/chain-$chains"; chains=$((chains + 1)); mkdir -p "$dir"
  finished=0
  for (( ; ; )); do
    resume=(); [[ -n $(newest "$dir") ]] && resume=(--resume)
    setsid "${mpirun[@]}" 2 "$train" "${common[@]}" --checkpoint "$dir" "${resume[@]}" > "$dir/run.log" 2>&1 &
    job=$!  # setsid from a non-leader execs in place: the job's process group id is mpirun's pid
    delay_ms=$(( (RANDOM * 32768 + RANDOM) % run_ms ))
    sleep "$(printf '%d.%03d' $((delay_ms / 1000)) $((delay_ms % 1000)))"
    kill -KILL -- "-$job" 2>/dev/null
    wait "$job" 2>/dev/null; rc=$?
    if (( rc != 137 )); then  # it finished before the kill
      (( rc == 0 )) || { cat "$dir/run.log"; echo "train_kill_resume: FAIL: a run exited with $rc"; exit 1; }
      finished_first=$((finished_first + 1)); finished=1; break
    fi
    kills=$((kills + 1))
    compgen -G "$dir/*.tmp.*" >/dev/null && during_write=$((during_write + 1))
    # No rank may outlive the job (and write into the folder under the next run).
    left=""
    for _ in $(seq 50); do
      left=""
      for f in /proc/[0-9]*/cmdline; do
        c=$(tr '\0' ' ' 2>/dev/null < "$f") || continue
        [[ $c == *"$train "*"--checkpoint $dir "* ]] && left+=" ${f%/cmdline}"
      done
      [[ -z $left ]] && break; sleep 0.1
    done
    [[ -z $left ]] || { echo "train_kill_resume: FAIL: processes of the killed job remain: $left"; exit 1; }
    mapfile -t offered < <(ls "$dir"/step-*.safetensors 2>/dev/null | grep -E '/step-[0-9]+\.safetensors$')
    if (( ${#offered[@]} )) && ! whole "${offered[@]}"; then
      echo "train_kill_resume: FAIL: a killed job left a partial checkpoint"; status=1
    fi
    echo "kill $kills: after $delay_ms ms, newest checkpoint $(basename "$(newest "$dir")" 2>/dev/null)"
    (( kills >= kills_wanted )) && break
  done
  # Finish an unfinished chain, then compare with the uninterrupted run.
  if (( !finished )); then
    resume=(); [[ -n $(newest "$dir") ]] && resume=(--resume)
    "${mpirun[@]}" 2 "$train" "${common[@]}" --checkpoint "$dir" "${resume[@]}" > "$dir/final.log" 2>&1 ||
      { cat "$dir/final.log"; echo "train_kill_resume: FAIL: resuming chain $chains failed"; exit 1; }
  fi
  last=$(newest "$dir")
  [[ $(basename "$last") == $(basename "$reference") ]] ||
    { echo "train_kill_resume: FAIL: chain $chains ends at $last, not at $(basename "$reference")"; exit 1; }
  python3 "$here/compare_checkpoints.py" --with-buffers "$reference" "$last" || status=1
done
echo "random kills of the np 2 job: $kills kills in $chains chains ($finished_first runs finished first)," \
     "$during_write with a temporary file left, uninterrupted run $run_ms ms"
(( status == 0 )) && echo "train_kill_resume: PASS" || echo "train_kill_resume: FAIL"
exit $status
