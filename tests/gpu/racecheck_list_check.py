#!/usr/bin/env python3
"""Checks tests/gpu/racecheck_tests.txt against the sources, so a renamed test or a new
shared-memory kernel cannot silently drop out of the racecheck run.

    racecheck_list_check.py REPO_ROOT

Fails (exit 1, naming each problem) when a line is not `precis_<folder>_tests<TAB>spec`, when the
spec has a character Catch2 v2 reads as test-spec syntax (`,` must be written `\,`), when no
TEST_CASE in tests/<folder>/ has exactly the spec's name with the [cuda] tag, or when a CUDA source
of core/, ops/ or dist/ that declares __shared__ memory is not named in the file's header comment.
"""
import re
import sys
from pathlib import Path

TEST_CASE = re.compile(r'TEST_CASE\(\s*"((?:[^"\\]|\\.)*)"\s*,\s*"([^"]*)"')
LINE = re.compile(r"^precis_(\w+)_tests\t(.+)$")
# Outside a backslash escape these make a Catch2 v2 test spec something other than one exact name.
SPEC_SYNTAX = re.compile(r'(?<!\\)[,\[\]*~"]')


def main() -> int:
    root = Path(sys.argv[1]).resolve()
    listing = root / "tests/gpu/racecheck_tests.txt"
    problems, header = [], []
    for n, line in enumerate(listing.read_text(encoding="utf-8").splitlines(), 1):
        if line.startswith("#") or not line.strip():
            header.append(line)
            continue
        m = LINE.match(line)
        if not m:
            problems.append(f"{listing.name}:{n}: not 'precis_<folder>_tests<TAB>test spec': {line!r}")
            continue
        folder, spec = m.groups()
        if SPEC_SYNTAX.search(spec) or spec.startswith(("exclude:", " ")):
            problems.append(f"{listing.name}:{n}: {spec!r} is not one exact name as a Catch2 test spec: "
                            "escape ',', '[', ']', '*', '~' and '\"' with a backslash")
            continue
        name = re.sub(r"\\(.)", r"\1", spec)
        tags = [t for f in sorted((root / "tests" / folder).glob("*.cpp"))
                for got, t in TEST_CASE.findall(f.read_text(encoding="utf-8")) if got == name]
        if not any("[cuda]" in t for t in tags):
            problems.append(f"{listing.name}:{n}: no TEST_CASE \"{name}\" tagged [cuda] in tests/{folder}/")
    named = "\n".join(header)
    for folder in ("core", "ops", "dist"):
        for f in sorted((root / folder).rglob("*")):
            if f.suffix in {".cu", ".cuh"} and "__shared__" in f.read_text(encoding="utf-8") and f.name not in named:
                problems.append(f"{f.relative_to(root)} declares __shared__ memory but {listing.name}'s header does "
                                "not name it: add a test case that launches its kernels")
    for p in problems:
        print(p)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
