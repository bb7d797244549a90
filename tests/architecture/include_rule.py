#!/usr/bin/env python3
"""The layer rule on #include lines (docs/design/architecture.md, "The rule, as the build checks it").

Reads the folder table from the design document (so the rule and its test cannot drift), lists
every repository-rooted #include in each library folder, and fails on an edge the table does not
allow, or on a backend-private header (ops/cpu/, ops/cuda/) included from outside ops/, or on a
header outside a backend folder (cpu/, cuda/, mpi/) that includes MPI's or NCCL's own header.

    include_rule.py REPO_ROOT            check the tree; exit 1 listing every violation
    include_rule.py REPO_ROOT --list     also print the folder-to-folder edges found, with counts
"""
import re
import sys
from collections import Counter
from pathlib import Path

SOURCE_SUFFIXES = {".h", ".hpp", ".cpp", ".cu", ".cuh", ".def"}
PRIVATE_BACKENDS = ("ops/cpu/", "ops/cuda/")
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')
TRANSPORT = re.compile(r'^\s*#\s*include\s+[<"](mpi\.h|nccl\.h)[>"]')
BACKEND_DIR = re.compile(r"/(cpu|cuda|mpi)/")


def read_rule(doc: Path):
    """folder -> set of folders it may include, from the table after the include-rule marker."""
    lines = doc.read_text(encoding="utf-8").splitlines()
    try:
        start = next(i for i, l in enumerate(lines) if "include-rule:" in l)
    except StopIteration:
        sys.exit(f"{doc}: no '<!-- include-rule: ... -->' marker before the rule table")
    rule = {}
    for line in lines[start + 1:]:
        if not line.startswith("|"):
            if rule:
                break
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 2 or cells[0] in ("folder", "") or set(cells[0]) <= set("-: "):
            continue
        rule[cells[0]] = {c.strip() for c in cells[1].split(",") if c.strip()}
    if not rule:
        sys.exit(f"{doc}: the rule table after the include-rule marker is empty")
    return rule


def main() -> int:
    root = Path(sys.argv[1]).resolve()
    list_edges = "--list" in sys.argv[2:]
    rule = read_rule(root / "docs/design/architecture.md")
    folders = set(rule)
    violations, edges = [], Counter()
    for folder in sorted(folders):
        for path in sorted((root / folder).rglob("*")):
            if path.suffix not in SOURCE_SUFFIXES or not path.is_file():
                continue
            rel = path.relative_to(root).as_posix()
            for n, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
                t = TRANSPORT.match(line)
                if t and path.suffix in {".h", ".hpp", ".cuh"} and not BACKEND_DIR.search("/" + rel):
                    violations.append(f"{rel}:{n}: the header includes <{t.group(1)}>: public headers stay free of "
                                      "transport headers; keep it in a .cpp under mpi/ or cuda/")
                m = INCLUDE.match(line)
                if not m:
                    continue
                target = m.group(1)
                top = target.split("/", 1)[0]
                if top not in folders or "/" not in target:
                    continue  # a same-folder relative include or a third-party header
                edges[(folder, top)] += 1
                if top not in rule[folder]:
                    violations.append(f"{rel}:{n}: {folder}/ includes \"{target}\": {folder} may include only "
                                      f"{', '.join(sorted(rule[folder]))} (docs/design/architecture.md)")
                elif target.startswith(PRIVATE_BACKENDS) and folder != "ops":
                    violations.append(f"{rel}:{n}: {folder}/ includes the backend-private \"{target}\": reach "
                                      "kernels through the op table (docs/design/architecture.md)")
    if list_edges:
        for (a, b), c in sorted(edges.items()):
            print(f"{a} -> {b}: {c}")
    for v in violations:
        print(v)
    total = sum(edges.values())
    print(f"include rule: {len(folders)} folders, {total} includes between library folders, "
          f"{len(violations)} violations")
    return 1 if violations else 0


if __name__ == "__main__":
    sys.exit(main())
