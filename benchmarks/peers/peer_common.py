"""What the PyTorch peers (torch_ops.py, torch_models.py) share: the timing loop of precis-bench
(benchmarks/bench.cpp: warm-up, then repeat until min_time and min_reps) and the glibc malloc
tuning of MACHINE.md, which must be in the environment before the interpreter starts."""
import argparse
import json
import os
import statistics
import sys
import time

TUNABLES = "glibc.malloc.mmap_threshold=4294967295:glibc.malloc.trim_threshold=68719476736"


def peer_arg_parser(doc):
    """The command line both peers take (thread counts, repetitions, output, case filter); a
    peer adds its own options to it."""
    p = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--threads", default="2", help="comma-separated thread counts (default 2)")
    p.add_argument("--repeat", type=int, default=200)
    p.add_argument("--min-time", type=float, default=0.5)
    p.add_argument("--json", help="write the records to this file")
    p.add_argument("--cases", default="", help="only cases whose name contains this")
    p.add_argument("--no-malloc-tuning", action="store_true")
    return p


def reexec_with_malloc_tuning(disabled):
    """Re-executes this script once with GLIBC_TUNABLES set (unless disabled or already set)."""
    if not disabled and "GLIBC_TUNABLES" not in os.environ:
        os.environ["GLIBC_TUNABLES"] = TUNABLES
        os.execv(sys.executable, [sys.executable] + sys.argv)


def time_step(run, repeat, min_time, min_reps=5, warmup=2):
    """(median ms, min ms, repetitions) of run()."""
    for _ in range(warmup):
        run()
    times, spent = [], 0.0
    while len(times) < repeat and (spent < min_time or len(times) < min(min_reps, repeat)):
        t0 = time.perf_counter()
        run()
        dt = time.perf_counter() - t0
        times.append(dt * 1e3)
        spent += dt
    return statistics.median(times), min(times), len(times)


# The flags precis-bench names (benchmarks/processor.cpp): the instruction sets the kernels choose between.
FLAGS_OF_INTEREST = ("avx2", "avx512f", "avx512_bf16", "amx_tile", "amx_bf16")


def processor():
    """This machine's processor as precis-bench writes it into each record: /proc/cpuinfo's model
    name, vendor, cpu family and model numbers, and which FLAGS_OF_INTEREST it has.
    precis-bench also classifies the family ("AMD Zen 5"); report.py takes that from its records
    and checks that both sides ran on the same processor."""
    info = {"processor": "unknown CPU", "cpu_vendor": "", "cpu_family": -1, "cpu_model": -1, "cpu_flags": ""}
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if not line.strip():
                    break  # the first processor's entry: the machines here are homogeneous
                key, _, value = line.partition(":")
                key, value = key.strip(), value.strip()
                if key == "model name":
                    info["processor"] = value
                elif key == "vendor_id":
                    info["cpu_vendor"] = value
                elif key == "cpu family":
                    info["cpu_family"] = int(value)
                elif key == "model":
                    info["cpu_model"] = int(value)
                elif key == "flags":
                    present = set(value.split())
                    info["cpu_flags"] = " ".join(f for f in FLAGS_OF_INTEREST if f in present)
    except OSError:
        pass
    return info


def write_records(records, path):
    """The records as a JSON array, each naming the processor: to `path`, or to stdout when path
    is None."""
    cpu = processor()
    records = [{**r, **cpu} for r in records]
    text = json.dumps(records, indent=1)
    if path:
        with open(path, "w") as f:
            f.write(text + "\n")
    else:
        print(text)
