#!/usr/bin/env python3
"""Every test that touches a GPU when one is present carries [cuda] (docs/design/testing.md).

The GPU check (tests/gpu/run.sh) runs only [cuda] tests outside tests/cuda, so a test that uses the
device when there is one but lacks the tag is never run on a GPU. This finds such tests without a
GPU or a build, by a heuristic over the test sources (tests/**/*.cpp):

  1. Markers: Device::cuda, kGpu, cuda_is_available, cuda_device_count, cuda::device_count,
     PRECIS_REQUIRE_CUDA, PRECIS_CUDA_PART, in code (comments and string literals are ignored).
  2. Helpers, same file only: a namespace-scope declaration (function, variable, class, lambda,
     #define) whose text holds a marker or a tainted name is tainted, to a fixed point; its name
     becomes a marker for that file.
  3. Registries, same folder (one executable): a tainted declaration that calls
     register_grad_cases / register_error_cases puts a GPU case in that registry, so
     grad_cases() / error_cases() become markers for every file of the folder.
  4. A TEST_CASE (TEMPLATE_TEST_CASE, TEST_CASE_METHOD, SCENARIO) whose arguments or body hold a
     marker must have [cuda] in its tag string, on the TEST_CASE line or the next, so that the
     GPU check's `grep -rl '"[^"]*\\[cuda\\][^"]*"' tests` finds its folder.
  5. That grep (tests/gpu/run.sh, cuda_test_targets: *.cpp, tests/dist left out) selects the test
     executables the GPU check runs with the [cuda] filter and --warn NoTests: each folder it
     selects must hold a [cuda] test case (tests/cuda runs whole), or that run fails.
  6. PRECIS_REQUIRE_CUDA() is the first statement of the test case that uses it: ctest lists a test
     that printed its warning as skipped (tests/CMakeLists.txt), which is only true when nothing
     ran before it.

A flagged test that does not touch a device (it parses Device values, or checks only the absence
of a GPU, or drives a fake device) goes in ALLOWED below with the reason; an entry that no longer
matches a flagged test fails too, so the list cannot go stale.

    cuda_tags.py REPO_ROOT           check; exit 1 listing each untagged test
    cuda_tags.py REPO_ROOT --list    also print every flagged test and whether it is tagged
"""
import re
import sys
from pathlib import Path

MARKERS = ["Device::cuda", "kGpu", "cuda_is_available", "cuda_device_count", "cuda::device_count",
           "PRECIS_REQUIRE_CUDA", "PRECIS_CUDA_PART"]
