#!/usr/bin/python3
"""check_layers.py [ROOT] -- checks the real include and link edges of the shipped code against the
layer table in docs/architecture.md (the fenced block marked `layers`).

Each line of that block is `LAYER -> ALLOWED...`: a layer is a path prefix ending in "/" (or one file) and
`backends/*/` stands for every plugin folder not listed on its own (each plugin is then a layer of
its own, so plugins cannot reach into each other). A file belongs to the layer with the longest
matching prefix; it may use its own layer and the ones listed. `(nothing)` lists none.

Edges checked:
  * `#include "..."` in C, C++ and CUDA files, resolved against the including file's folder, then
    against every file in the tree that ends with the included path (include directories);
  * `target_link_libraries()` between targets of this project, and `target_include_directories()`
    naming a folder of this project, in CMakeLists.txt and *.cmake files.
Anything under tests/ may use anything; nothing shipped may use tests/.

Inside gateway/ the rooms (gateway/http/, gateway/pipeline/, ...) are layers of their own in the
same table, and one more rule holds: no circle of includes among gateway/ units. A unit is a
source's path without its extension (gateway/pipeline/query.c and query.h are the unit
gateway/pipeline/query); "a.c or a.h includes b.h" is the edge a -> b. Every strongly connected
set of more than one unit is a circle.

Known exceptions, while they are being removed, are listed in two more fenced blocks of
docs/architecture.md: `layers-known` (lines `FILE -> INCLUDED FILE`) and `circles-known` (one
line per allowed circle: its units, separated by spaces; a circle found must lie inside one of
them). An entry that no longer matches anything is an error too, so the lists only shrink.
Exits 1 on a violation.
"""
import os
import re
import sys

SOURCE_SUFFIXES = (".c", ".h", ".cc", ".cpp", ".cu", ".cuh")
SKIP_DIRS = {".git", ".cache", "build", "data", "node_modules", "__pycache__"}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def read(path):
    with open(path, encoding="utf-8", errors="replace") as f:
        return f.read()


def load_table(root):
    text = read(os.path.join(root, "docs", "architecture.md"))
    m = re.search(r"^```layers\n(.*?)^```", text, re.S | re.M)
    if not m:
        sys.exit("check_layers: docs/architecture.md has no ```layers block")
    table = {}
    for line in m.group(1).splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        layer, _, allowed = line.partition("->")
        layer = layer.strip()
        targets = [] if allowed.strip() in ("", "(nothing)") else allowed.split()
        table[layer] = targets
    return table


def load_known(root):
    """The `layers-known` edges (a set of (src, dst)) and `circles-known` unit sets (a list)."""
    text = read(os.path.join(root, "docs", "architecture.md"))
    edges, circles = set(), []
    m = re.search(r"^```layers-known\n(.*?)^```", text, re.S | re.M)
    for line in (m.group(1).splitlines() if m else []):
        line = line.split("#", 1)[0].strip()
        if line:
            src, _, dst = line.partition("->")
            edges.add((src.strip(), dst.strip()))
    m = re.search(r"^```circles-known\n(.*?)^```", text, re.S | re.M)
    for line in (m.group(1).splitlines() if m else []):
        line = line.split("#", 1)[0].strip()
        if line:
            circles.append(frozenset(line.split()))
    return edges, circles


def layer_of(rel, table):
    """The layer (table key, or the concrete plugin folder for backends/*/) of a path, or None."""
    best = None
    for layer in table:
        if "*" in layer:
            continue
        if rel.startswith(layer) and (best is None or len(layer) > len(best)):
            best = layer
    if best is not None:
        return best, best
    if "backends/*/" in table:
        parts = rel.split("/")
        if len(parts) > 2 and parts[0] == "backends":
            return "backends/*/", "backends/%s/" % parts[1]
    return None, None


def allowed(src_rel, dst_rel, table):
    if dst_rel.startswith("tests/") and not src_rel.startswith("tests/"):
        return False
    key, concrete = layer_of(src_rel, table)
    if key is None or src_rel.startswith("tests/"):
        return True  # not layered (tests, top-level files)
    dkey, dconcrete = layer_of(dst_rel, table)
    if dconcrete == concrete:
        return True
    for a in table[key]:
        if a == "*":
            return True
        if dkey is not None and (a == dkey or a == dconcrete):
            return True
    return False


def walk(root):
    for d, dirs, files in os.walk(root):
        dirs[:] = sorted(x for x in dirs if x not in SKIP_DIRS and not x.startswith("build-"))
        for name in sorted(files):
            yield os.path.relpath(os.path.join(d, name), root)


