#!/usr/bin/env python3
"""The binary's modules form a layered graph: no import circle, nothing imports back up.

Reads every `crate::NAME` path in crates/exporter/src (use lines and inline paths alike), groups
files by their top-level module (collectors/probes.rs belongs to `collectors`), and fails when
- a module names an item of the crate root (main.rs): wiring is the root's, nothing runs back
  up to it;
- the graph between top-level modules has a cycle (printed).
A top-level module's own file using `super::` (the root) counts as naming the root.
Test code (`#[cfg(test)] mod tests` blocks and `tests.rs` files) is left out: tests may reach
anywhere. Prints the layers, lowest first. Usage: scripts/check-module-graph.py [SRC_DIR]
"""
import os
import re
import sys

SRC = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
    os.path.dirname(__file__), "..", "crates", "exporter", "src")
ROOT = "main.rs"


def strip_tests(text):
    """The text without `#[cfg(test)]` items (a module block or one item)."""
    out, i = [], 0
    while True:
        j = text.find("#[cfg(test)]", i)
        if j < 0:
            out.append(text[i:])
            return "".join(out)
        out.append(text[i:j])
        k = text.find("{", j)
        semi = text.find(";", j)
        if semi >= 0 and (k < 0 or semi < k):
            i = semi + 1  # `#[cfg(test)] mod tests;` or a one-line item
            continue
        depth, m = 0, k
        while m < len(text):
            if text[m] == "{":
                depth += 1
            elif text[m] == "}":
                depth -= 1
                if depth == 0:
                    break
            m += 1
        i = m + 1


modules = {}
for dirpath, _, files in os.walk(SRC):
    for f in files:
        if not f.endswith(".rs"):
            continue
        rel = os.path.relpath(os.path.join(dirpath, f), SRC)
        if rel == ROOT:
            top = "<root>"
        else:
            top = rel.split(os.sep)[0].removesuffix(".rs")
        if f == "tests.rs" or f.endswith("_tests.rs"):
            continue
        with open(os.path.join(dirpath, f), encoding="utf-8") as fh:
            modules.setdefault(top, []).append((rel, strip_tests(fh.read())))

names = set(modules) - {"<root>"}
edges = {m: set() for m in modules}
back_up = []
for top, files in modules.items():
    for rel, text in files:
        # In a top-level module's own file (`config.rs`, `collectors/mod.rs`), `super` is the
        # crate root.
        own_file = os.sep not in rel or rel.endswith(os.sep + "mod.rs")
        if top != "<root>" and own_file and re.search(r"\bsuper::", text):
            back_up.append(f"{rel}: super:: names the crate root")
        for name in re.findall(r"\bcrate::(\w+)", text):
            if name in names:
                if name != top:
                    edges[top].add(name)
            elif top != "<root>":
                back_up.append(f"{rel}: crate::{name} is an item of the crate root")
        if top == "<root>":
            # The root names its modules without `crate::`.
            edges[top].update(n for n in names if re.search(rf"\b{n}::", text))
        for group in re.findall(r"\buse crate::\{([^}]*)\}", text):
            for name in re.findall(r"(?:^|,)\s*(\w+)", group):
                if name in names and name != top:
                    edges[top].add(name)

status = 0
for line in back_up:
    print(f"check-module-graph: {line}", file=sys.stderr)
    status = 1

# Cycles: depth-first search, reporting each back edge's cycle.
state, stack, cycles = {}, [], []


def visit(m):
    state[m] = "open"
    stack.append(m)
    for n in sorted(edges.get(m, ())):
        if state.get(n) == "open":
            cycles.append(stack[stack.index(n):] + [n])
        elif n not in state:
            visit(n)
    stack.pop()
    state[m] = "done"


for m in sorted(edges):
    if m not in state:
        visit(m)
for c in cycles:
    print("check-module-graph: import circle: " + " -> ".join(c), file=sys.stderr)
    status = 1

if status == 0:
    # Layers: a module sits one above the highest module it imports.
    level = {}

    def depth(m):
        if m not in level:
            level[m] = 1 + max((depth(n) for n in edges[m]), default=-1)
        return level[m]

    for m in edges:
        depth(m)
    for lv in range(max(level.values()) + 1):
        print(f"layer {lv}: " + ", ".join(sorted(m for m in level if level[m] == lv)))
    print(f"check-module-graph: {len(modules)} modules, {sum(map(len, edges.values()))} imports, no circle, nothing imports the root")
sys.exit(status)