REGISTRIES = {"register_grad_cases": "grad_cases", "register_error_cases": "error_cases"}
GREP = re.compile(r'"[^"]*\[cuda\][^"]*"')  # tests/gpu/run.sh's cuda_test_targets, line by line
TEST_MACROS = ("TEST_CASE", "TEMPLATE_TEST_CASE", "TEST_CASE_METHOD", "SCENARIO")
# (file relative to tests/, test name or "*" for every flagged test of the file) -> why no [cuda].
# tests/dist (run under mpirun, not by the GPU check) is checked all the same.
ALLOWED = {
    # tests/cuda: tests that only check the absence of a GPU, or never reach a device.
    ("cuda/memory_test.cpp", "pin_memory without a usable CUDA device is a DeviceError naming the cause"):
        "checks the absence of a GPU; with one it returns after comparing pinned_memory_available()",
    ("cuda/memory_test.cpp", "DataLoader pin_memory without a usable CUDA device warns once and yields ordinary batches"):
        "checks the absence of a GPU; returns at once with one",
    ("cuda/cuda_direct_allocator_test.cpp", "an invalid PRECIS_CUDA_ALLOCATOR makes every CUDA allocation throw ValueError"):
        "hidden, run by ctest with PRECIS_CUDA_ALLOCATOR=bogus: the variable is refused before any device is looked at",
    ("core/direct_device_allocator_test.cpp", "*"): "a fake device named cuda:0 over host memory; no CUDA call",
    ("core/dtype_device_test.cpp", "*"): "parses and prints Device values; no device is used",
    ("core/device_caching_allocator_test.cpp", "*"): "a fake device named cuda:0 over host memory; no CUDA call",
    ("core/side_stream_test.cpp", "*"): "a simulated stream schedule on a fake cuda:0; no CUDA call",
    ("tensor/safetensors_test.cpp", "a failed save leaves the previous file intact and no temporary file"):
        "a fake cuda tensor over host memory, only in a build without a device copy; never a GPU",
    ("amp/autocast_ops_test.cpp", "every op of the table has an autocast entry or a listed exemption"):
        "builds the op table (whose to_device entry copies to cuda:0) but runs no entry",
    ("fake_cuda/sync_debug_test.cpp", "*"):
        "the fake CUDA device over host memory (tests/support/fake_cuda, selected by PRECIS_CUDA_BACKEND); no GPU",
    ("fake_cuda/scaler_device_test.cpp", "*"):
        "the fake CUDA device over host memory (tests/support/fake_cuda, selected by PRECIS_CUDA_BACKEND); no GPU",
    ("fake_cuda/trainer_sync_test.cpp", "*"):
        "the fake CUDA device over host memory (tests/support/fake_cuda, selected by PRECIS_CUDA_BACKEND); no GPU",
    ("fake_cuda/device_mismatch_test.cpp", "*"):
        "the fake CUDA device over host memory (tests/support/fake_cuda, selected by PRECIS_CUDA_BACKEND); no GPU",
    ("fake_cuda/conv_layout_test.cpp", "*"):
        "the fake CUDA device over host memory (tests/support/fake_cuda, selected by PRECIS_CUDA_BACKEND); no GPU",
    ("fake_cuda/device_assert_test.cpp", "*"):
        "the fake CUDA device over host memory (tests/support/fake_cuda, selected by PRECIS_CUDA_BACKEND); no GPU",
    ("fake_cuda/step_sync_test.cpp", "*"):
        "the fake CUDA device over host memory (tests/support/fake_cuda, selected by PRECIS_CUDA_BACKEND); no GPU",
    ("fake_cuda/graph_test.cpp", "*"):
        "the fake CUDA device over host memory (tests/support/fake_cuda, selected by PRECIS_CUDA_BACKEND); no GPU",
    ("fake_cuda/composed_ops_test.cpp", "*"):
        "the fake CUDA device over host memory (tests/support/fake_cuda, selected by PRECIS_CUDA_BACKEND); no GPU",
}
LITERAL = re.compile(r'R"([^(\s"]*)\((?:.|\n)*?\)\1"|"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'|//[^\n]*|/\*(?:.|\n)*?\*/')


def word(label: str):
    """(label, pattern): the identifier (or call, "f()") as a whole word of code."""
    ident = label[:-2] if label.endswith("()") else label
    return label, re.compile(r"\b" + re.escape(ident) + r"\b" + (r"\s*\(" if label.endswith("()") else ""))


def blank(text: str) -> str:
    return re.sub(r"[^\n]", " ", text)


def strip(src: str):
    """(code, literals): comments blanked in both; string and char contents blanked in code."""
    code, lits, pos = [], [], 0
    for m in LITERAL.finditer(src):
        code.append(src[pos:m.start()]); lits.append(src[pos:m.start()])
        tok = m.group(0)
        if tok.startswith("/"):
            code.append(blank(tok)); lits.append(blank(tok))
        else:
            q = tok.index(tok[-1]) + 1 if not tok.startswith("R") else tok.index("(") + 1
            code.append(tok[:q] + blank(tok[q:-1]) + tok[-1]); lits.append(tok)
        pos = m.end()
    code.append(src[pos:]); lits.append(src[pos:])
    return "".join(code), "".join(lits)


def match_close(code: str, i: int) -> int:
    """Index of the bracket closing the one at code[i]."""
    open_, close = code[i], {"(": ")", "{": "}", "[": "]"}[code[i]]
    depth = 0
    for j in range(i, len(code)):
        if code[j] == open_:
            depth += 1
        elif code[j] == close:
            depth -= 1
            if depth == 0:
                return j
    return len(code) - 1


def declared_name(chunk: str):
    t = chunk.strip()
    t = re.sub(r"^(template\s*<(?:[^<>]|<[^<>]*>)*>\s*)+", "", t)
    t = re.sub(r"^((static|inline|constexpr|const|extern|\[\[\w+\]\])\s+)+", "", t)
    m = re.match(r"(?:typedef\s+)?(?:struct|class|union|enum(?:\s+class)?)\s+(\w+)", t)
    if m:
        return m.group(1)
    m = re.match(r"using\s+(\w+)\s*=", t)
    if m:
        return m.group(1)
    m = re.search(r"[=({]", t)
    if m and not t.startswith(TEST_MACROS):
        ids = re.findall(r"\w+", t[:m.start()])
        if ids:
            return ids[-1]
    return None


def chunks(code: str):
    """Namespace-scope declarations: (name, start, end). Namespace braces are transparent."""
    out = []
    for m in re.finditer(r"^[ \t]*#[ \t]*define[ \t]+(\w+)(?:[^\n]*\\\n)*[^\n]*", code, re.M):
        out.append((m.group(1), m.start(), m.end()))
    code = re.sub(r"^[ \t]*#(?:[^\n]*\\\n)*[^\n]*", lambda m: blank(m.group(0)), code, flags=re.M)
    start, i, n = 0, 0, len(code)
    while i < n:
        c = code[i]
        if c == "{":
            head = code[start:i]
            if re.fullmatch(r"\s*(inline\s+)?namespace\b[^;{}]*", head) or re.fullmatch(r'\s*extern\s+"\s*"\s*', head):
                start = i + 1
                i += 1
                continue
            i = match_close(code, i) + 1
            if not re.search(r"=\s*$|\(\s*$|,\s*$|\breturn\s*$", head):  # a body, not an initializer
                out.append((declared_name(code[start:i]), start, i))
                start = i
            continue
        if c == "(" or c == "[":
            i = match_close(code, i) + 1
            continue
        if c == ";":
            out.append((declared_name(code[start:i]), start, i))
            start = i + 1
        elif c == "}":  # closes a namespace
            start = i + 1
        i += 1
    return [(name, s, e) for name, s, e in out if name]


def test_cases(code: str, lits: str):
    """(name, tags, line, tag line, start, end) of each test case."""
    out = []
    for m in re.finditer(r"\b(" + "|".join(TEST_MACROS) + r")\s*\(", code):
        if code[:m.start()].rstrip().endswith("define"):
            continue
        lp = m.end() - 1
        rp = match_close(code, lp)
        strings = [(s.group(0)[1:-1], s.start()) for s in re.finditer(r'"(?:\\.|[^"\\\n])*"', lits[lp:rp])]
        body = code.find("{", rp)
        end = match_close(code, body) if body >= 0 else rp
        name = strings[0][0] if strings else "?"
        tags, tag_at = (strings[1][0], lp + strings[1][1]) if len(strings) > 1 else ("", lp)
        line = code.count("\n", 0, m.start()) + 1
        out.append((name, tags, line, code.count("\n", 0, tag_at) + 1, m.start(), end + 1))
    return out


def main() -> int:
    root = Path(sys.argv[1]).resolve() / "tests"
    list_all = "--list" in sys.argv[2:]
    files, grepped = {}, set()
    for p in sorted(root.rglob("*.cpp")):
        rel = p.relative_to(root).as_posix()
        raw = p.read_text(encoding="utf-8", errors="replace")
        files[rel] = strip(raw)
        if any(GREP.search(line) for line in raw.splitlines()):
            grepped.add(rel.split("/")[0])

    # Per file: the tainted names (rule 2); per folder: the registries holding a GPU case (rule 3).
    tainted, folder_markers = {}, {}
    for rel, (code, _) in files.items():
        decls = [(name, code[s:e]) for name, s, e in chunks(code)
                 if not code[s:e].lstrip().startswith(TEST_MACROS)]
        pats = [word(m) for m in MARKERS]
        names = set()
        changed = True
        while changed:
            changed = False
            for name, text in decls:
                if name not in names and any(p.search(text) for _, p in pats):
                    names.add(name)
                    pats.append(word(name))
                    changed = True
                    for reg, use in REGISTRIES.items():
                        if re.search(r"\b" + reg + r"\b", text):
                            folder_markers.setdefault(rel.split("/")[0], set()).add(use + "()")
        tainted[rel] = pats

    failures, used_allowed, tagged_folders = [], set(), set()
    for rel, (code, lits) in files.items():
        pats = tainted[rel] + [word(u) for u in sorted(folder_markers.get(rel.split("/")[0], ()))]
        for name, tags, line, tag_line, s, e in test_cases(code, lits):
            if "[cuda]" in tags:
                tagged_folders.add(rel.split("/")[0])
            body = code.find("{", code.find(")", s), e)
            if re.search(r"\bPRECIS_REQUIRE_CUDA\b", code[s:e]) and \
                    not code[body + 1:e].lstrip().startswith("PRECIS_REQUIRE_CUDA"):
                failures.append(f"tests/{rel}:{line}: {name!r}: PRECIS_REQUIRE_CUDA() must be the test's first "
                                "statement (ctest reports a test that printed its skip as skipped, so nothing may run "
                                "before it)")
            hits = sorted({label for label, p in pats if p.search(code[s:e])})
            if not hits:
                continue
            tagged = "[cuda]" in tags
            key = next((k for k in ((rel, name), (rel, "*")) if k in ALLOWED), None)
            where = f"tests/{rel}:{line}"
            if list_all:
                state = "tagged" if tagged else ("allowed: " + ALLOWED[key] if key else "UNTAGGED")
                print(f"{where}: {name!r}: {state} (via {', '.join(hits)})")
            if tagged:
                if tag_line - line > 1:
                    failures.append(f"{where}: {name!r}: its [cuda] tag string is on line {tag_line}; put it on the "
                                    "TEST_CASE line or the next, where tests/gpu/run.sh's grep looks")
                continue
            if key:
                used_allowed.add(key)
                continue
            failures.append(f"{where}: {name!r} touches a GPU when one is present (via {', '.join(hits)}) but its "
                            f"tags {tags!r} lack [cuda]: add it (and PRECIS_REQUIRE_CUDA or PRECIS_CUDA_PART for the "
                            "GPU part), or list it in ALLOWED in tests/architecture/cuda_tags.py with the reason")
    selected = grepped - {"dist"}
    if list_all:
        print("the GPU check runs with [cuda]: " + " ".join(f"precis_{f}_tests" for f in sorted(selected)))
    for folder in sorted(selected - tagged_folders - {"cuda"}):
        failures.append(f"tests/{folder}: a \"[cuda]\" string makes tests/gpu/run.sh run precis_{folder}_tests with the "
                        "[cuda] filter, but no test case there is tagged [cuda]: that run fails (--warn NoTests)")
    for folder in sorted(tagged_folders - grepped):
        failures.append(f"tests/{folder}: [cuda] test cases that tests/gpu/run.sh's grep does not find")
    for key in sorted(set(ALLOWED) - used_allowed):
        failures.append(f"ALLOWED entry {key} matches no untagged test flagged here: remove it")
    for f in failures:
        print(f)
    if failures:
        print(f"cuda_tags: {len(failures)} problem(s) (docs/design/testing.md: every test that touches a GPU carries [cuda])")
        return 1
    print(f"cuda_tags: ok ({len(files)} files; {len(ALLOWED)} allowed)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
