#!/usr/bin/env python3
"""Size limits of the Rust sources (issue 46): no file over 700 lines, at most 15 functions
over 100 lines. Generated files (the DCGM bindings) and the fake libraries (crates/fake-*,
test doubles of C APIs) are left out; test code (tests/ and benches/ folders, `tests.rs`
files, a file's `#[cfg(test)] mod` at its end) counts for the file limit, not for the function
limit. Prints what is over; fails past the limits.
Usage: scripts/check-sizes.py [--report]  (--report: print, never fail)
"""
import os
import re
import sys

MAX_FILE_LINES = 700
MAX_FN_LINES = 100
MAX_LONG_FNS = 15
ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")


def sources():
    for dirpath, dirs, files in os.walk(os.path.join(ROOT, "crates")):
        dirs[:] = [d for d in dirs if d not in ("target",)]
        rel_dir = os.path.relpath(dirpath, ROOT)
        if re.match(r"crates/fake-", rel_dir):
            continue
        for f in files:
            if f.endswith(".rs") and not (rel_dir == "crates/dcgm-sys/src" and f == "bindings.rs"):
                yield os.path.join(rel_dir, f)


FN = re.compile(r"^\s*(pub(\([^)]*\))?\s+)?(const\s+)?(async\s+)?(unsafe\s+)?(extern\s+\"C\"\s+)?fn\s+(\w+)")


def code_only(text):
    """The text with comments and the insides of string, raw-string and char literals blanked
    (newlines kept, so line numbers hold): their braces are no blocks. Lifetimes stay code."""
    out, i, n = [], 0, len(text)
    blank = lambda s: "".join("\n" if c == "\n" else " " for c in s)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
        elif text.startswith("/*", i):
            j, depth = i + 2, 1
            while j < n and depth:
                if text.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif text.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
        elif (m := RAW.match(text, i)) and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            close = '"' + m.group(1)
            j = text.find(close, m.end())
            j = n if j < 0 else j + len(close)
        elif c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            j += 1
        elif c == "'" and (m := CHAR.match(text, i)):
            j = m.end()
        else:
            out.append(c)
            i += 1
            continue
        out.append(blank(text[i:j]))
        i = j
    return "".join(out)


RAW = re.compile(r'b?r(#*)"')
CHAR = re.compile(r"'(?:\\(?:x[0-9a-fA-F]{2}|u\{[0-9a-fA-F]{1,6}\}|.)|[^'\\\n])'")


def functions(lines):
    """(name, first line, length) of each fn with a body, by brace depth over `code_only`."""
    code_lines = code_only("\n".join(lines)).split("\n")
    i = 0
    while i < len(lines):
        m = FN.match(code_lines[i])
        if not m:
            i += 1
            continue
        depth, started, j = 0, False, i
        while j < len(lines):
            code = code_lines[j]
            for ch in code:
                if ch == "{":
                    depth += 1
                    started = True
                elif ch == "}":
                    depth -= 1
            if not started and code.rstrip().endswith(";"):
                break  # a declaration without a body
            if started and depth <= 0:
                break
            j += 1
        if started:
            yield m.group(7), i + 1, j - i + 1
        i += 1


long_files, long_fns = [], []
for path in sorted(sources()):
    with open(os.path.join(ROOT, path), encoding="utf-8") as fh:
        lines = fh.read().split("\n")
    n = len(lines) - (1 if lines and lines[-1] == "" else 0)
    if n > MAX_FILE_LINES:
        long_files.append((n, path))
    test_file = re.search(r"(^|/)(tests|benches)(/|$)|(^|/)tests\.rs$", path)
    test_from = next((k for k, line in enumerate(lines) if line.strip() == "#[cfg(test)]"
                      and k + 1 < len(lines) and re.match(r"\s*(pub(\(crate\))?\s+)?mod \w+\s*\{", lines[k + 1])),
                     len(lines))
    for name, start, length in functions(lines):
        if test_file or start - 1 > test_from:
            continue
        if length > MAX_FN_LINES:
            long_fns.append((length, f"{path}:{start} {name}"))

for n, path in sorted(long_files, reverse=True):
    print(f"file over {MAX_FILE_LINES} lines: {path} ({n})")
for n, where in sorted(long_fns, reverse=True):
    print(f"function over {MAX_FN_LINES} lines: {where} ({n})")
print(f"check-sizes: {len(long_files)} files over {MAX_FILE_LINES} lines (limit 0), "
      f"{len(long_fns)} functions over {MAX_FN_LINES} lines (limit {MAX_LONG_FNS})")
within = not long_files and len(long_fns) <= MAX_LONG_FNS
sys.exit(0 if within or "--report" in sys.argv[1:] else 1)
