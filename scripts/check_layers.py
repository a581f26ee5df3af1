#!/usr/bin/python3
"""check_layers.py [ROOT] -- checks the real include and link edges of the shipped code against the
layer table in docs/architecture.md (the fenced block marked `layers`).

Each line of that block is `LAYER -> ALLOWED...`: a layer is a path prefix ending in "/" and
`backends/*/` stands for every plugin folder not listed on its own (each plugin is then a layer of
its own, so plugins cannot reach into each other). A file belongs to the layer with the longest
matching prefix; it may use its own layer and the ones listed. `(nothing)` lists none.

Edges checked:
  * `#include "..."` in C, C++ and CUDA files, resolved against the including file's folder, then
    against every file in the tree that ends with the included path (include directories);
  * `target_link_libraries()` between targets of this project, and `target_include_directories()`
    naming a folder of this project, in CMakeLists.txt and *.cmake files.
Anything under tests/ may use anything; nothing shipped may use tests/. Exits 1 on a violation.
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


def check_includes(root, files, table, errors):
    sources = [f for f in files if f.endswith(SOURCE_SUFFIXES)]
    by_suffix = {}
    for f in sources:
        parts = f.split("/")
        for i in range(len(parts)):
            by_suffix.setdefault("/".join(parts[i:]), []).append(f)
    for f in sources:
        if f.startswith("tests/") or layer_of(f, table)[0] is None:
            continue
        for inc in INCLUDE.findall(read(os.path.join(root, f))):
            direct = os.path.normpath(os.path.join(os.path.dirname(f), inc))
            if os.path.exists(os.path.join(root, direct)):
                candidates = [direct]
            else:
                candidates = by_suffix.get(os.path.normpath(inc), [])
            if not candidates:
                continue  # a system or generated header
            if not any(allowed(f, c, table) for c in candidates):
                errors.append("%s includes \"%s\" (%s): %s may not use %s" %
                              (f, inc, candidates[0], layer_of(f, table)[1], layer_of(candidates[0], table)[1] or candidates[0]))


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
    files = list(walk(root))
    errors = []
    check_includes(root, files, table, errors)
    check_links(root, files, table, errors)
    for e in errors:
        print(e)
    if errors:
        print("check_layers: %d edge(s) against the layer table of docs/architecture.md" % len(errors), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
