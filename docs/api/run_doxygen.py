#!/usr/bin/env python3
"""`make docs`: the API reference of the public headers, built by Doxygen, warnings as errors.

    run_doxygen.py DOXYGEN SOURCE_DIR OUTPUT_DIR

The public headers are those the umbrella header precis.h includes, directly or through each
other (the API `#include <precis/precis.h>` gives). Doxygen writes HTML to OUTPUT_DIR/html and its
warnings to OUTPUT_DIR/warnings.txt. Every warning fails the build (exit 1, listed): an
undocumented public function, class or member is an error, with no exceptions list.
"""
import re
import subprocess
import sys
from pathlib import Path

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')
WARNING = re.compile(r"^(?P<file>[^:]+):(?P<line>\d+): warning: (?P<text>.*)$")


def public_headers(src: Path):
    """precis.h and every repository header it reaches through #include "..."."""
    seen, stack = set(), ["precis.h"]
    while stack:
        rel = stack.pop()
        if rel in seen or not (src / rel).is_file():
            continue
        seen.add(rel)
        for line in (src / rel).read_text(encoding="utf-8", errors="replace").splitlines():
            m = INCLUDE.match(line)
            if m:
                stack.append(m.group(1))
    return sorted(seen)


def main() -> int:
    doxygen, src, out = sys.argv[1], Path(sys.argv[2]).resolve(), Path(sys.argv[3]).resolve()
    out.mkdir(parents=True, exist_ok=True)
    headers = public_headers(src)
    template = (src / "docs/api/Doxyfile.in").read_text(encoding="utf-8")
    warnings_file = out / "warnings.txt"
    config = template.replace("@INPUT@", " \\\n    ".join([str(src / h) for h in headers] +
                                                     [str(src / "docs/api/mainpage.md")]))
    config = config.replace("@OUTPUT@", str(out)).replace("@WARNINGS@", str(warnings_file))
    config = config.replace("@SOURCE@", str(src))
    (out / "Doxyfile").write_text(config, encoding="utf-8")
    done = subprocess.run([doxygen, str(out / "Doxyfile")], cwd=src)
    if done.returncode != 0:
        print(f"docs: doxygen failed (exit {done.returncode})", file=sys.stderr)
        return 1

    errors = []
    for raw in warnings_file.read_text(encoding="utf-8", errors="replace").splitlines():
        m = WARNING.match(raw)
        if not m:
            if raw.strip():
                errors.append(raw)  # a continuation line of a warning, or doxygen's own message
            continue
        rel = str(Path(m["file"]).resolve().relative_to(src)) if m["file"].startswith("/") else m["file"]
        errors.append(f"{rel}:{m['line']}: {m['text']}")
    errors = sorted(set(errors))
    for e in errors:
        print("docs: error:", e)
    print(f"docs: {len(headers)} public headers -> {out / 'html/index.html'}; {len(errors)} errors")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
