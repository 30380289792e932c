#!/usr/bin/env python3
"""Fails when launcher/ has a circle of files, an include from a lower folder to a higher
one, or a private header included from outside the files it serves.

usage: check-layers.py SOURCE_ROOT [OBJECT_DIR...]

Two graphs over launcher/'s files, a module being a .c and the .h of the same name
(agent/group.c and agent/group.h are one; rdzv/backend.h alone is one):
- includes: the `#include "..."` lines. A folder includes its own headers, those of a
  folder on a lower layer (LAYERS below) and common/'s; never one above or beside it.
- calls (with OBJECT_DIRs, where the launcher's objects are, as meson names them: the
  source's path with '/' as '_'): module A calls module B when an object of A needs a symbol B's
  object defines (nm). A circle of modules that include or call each other is a failure,
  whatever the headers hide.
ARCHITECTURE.md draws the same layers; a folder on no layer is a failure, so a new one is
placed there and here at once.
"""
import os
import re
import subprocess
import sys
from collections import defaultdict

# Top to bottom; the files at the top of launcher/ are layers of their own (main.c, dry_run.c).
LAYERS = [
    ["main"],
    ["agent", "dry_run"],
    ["spawn"],
    ["rdzv", "output", "fanout"],
    ["diagnose", "config"],
    ["store", "host"],
]
# Headers for some files only (the tests aside): the header, and the prefixes of the files
# that may include it.
PRIVATE = {
    "config/cli.h": ["main.c", "config/cli."],
    "config/flags.h": ["config/"],
    "agent/group.h": ["agent/"],
    "rdzv/backend.h": ["rdzv/coord.", "rdzv/static.", "rdzv/c10d."],
    "rdzv/node.h": ["rdzv/rdzv.", "rdzv/node."],
}

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def layer_name(rel):
    """A launcher/ file's layer: its folder, or its stem at the top ("main", "dry_run")."""
    parts = rel.split("/")
    return parts[0] if len(parts) > 1 else os.path.splitext(parts[0])[0]


def level(name):
    for i, row in enumerate(LAYERS):
        if name in row:
            return i
    return None


def module(rel):
    return os.path.splitext(rel)[0]


def launcher_files(root):
    files = []
    for d, _, names in os.walk(root):
        for n in names:
            if n.endswith((".c", ".h")):
                files.append(os.path.relpath(os.path.join(d, n), root))
    return sorted(files)


def include_edges(root, files, problems):
    edges = set()
    known = set(files)
    for rel in files:
        text = open(os.path.join(root, rel), encoding="utf-8", errors="replace").read()
        here = layer_name(rel)
        for inc in INCLUDE.findall(text):
            beside = os.path.normpath(os.path.join(os.path.dirname(rel), inc))
            target = beside if beside in known else inc if inc in known else None
            if target is None:
                continue  # common/, the system, generated headers
            edges.add((module(rel), module(target)))
            allowed = PRIVATE.get(target)
            if allowed is not None and not any(rel.startswith(p) for p in allowed):
                problems.append(f"{rel}: includes {inc}, which is for {', '.join(allowed)} only")
            there = layer_name(target)
            if here == there:
                continue
            lh, lt = level(here), level(there)
            if lh is None or lt is None:
                problems.append(f"{rel}: includes {inc}: {here if lh is None else there} is on "
                                "no layer (tests/check-layers.py LAYERS)")
            elif lt <= lh:
                problems.append(f"{rel}: includes {inc}, of {there} on "
                                f"{'the same' if lt == lh else 'a higher'} layer")
    for rel in files:
        if level(layer_name(rel)) is None and not any(p.startswith(rel + ":") for p in problems):
            problems.append(f"{rel}: {layer_name(rel)} is on no layer (tests/check-layers.py "
                            "LAYERS)")
    return edges


def call_edges(objdirs, files):
    """Who calls whom, from the objects of the sources in `files` (stale ones ignored)."""
    objects = {rel.replace("/", "_") + ".o": module(rel) for rel in files if rel.endswith(".c")}
    defined, needed = {}, defaultdict(set)
    for name, mod in objects.items():
        found = [os.path.join(d, name) for d in objdirs if os.path.exists(os.path.join(d, name))]
        if not found:
            sys.exit(f"check-layers: no {name} in {', '.join(objdirs)}: are those the "
                     "launcher's objects?")
        path = found[0]
        out = subprocess.run(["nm", path], capture_output=True, text=True, check=True).stdout
        for line in out.splitlines():
            f = line.split()
            if len(f) == 2 and f[0] == "U":
                needed[mod].add(f[1])
            elif len(f) == 3 and f[1] in "TDBR":
                defined[f[2]] = mod
    edges = set()
    for a, syms in needed.items():
        for s in syms:
            b = defined.get(s)
            if b is not None and b != a:
                edges.add((a, b))
    return edges


def circles(edges):
    """Strongly connected components of more than one module (Tarjan), each sorted."""
    graph = defaultdict(set)
    for a, b in edges:
        graph[a].add(b)
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    root = os.path.join(sys.argv[1], "launcher")
    files = launcher_files(root)
    problems = []
    edges = set((a, b) for a, b in include_edges(root, files, problems) if a != b)
    if len(sys.argv) > 2:
        edges |= call_edges(sys.argv[2:], files)
    for circle in circles(edges):
        problems.append("a circle of files: " + " -> ".join(circle + [circle[0]]))
    for p in problems:
        print(p, file=sys.stderr)
    if not problems:
        print(f"check-layers: {len(files)} files, {len(edges)} arrows: no circle, none upward")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
