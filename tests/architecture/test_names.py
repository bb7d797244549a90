#!/usr/bin/env python3
"""One naming rule for test sources (docs/design/testing.md): a file under tests/ that defines test
cases (TEST_CASE, or op cases registered for the op-table tests: register_*_cases) is named
<what>_test.cpp; helpers without test cases (support code, the distributed tests' main and abort
probe) are named for what they are. Lists every file that breaks
the rule and exits 1.

    python3 tests/architecture/test_names.py REPO_ROOT
"""
import re
import sys
from pathlib import Path

TEST_CASE = re.compile(r"^\s*(TEST_CASE|TEMPLATE_TEST_CASE|SCENARIO)\s*\(|register_[a-z_]*cases\(\{", re.M)


def main() -> int:
    root = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parents[2]
    bad = []
    for path in sorted((root / "tests").rglob("*.cpp")):
        text = path.read_text(encoding="utf-8", errors="replace")
        has_cases = TEST_CASE.search(text) is not None
        if has_cases != path.name.endswith("_test.cpp"):
            rel = path.relative_to(root)
            bad.append(f"{rel}: " + ("defines test cases; name it <what>_test.cpp" if has_cases
                                     else "defines no test case; only test sources end in _test.cpp"))
    for line in bad:
        print(line)
    if bad:
        print(f"test_names: {len(bad)} file(s) break the naming rule (docs/design/testing.md)")
        return 1
    print("test_names: every test source is named <what>_test.cpp, and only those")
    return 0


if __name__ == "__main__":
    sys.exit(main())
