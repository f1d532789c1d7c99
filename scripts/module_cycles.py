#!/usr/bin/env python3
"""Import cycles between the modules of a Rust crate, file by file.

Usage: scripts/module_cycles.py CRATE_SRC_DIR [...]   (exit 1 when any crate has a cycle)

A node is a source file (its module path: `pipeline/answer/mod.rs` is `pipeline::answer`). An
edge A -> B is any path in A (a `use` or an inline `crate::...`, `super::...`, `self::...`
path) naming B or something inside B. A module and its own submodules are one unit (a folder
module declares its children and re-exports them; a child reads its parent's items), so edges
between a module and its ancestors or descendants are not counted; edges between siblings,
cousins and unrelated modules are. Test code (everything after a file's first `#[cfg(test)]`)
and comments are ignored.
"""
import re
import sys
from pathlib import Path

PATH = re.compile(r"\b(crate|super|self)((?:::[A-Za-z_][A-Za-z0-9_]*)+|::\{)")
USE_BLOCK = re.compile(r"\buse\s+(crate|super|self)::([^;]*);", re.S)


def module_of(src: Path, f: Path) -> tuple:
    rel = f.relative_to(src).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "mod" or (len(parts) == 1 and parts[0] in ("lib", "main")):
        parts = parts[:-1]
    return tuple(parts)


def strip(text: str) -> str:
    text = text.split("#[cfg(test)]", 1)[0]
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    text = re.sub(r"//[^\n]*", "", text)
    text = re.sub(r'"(?:\\.|[^"\\])*"', '""', text)
    return text


def expand_use(tail: str) -> list:
    """`a::{b, c::{d, e}}` -> ['a::b', 'a::c::d', 'a::c::e'] (enough for module resolution)."""
    tail = re.sub(r"\s+", "", tail)
    out = []

    def walk(prefix: str, s: str):
        depth, start, items = 0, 0, []
        for i, ch in enumerate(s):
            if ch == "{":
                depth += 1
            elif ch == "}":
                depth -= 1
            elif ch == "," and depth == 0:
                items.append(s[start:i])
                start = i + 1
        items.append(s[start:])
        for it in items:
            if not it:
                continue
            if "{" in it:
                head, rest = it.split("{", 1)
                walk(prefix + head, rest[:-1])
            else:
                out.append(prefix + it.split(" as ")[0])

    walk("", tail)
    return out


def resolve(modules: set, base: tuple, segs: list) -> tuple:
    """The longest known module that the path base::segs names."""
    path = list(base)
    best = None
    for s in segs:
        if s == "super":
            path = path[:-1]
            continue
        if s == "self":
            continue
        path.append(s)
        if tuple(path) in modules:
            best = tuple(path)
    return best


def graph(src: Path) -> dict:
    files = sorted(src.rglob("*.rs"))
    mods = {module_of(src, f): f for f in files}
    modules = set(mods)
    edges = {m: set() for m in modules}
    for m, f in mods.items():
        # `self` is this module; `super` its parent (for mod.rs/lib.rs the module is the folder).
        text = strip(f.read_text())
        paths = []
        for kind, tail in USE_BLOCK.findall(text):
            paths += [(kind, p.split("::")) for p in expand_use(tail)]
        body = USE_BLOCK.sub("", text)
        for kind, tail in PATH.findall(body):
            paths.append((kind, [s for s in tail.split("::") if s and s != "{"]))
        for kind, segs in paths:
            base = () if kind == "crate" else (m[:-1] if kind == "super" else m)
            target = resolve(modules, base, segs)
            if target is None or target == m:
                continue
            # A module and its ancestors/descendants are one unit.
            if target[: len(m)] == m or m[: len(target)] == target:
                continue
            edges[m].add(target)
    return edges


def cycles(edges: dict) -> list:
    index, low, stack, on, out, n = {}, {}, [], set(), [], [0]

    def strong(v):
        index[v] = low[v] = n[0]
        n[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(edges[v]):
            if w not in index:
                strong(w)
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
    for v in sorted(edges):
        if v not in index:
            strong(v)
    return out


def main() -> int:
    bad = 0
    for d in sys.argv[1:]:
        src = Path(d)
        found = cycles(graph(src))
        for comp in found:
            bad += 1
            names = ", ".join("::".join(c) or "crate" for c in comp)
            print(f"{d}: import cycle among {len(comp)} modules: {names}")
        if not found:
            print(f"{d}: no import cycles ({len(graph(src))} modules)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