def include_edges(root, files):
    """Yields (file, include text, [candidate files]) for every project include of a source."""
    sources = [f for f in files if f.endswith(SOURCE_SUFFIXES)]
    by_suffix = {}
    for f in sources:
        parts = f.split("/")
        for i in range(len(parts)):
            by_suffix.setdefault("/".join(parts[i:]), []).append(f)
    for f in sources:
        for inc in INCLUDE.findall(read(os.path.join(root, f))):
            direct = os.path.normpath(os.path.join(os.path.dirname(f), inc))
            if os.path.exists(os.path.join(root, direct)):
                candidates = [direct]
            else:
                candidates = by_suffix.get(os.path.normpath(inc), [])
            if candidates:  # else a system or generated header
                yield f, inc, candidates


def check_includes(root, files, table, known, used, errors):
    for f, inc, candidates in include_edges(root, files):
        if f.startswith("tests/") or layer_of(f, table)[0] is None:
            continue
        if any(allowed(f, c, table) for c in candidates):
            continue
        if (f, candidates[0]) in known:
            used.add((f, candidates[0]))
            continue
        errors.append("%s includes \"%s\" (%s): %s may not use %s" %
                      (f, inc, candidates[0], layer_of(f, table)[1], layer_of(candidates[0], table)[1] or candidates[0]))


def circles(graph):
    """The strongly connected sets of more than one node of `graph` (node -> set of nodes), each
    sorted, found by Tarjan's algorithm (iterative)."""
    index, low, on_stack, stack, found = {}, {}, set(), [], []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, it = work[-1]
            nxt = next(it, None)
            if nxt is not None:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph.get(nxt, ())))))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                scc = []
                while True:
                    x = stack.pop()
                    on_stack.discard(x)
                    scc.append(x)
                    if x == node:
                        break
                if len(scc) > 1:
                    found.append(sorted(scc))
    return found


def check_circles(root, files, known, used, errors):
    """No circle of includes among gateway/ units but the known ones."""
    graph = {}
    for f, _, candidates in include_edges(root, files):
        if not f.startswith("gateway/"):
            continue
        a = os.path.splitext(f)[0]
        graph.setdefault(a, set())
        for c in candidates:
            if c.startswith("gateway/"):
                b = os.path.splitext(c)[0]
                graph.setdefault(b, set())
                if b != a:
                    graph[a].add(b)
    for scc in circles(graph):
        names = frozenset(scc)
        home = [k for k in known if names <= k]
        if home:
            used.update(home)
            continue
        errors.append("include circle among gateway/ units (each reaches every other): %s" % " ".join(scc))


def cmake_args(text, command):
    for m in re.finditer(r"\b%s\s*\(([^)]*)\)" % command, text, re.S):
        yield m.group(1).split()


def check_links(root, files, table, errors):
    lists = [f for f in files if os.path.basename(f) == "CMakeLists.txt" or f.endswith(".cmake")]
    targets = {}
    for f in lists:
        text = re.sub(r"#[^\n]*", "", read(os.path.join(root, f)))
        for cmd in ("add_library", "add_executable", "sg_add_plugin"):
            for args in cmake_args(text, cmd):
                if args and not args[0].startswith("$"):
                    targets.setdefault(args[0], os.path.dirname(f) + "/")
    for f in lists:
        if f.startswith("tests/"):
            continue
        here = os.path.dirname(f) + "/"
        text = re.sub(r"#[^\n]*", "", read(os.path.join(root, f)))
        for args in cmake_args(text, "target_link_libraries"):
            src = targets.get(args[0] if args else "")
            if src is None:
                continue
            for lib in args[1:]:
                dst = targets.get(lib)
                if dst is not None and not allowed(src, dst, table):
                    errors.append("%s: target %s (%s) links %s (%s)" % (f, args[0], src, lib, dst))
        for args in cmake_args(text, "target_include_directories"):
            src = targets.get(args[0] if args else "")
            if src is None:
                continue
            for d in args[1:]:
                d = d.replace("${CMAKE_CURRENT_SOURCE_DIR}", here.rstrip("/")).replace("${CMAKE_CURRENT_LIST_DIR}", here.rstrip("/"))
                if not d.startswith("${PROJECT_SOURCE_DIR}/") and not d.startswith(here.rstrip("/")):
                    continue
                rel = d.replace("${PROJECT_SOURCE_DIR}/", "").rstrip("/") + "/"
                if not allowed(src, rel, table):
                    errors.append("%s: target %s (%s) includes the folder %s" % (f, args[0], src, rel))


def main():
    root = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), ".."))
    table = load_table(root)
    known_edges, known_circles = load_known(root)
    files = list(walk(root))
    errors, used = [], set()
    check_includes(root, files, table, known_edges, used, errors)
    check_links(root, files, table, errors)
    check_circles(root, files, known_circles, used, errors)
    for e in sorted(known_edges - used):
        errors.append("layers-known lists %s -> %s, which is no longer an edge against the table: remove it" % e)
    for c in known_circles:
        if c not in used:
            errors.append("circles-known lists %s, which is no longer (part of) a circle: remove it" % " ".join(sorted(c)))
    for e in errors:
        print(e)
    if errors:
        print("check_layers: %d violation(s) of the layer table and rules of docs/architecture.md" % len(errors), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
