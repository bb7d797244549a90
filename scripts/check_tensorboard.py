#!/usr/bin/env python3
"""Reads a precis-train --tensorboard run with TensorBoard's own event reader and checks it.

    check_tensorboard.py RUN_DIR METRICS_CSV SUMMARY_JSON HISTOGRAM_EVERY

Run inside a virtual environment that has tensorboard (scripts/check-tensorboard.sh makes one).
Checks, against the run's --metrics CSV (the last row per step: a resumed run appends) and its
JSON line: every train/* scalar has each step 1..N exactly once (a resume's replayed steps were
purged) with the CSV's value; skip_reason and skipped_steps agree with the CSV's `applied`
column; eval/* is there per epoch and the last equals the JSON's test accuracy; every parameter's
weight and gradient histogram is at each multiple of HISTOGRAM_EVERY; run/options is text. Prints
one line per tag; exits 1 listing every mismatch.
"""
import csv
import json
import math
import sys

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

TRAIN_TAGS = ["train/loss", "train/accuracy", "train/lr", "train/loss_scale", "train/skipped_steps",
              "train/skip_reason", "train/grad_norm", "train/samples_per_s", "train/data_wait"]
CSV_COLUMN = {"train/loss": "loss", "train/accuracy": "accuracy", "train/lr": "lr",
              "train/loss_scale": "loss_scale", "train/samples_per_s": "samples_per_s",
              "train/data_wait": "data_wait"}


def close(a, b, rel=1e-4, abs_=1e-6):
    return math.isclose(a, b, rel_tol=rel, abs_tol=abs_)


def main() -> int:
    run_dir, metrics_csv, summary_json, every = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    rows = {}
    with open(metrics_csv, newline="") as f:
        for row in csv.DictReader(f):
            rows[int(row["step"])] = row  # a resumed run's row replaces the interrupted run's
    summary = json.loads(open(summary_json).read().strip().splitlines()[-1])
    steps = sorted(rows)
    errors = []
    if steps != list(range(1, summary["steps"] + 1)):
        errors.append(f"the CSV's steps are not 1..{summary['steps']}")

    acc = EventAccumulator(run_dir, size_guidance={"scalars": 0, "histograms": 0, "tensors": 0})
    acc.Reload()
    tags = acc.Tags()
    print(f"check-tensorboard: {len(tags['scalars'])} scalar, {len(tags['histograms'])} histogram, "
          f"{len(tags['tensors'])} text tags in {run_dir}")

    for tag in TRAIN_TAGS:
        if tag not in tags["scalars"]:
            errors.append(f"{tag}: missing")
            continue
        events = acc.Scalars(tag)
        got = [e.step for e in events]
        if got != steps:
            dup = sorted({s for s in got if got.count(s) > 1})
            errors.append(f"{tag}: steps {got[:5]}...{got[-3:]} ({len(got)}), want 1..{len(steps)}"
                          + (f"; duplicated: {dup[:10]}" if dup else ""))
            continue
        bad = 0
        for e in events:
            row = rows[e.step]
            applied = row["applied"] == "1"
            if tag in CSV_COLUMN:
                want = float(row[CSV_COLUMN[tag]])
                # samples_per_s: the CSV has one decimal; data_wait four.
                ok = close(e.value, want, rel=1e-4, abs_=0.06 if tag == "train/samples_per_s" else 6e-5)
            elif tag == "train/skip_reason":
                ok = (e.value == 0) == applied and e.value in (0, 1, 2)
            elif tag == "train/skipped_steps":
                ok = e.value == sum(rows[s]["applied"] == "0" for s in steps if s <= e.step)
            else:  # grad_norm: finite on applied steps; equal to the CSV's when it has one (--clip)
                ok = (math.isfinite(e.value) or not applied) and \
                     (row["grad_norm"] == "" or close(e.value, float(row["grad_norm"])))
            if not ok:
                bad += 1
                if bad <= 3:
                    errors.append(f"{tag}: step {e.step}: {e.value} does not match the CSV row {row}")
        vals = [e.value for e in events]
        print(f"  {tag:22s} steps 1..{len(events)}  first {vals[0]:.5g}  last {vals[-1]:.5g}  "
              f"min {min(vals):.5g}  max {max(vals):.5g}")

    epochs = math.ceil(summary["epochs"])
    for tag in ("eval/loss", "eval/accuracy"):
        if tag not in tags["scalars"]:
            errors.append(f"{tag}: missing")
            continue
        events = acc.Scalars(tag)
        if len(events) != epochs or len({e.step for e in events}) != epochs:
            errors.append(f"{tag}: {len(events)} points at steps {[e.step for e in events]}, want one per epoch ({epochs})")
        print(f"  {tag:22s} " + ", ".join(f"step {e.step}: {e.value:.4f}" for e in events))
    if "eval/accuracy" in tags["scalars"] and summary["test_accuracy"] is not None:
        last = acc.Scalars("eval/accuracy")[-1].value
        if not close(last, summary["test_accuracy"], abs_=1e-4):
            errors.append(f"eval/accuracy: last {last} but the JSON line says {summary['test_accuracy']}")

    weights = [t for t in tags["histograms"] if t.startswith("weights/")]
    grads = [t for t in tags["histograms"] if t.startswith("grads/")]
    want_steps = [s for s in steps if every > 0 and s % every == 0]
    if every > 0 and (not weights or len(weights) != len(grads)):
        errors.append(f"histograms: {len(weights)} weights/ and {len(grads)} grads/ tags")
    for tag in weights + grads:
        got = [e.step for e in acc.Histograms(tag)]
        if got != want_steps:
            errors.append(f"{tag}: histograms at {got}, want {want_steps}")
        for e in acc.Histograms(tag):
            h = e.histogram_value
            if not (h.num > 0 and h.min <= h.max and abs(sum(h.bucket) - h.num) < 0.5):
                errors.append(f"{tag}: step {e.step}: inconsistent histogram (num {h.num}, buckets {sum(h.bucket)})")
    print(f"  histograms: {len(weights)} weights/ + {len(grads)} grads/ tags at steps {want_steps}")

    if "run/options" not in tags["tensors"]:
        errors.append("run/options: missing")
    else:
        text = acc.Tensors("run/options")[0].tensor_proto.string_val[0].decode()
        if "model: " not in text or "precision: " not in text:
            errors.append(f"run/options: unexpected text {text!r}")

    for e in errors:
        print("check-tensorboard: MISMATCH:", e)
    print(f"check-tensorboard: {'FAILED' if errors else 'OK'}: {len(errors)} mismatches")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
