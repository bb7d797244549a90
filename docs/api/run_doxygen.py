#!/usr/bin/env python3
"""`make docs`: the API reference of the public headers, built by Doxygen, warnings as errors.

    run_doxygen.py DOXYGEN SOURCE_DIR OUTPUT_DIR [--update-baseline]

The public headers are those the umbrella header precis.h includes, directly or through each
other (the API `#include <precis/precis.h>` gives). Doxygen writes HTML to OUTPUT_DIR/html and its
warnings to OUTPUT_DIR/warnings.txt. Every warning fails the build (exit 1, listed), except an
"is not documented" warning for an entity in docs/api/undocumented.txt: the entities that were
undocumented when this check arrived. That list may only shrink: document an entity and delete its
line (the run lists the lines that are no longer needed); a new undocumented public function,
class or member fails. --update-baseline rewrites the list from this run (only to drop entries).
"""
import re
import subprocess
import sys
from pathlib import Path

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')
WARNING = re.compile(r"^(?P<file>[^:]+):(?P<line>\d+): warning: (?P<text>.*)$")
UNDOCUMENTED = re.compile(r"^(?P<what>.*) is not documented\.$")


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
    update = "--update-baseline" in sys.argv[4:]
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

    baseline_path = src / "docs/api/undocumented.txt"
    baseline = {l for l in baseline_path.read_text(encoding="utf-8").splitlines()
                if l and not l.startswith("#")} if baseline_path.exists() else set()
    found, errors = set(), []
    for raw in warnings_file.read_text(encoding="utf-8", errors="replace").splitlines():
        m = WARNING.match(raw)
        if not m:
            if raw.strip():
                errors.append(raw)  # a continuation line of a warning, or doxygen's own message
            continue
        rel = str(Path(m["file"]).resolve().relative_to(src)) if m["file"].startswith("/") else m["file"]
        u = UNDOCUMENTED.match(m["text"])
        if u:
            key = f"{rel}: {u['what']}"
            found.add(key)
            if key in baseline:
                continue
        errors.append(f"{rel}:{m['line']}: {m['text']}")
    errors = sorted(set(errors))
    if update:
        header = [l for l in baseline_path.read_text(encoding="utf-8").splitlines() if l.startswith("#")]
        baseline_path.write_text("\n".join(header + sorted(found & baseline if baseline else found)) + "\n",
                                 encoding="utf-8")
        print(f"docs: {baseline_path} rewritten: {len(found & baseline if baseline else found)} entries")
    stale = sorted(baseline - found)
    if stale:
        print(f"docs: {len(stale)} entries of docs/api/undocumented.txt are documented now; delete them "
              "(run_doxygen.py ... --update-baseline):")
        for s in stale[:20]:
            print("   ", s)
    for e in errors:
        print("docs: error:", e)
    print(f"docs: {len(headers)} public headers -> {out / 'html/index.html'}; {len(errors)} errors; "
          f"{len(found & baseline)} undocumented entities still listed in docs/api/undocumented.txt")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
