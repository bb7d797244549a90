#!/usr/bin/env python3
"""One op front-end (docs/design/architecture.md, "How an op is written"): ops run the precision
hook and record their backward node through ops/frontend.h's detail::call, not by hand. This lists
every hand-written `autograd::record(` or `apply_precision*(` call in the library's sources outside
the front-ends that say why they are written out, and exits 1 when one appears (or when an allowed
one grows), so a new op written the old way fails here rather than in review.

    python3 tests/architecture/frontend_rule.py REPO_ROOT
"""
import re
import sys
from pathlib import Path

CALLS = {
    "record": re.compile(r"\bautograd::record\("),
    "hook": re.compile(r"\bapply_precision(?:_list|_widening_in_kernel)?\("),
}
# file: ({call: count}, why it is written out).
ALLOWED = {
    "ops/frontend.h": ({"record": 1}, "the front-end itself"),
    "ops/precision.h": ({"hook": 3}, "the hook's definitions"),
    "ops/precision.cpp": ({"hook": 1}, "the hook's definition (list form)"),
    "ops/index.cpp": ({"record": 1, "hook": 2}, "cat and stack take a list of operands"),
    "ops/views.cpp": ({"record": 1}, "record_view, shared by the view family (no hook: views are metadata)"),
    "ops/linear_gelu.cpp": ({"record": 1, "hook": 1}, "without its fused kernels it is linear then gelu"),
    "ops/loss.cpp": ({"record": 2, "hook": 1}, "linear_cross_entropy: two algorithms choose what backward keeps"),
    "ops/attention.cpp": ({"hook": 1}, "scaled_dot_product_attention: a composite of other ops"),
    "amp/fp8_linear.cpp": ({"record": 1}, "its precision is the fp8 recipe's state, not the policy's"),
}
SOURCES = ("core", "tensor", "autograd", "ops", "amp", "optim", "dist", "models", "data")


def strip_comments(text: str) -> str:
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    return re.sub(r"//[^\n]*", "", text)


def main() -> int:
    root = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parents[2]
    bad = []
    for top in SOURCES:
        for path in sorted((root / top).rglob("*")):
            if path.suffix not in (".cpp", ".h", ".cu", ".cuh") or not path.is_file():
                continue
            rel = path.relative_to(root).as_posix()
            if rel.startswith("autograd/record"):
                continue  # record's own declaration and definition
            text = strip_comments(path.read_text(encoding="utf-8", errors="replace"))
            allowed = ALLOWED.get(rel, ({}, ""))[0]
            for name, pattern in CALLS.items():
                n = len(pattern.findall(text))
                if n > allowed.get(name, 0):
                    what = "autograd::record" if name == "record" else "apply_precision"
                    bad.append(f"{rel}: {n} hand-written {what} call(s), {allowed.get(name, 0)} allowed; declare the op "
                               "for ops/frontend.h (docs/howto/add-an-op.md, steps 3-4)")
    for line in bad:
        print(line)
    if bad:
        print(f"frontend_rule: {len(bad)} file(s) write an op front-end by hand")
        return 1
    print("frontend_rule: every op front-end goes through ops/frontend.h or is a listed exception")
    return 0


if __name__ == "__main__":
    sys.exit(main())
