#!/usr/bin/python3
"""The config tables (sg_cfg_key_t, lib/cfg.h) against their documentation: for every
backends/<name>/ whose sources hold a table and that has a docs/backends/<name>.md, and for the
gateway's own tables (gateway/**/*.c, lib/**/*.c) against docs/configuration.md (or the page of
their own that PAGES names: docs/rerank.md, docs/fusion.md), the keys of each table and the
keys of the page's `| key | type | default | bounds | ...` table that shares the most of them must
be the same, and each key's row must agree with its entry:

- type: integer, number, boolean, string (a path: "string (path)");
- default: the integer or number, true/false, the enum's choice, the string (or "required");
  a default outside the bounds means "not set" (the plugin decides at start-up) and is not checked;
- bounds: the minimum and maximum of an integer or number, every choice of an enum, the length
  limit of a short string.

Table fragments that several plugins share (SG_*_KEYS(...) macros of the headers under backends/,
e.g. the HTTP engine's keys with per-plugin defaults) are expanded with the plugin's arguments. A
row may document several keys at once ("`a`, `b`" with "x, y" as defaults, "as in serper.md"):
then only the defaults are checked, in order. Also checks that each plugin's create function (the
vtable's .create) is a table read plus what is truly specific: at most 80 lines.
Usage: test_config_docs.py ROOT"""
import glob
import os
import re
import sys

ROOT = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", ".."))
TABLE = re.compile(r"static const sg_cfg_key_t (\w+)\[\] = \{(.*?)\n\};", re.S)
CALL = re.compile(r"\b(SG_CFG_(?:INT|DOUBLE|BOOL|STRING|PATH|ENUM|TEXT|CUSTOM_KEY)|SG_\w+_KEYS)\s*\(")
CHOICES = re.compile(r"const char \*const (\w+)\[\] = \{([^}]*)\};")
DEFINE = re.compile(r"#define (SG_\w+_KEYS)\(([^)]*)\)((?:[^\n]*\\\n)*[^\n]*)")
CREATE_LIMIT = 80
# the gateway's tables documented on a page of their own (the others: docs/configuration.md), the
# prefix their keys have in the page's key column, and the table of the enclosing object whose
# CUSTOM key they replace in the page's table (a fusion route's "fusion" is documented as the
# rows fusion.routes, fusion.method, ... of the route's table)
PAGES = {"rerank_config": ("rerank.md", "", None), "fusion_route_config": ("fusion.md", "", None),
         "fusion_config": ("fusion.md", "fusion.", "fusion_route_config")}
CONSTANTS = {}  # the #define NAME <number> of the scanned headers, for tables that name them


def split_args(text, start):
    """The arguments of the call whose '(' is at text[start - 1]; returns (args, end)."""
    args, depth, cur, i, quote = [], 0, "", start, False
    while i < len(text):
        ch = text[i]
        if quote:
            cur += ch
            if ch == "\\":
                cur += text[i + 1]
                i += 1
            elif ch == '"':
                quote = False
        elif ch == '"':
            quote, cur = True, cur + ch
        elif ch == "(":
            depth, cur = depth + 1, cur + ch
        elif ch == ")":
            if depth == 0:
                args.append(cur.strip())
                return args, i + 1
            depth, cur = depth - 1, cur + ch
        elif ch == "," and depth == 0:
            args.append(cur.strip())
            cur = ""
        else:
            cur += ch
        i += 1
    raise ValueError("unbalanced call")


def c_string(arg):
    if arg == "NULL":
        return None
    parts = re.findall(r'"((?:[^"\\]|\\.)*)"', arg)
    return "".join(p.encode().decode("unicode_escape") for p in parts)


def c_number(arg):
    """An integer or floating constant expression of a table (1 << 24, 64u << 20, 1e6, -1, NAN)."""
    a = re.sub(r"\b[A-Z_][A-Z0-9_]*\b", lambda m: CONSTANTS.get(m.group(0), m.group(0)), arg)
    a = re.sub(r"(?<=[0-9])[uUlL]+\b", "", a.replace("(int64_t)", "").replace("(double)", ""))
    if a.strip() in ("NAN", "-NAN"):
        return float("nan")
    if not re.fullmatch(r"[0-9eE.+\-*<>() ]+", a):
        raise ValueError("not a constant: %s" % arg)
    return eval(a, {"__builtins__": {}})


def shown(v):
    """A number as the docs write it, digits only (1e6 -> 1000000, 0.5 -> 0.5)."""
    if isinstance(v, float) and v == int(v):
        v = int(v)
    return str(v)


SCANNED = ("backends", "gateway", "lib")  # where choice lists, enum constants and shared fragments are looked up


def scanned(pattern):
    for top in SCANNED:
        yield from glob.glob(os.path.join(ROOT, top, "**", pattern), recursive=True)


def header_macros():
    macros = {}
    for path in scanned("*.h"):
        with open(path) as f:
            text = f.read()
        for name, params, body in DEFINE.findall(text):
            macros[name] = ([p.strip() for p in params.split(",")], body.replace("\\\n", " "))
        for name, value in re.findall(r"^#define ([A-Z_][A-Z0-9_]*) ([0-9][0-9.eE]*)[uUlL]*\s*$", text, re.M):
            CONSTANTS.setdefault(name, value)
    return macros


def expand(body, macros):
    """Expands the SG_*_KEYS fragments of a table body (once; fragments do not nest)."""
    out, i = "", 0
    for m in re.finditer(r"\b(SG_\w+_KEYS)\s*\(", body):
        if m.start() < i or m.group(1) not in macros:
            continue
        args, end = split_args(body, m.end())
        params, text = macros[m.group(1)]
        if len(args) != len(params):
            raise ValueError("%s takes %d arguments" % (m.group(1), len(params)))
        for p, a in zip(params, args):
            text = re.sub(r"(?<![\w.\"])%s\b" % re.escape(p), lambda _: a, text)
        out += body[i:m.start()] + text
        i = end
    return out + body[i:]


def code_tables(plugin_dir, macros, choices, recursive=False):
    """Each table of the sources of a folder (and its sub-folders when `recursive`): (name, {key: entry})."""
    tables = []
    pattern = os.path.join(plugin_dir, "**", "*.c") if recursive else os.path.join(plugin_dir, "*.c")
    for path in sorted(glob.glob(pattern, recursive=recursive)):
        with open(path) as f:
            for table, body in TABLE.findall(f.read()):
                keys = {}
                tables.append((table, keys))
                body = expand(body, macros)
                for m in CALL.finditer(body):
                    args, _ = split_args(body, m.end())
                    kind = m.group(1)[len("SG_CFG_"):]
                    if kind == "CUSTOM_KEY":
                        keys[c_string(args[0])] = {"kind": "CUSTOM"}
                        continue
                    e = {"kind": kind}
                    rest = args[3:]
                    if kind in ("INT", "DOUBLE"):
                        e["min"], e["max"], e["def"] = (c_number(a) for a in rest[:3])
                    elif kind == "BOOL":
                        e["def"] = c_number(rest[0])
                    elif kind in ("STRING", "PATH"):
                        e["required"] = c_number(rest[0])
                        e["def"] = c_string(rest[1]) if kind == "STRING" else None
                    elif kind == "ENUM":
                        e["choices"] = choices[rest[0]]
                        i = c_number(rest[1]) if re.fullmatch(r"-?[0-9]+", rest[1]) else choices[rest[1]]
                        e["def"] = e["choices"][i] if i >= 0 else None  # -1: not set (decided at start-up)
                    elif kind == "TEXT":
                        e["def"], e["maxlen"] = c_string(rest[0]) or "", c_number(rest[1])
                    keys[c_string(args[2])] = e
    return tables


def enum_choices():
    found = {}
    for path in scanned("*.c"):
        with open(path) as f:
            for name, body in CHOICES.findall(f.read()):
                found[name] = [c_string(s) for s in re.findall(r'"(?:[^"\\]|\\.)*"', body)]
    for path in scanned("*.[ch]"):
        with open(path) as f:  # enum constants that name a choice: enum { BAL_LEAST_INFLIGHT, ... }
            for body in re.findall(r"\benum\s*\{([^}]*)\}", f.read()):
                v = -1
                for item in body.split(","):
                    m = re.match(r"\s*([A-Z_][A-Z0-9_]*)\s*(?:=\s*([0-9]+))?\s*$", item)
                    if m:
                        v = int(m.group(2)) if m.group(2) else v + 1
                        found.setdefault(m.group(1), v)
    return found


def doc_tables(page):
    """Every `| key | ...` table of the page, as {key: cells}."""
    with open(page) as f:
        lines = f.read().split("\n")
    tables, rows, cols = [], {}, None
    for line in lines:
        if cols is None:
            if re.match(r"^\|\s*key\s*\|", line):
                cols = [c.strip() for c in line.strip().strip("|").split("|")]
                rows = {}
                tables.append(rows)
            continue
        if not line.startswith("|"):
            cols = None
            continue
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", line.strip())[1:-1]]
        if len(cells) < len(cols) or set(cells[0]) <= set("-: "):
            continue
        cell = dict(zip(cols, cells))
        names = re.findall(r"`([^`]+)`", cell["key"])
        if len(names) == 1:
            rows[names[0]] = {"type": cell.get("type", ""), "default": cell.get("default", ""), "bounds": cell.get("bounds", "")}
        else:  # several keys in one row: the defaults in the same order
            defaults = [d.strip() for d in cell.get("default", "").split(",")]
            if re.match(r"as (above|in)", cell.get("default", "")):
                defaults = [cell["default"]] * len(names)
            for i, n in enumerate(names):
                rows[n] = {"group": True, "default": defaults[i] if i < len(defaults) else ""}
    return tables


def normal(text):
    """Digits as the table writes them: 100,000 -> 100000, 10^6 -> 1000000, 2^32 -> 4294967296."""
    text = re.sub(r"(?<=[0-9])[,_](?=[0-9]{3})", "", text)
    return re.sub(r"([0-9]+)\^([0-9]+)", lambda m: str(int(m.group(1)) ** int(m.group(2))), text)


def has_number(text, v):
    return re.search(r"(?<![0-9.])%s(?![0-9])" % re.escape(shown(v)), normal(text)) is not None


TYPES = {"INT": "integer", "DOUBLE": "number", "BOOL": "boolean", "STRING": "string", "TEXT": "string", "ENUM": "string",
         "PATH": "string (path)"}


def check_key(name, k, e, row, where):
    errs = []
    kind = e["kind"]

    def bad(what):
        errs.append("%s: %s%s%s on %s" % (name, k, "" if what.startswith("'") else " ", what, where))

    if kind == "CUSTOM":
        return errs
    d = e.get("def")
    unset = kind in ("INT", "DOUBLE") and not (e["min"] <= d <= e["max"])  # also NAN
    if row.get("group"):
        if re.match(r"as (above|in)", row["default"]):
            return errs
        if kind in ("INT", "DOUBLE") and not unset and not has_number(row["default"], d):
            bad("has the default %s, not in its row's defaults (%s)" % (shown(d), row["default"]))
        if kind == "BOOL" and ("true" if d else "false") not in row["default"]:
            bad("has the default %s, not in its row's defaults" % ("true" if d else "false"))
        return errs
    if not row["type"].startswith(TYPES[kind]):
        bad("is a %s in the table but documented as %r" % (TYPES[kind], row["type"]))
    if kind in ("INT", "DOUBLE"):
        for what, v in (("minimum", e["min"]), ("maximum", e["max"])):
            if not has_number(row["bounds"], v):
                bad("'s %s %s is not in its bounds (%s)" % (what, shown(v), row["bounds"]))
        if not unset and not has_number(row["default"], d):
            bad("'s default %s is not in its default (%s)" % (shown(d), row["default"]))
    elif kind == "BOOL":
        if ("true" if d else "false") not in row["default"]:
            bad("'s default %s is not in its default (%s)" % ("true" if d else "false", row["default"]))
    elif kind == "ENUM":
        if d is not None and d not in row["default"]:
            bad("'s default %s is not in its default (%s)" % (d, row["default"]))
        for ch in e["choices"]:
            if ch not in row["bounds"]:
                bad("'s choice %s is not in its bounds (%s)" % (ch, row["bounds"]))
    elif kind in ("STRING", "PATH", "TEXT"):
        if e.get("required"):
            if "required" not in row["default"]:
                bad("is required but its default says %r" % row["default"])
        elif d is not None and ('""' if d == "" else d) not in row["default"].replace("\\|", "|"):
            bad("'s default %r is not in its default (%s)" % (d, row["default"]))
        if kind == "TEXT" and e["maxlen"] and not has_number(row["bounds"], e["maxlen"]):
            bad("'s length limit %s is not in its bounds (%s)" % (e["maxlen"], row["bounds"]))
    return errs


def create_lengths(plugin_dir):
    """(function, lines) of the create function of each vtable in the plugin's sources."""
    out = []
    for path in sorted(glob.glob(os.path.join(plugin_dir, "*.c"))):
        with open(path) as f:
            text = f.read()
        for fn in re.findall(r"\.create\s*=\s*(\w+)", text):
            m = re.search(r"^(?:static )?sg_status %s\(" % fn, text, re.M)
            if m is None:
                continue
            lines = text[m.start():].split("\n")
            n = next(i for i, line in enumerate(lines) if line == "}") + 1
            out.append((os.path.relpath(path, ROOT), fn, n))
    return out


def check_tables(name, tables, page, errors):
    """Each of `tables` against the table of `page` that shares the most keys with it; returns how many were checked."""
    checked = 0
    where = os.path.relpath(page, ROOT)
    docs = doc_tables(page)
    for table, keys in tables:
        rows = max(docs, key=lambda r: len(set(r) & set(keys)), default={})
        if not set(rows) & set(keys):
            errors.append("%s: no table on %s documents the keys of %s" % (name, where, table))
            continue
        checked += 1
        for k in sorted(set(keys) - set(rows)):
            errors.append("%s: key %s of %s is not on %s" % (name, k, table, where))
        for k in sorted(set(rows) - set(keys)):
            errors.append("%s: key %s is documented on %s but not in %s" % (name, k, where, table))
        for k in sorted(set(keys) & set(rows)):
            errors += check_key(name, k, keys[k], rows[k], where)
    return checked


def main():
    checked, errors = 0, []
    macros, choices = header_macros(), enum_choices()
    for plugin_dir in sorted(glob.glob(os.path.join(ROOT, "backends", "*"))):
        name = os.path.basename(plugin_dir)
        page = os.path.join(ROOT, "docs", "backends", name + ".md")
        tables = code_tables(plugin_dir, macros, choices)
        for path, fn, n in create_lengths(plugin_dir):
            if n > CREATE_LIMIT:
                errors.append("%s: %s is %d lines (at most %d: a config table read plus what is truly specific)" %
                              (path, fn, n, CREATE_LIMIT))
        if not tables or not os.path.exists(page):
            continue
        checked += check_tables(name, tables, page, errors)
    # the gateway's own configuration: the tables of gateway/ and lib/ (cache.redis is read by
    # lib/redis) against docs/configuration.md, or the page of their own that PAGES names
    if not os.path.isdir(os.path.join(ROOT, "gateway")):
        pass  # a tree of plugins only (the self-test's copies)
    else:
        gateway_tables = []
        for top in ("gateway", "lib"):
            gateway_tables += code_tables(os.path.join(ROOT, top), macros, choices, recursive=True)
        if not gateway_tables:
            errors.append("gateway: no config table found under gateway/ (the gateway reads its config through lib/cfg tables)")
        by_page, joined = {}, {}
        for table, keys in gateway_tables:
            page, prefix, into = PAGES.get(table, ("configuration.md", "", None))
            keys = {prefix + k: e for k, e in keys.items()}
            if into is not None:
                joined[into] = (prefix.rstrip("."), keys)
            else:
                by_page.setdefault(page, []).append((table, keys))
        for tables in by_page.values():
            for table, keys in tables:
                if table in joined:
                    key, inner = joined.pop(table)
                    keys.pop(key, None)
                    keys.update(inner)
        for into in joined:
            errors.append("gateway: no table %s to document the keys of its object in" % into)
        for page, tables in sorted(by_page.items()):
            path = os.path.join(ROOT, "docs", page)
            if not os.path.exists(path):
                errors.append("gateway: docs/%s is missing" % page)
            else:
                checked += check_tables("gateway", tables, path, errors)
    for e in errors:
        print(e)
    if checked == 0:
        print("no plugin with both a config table and a doc page was found")
        return 1
    print("%d config table(s) checked against their pages" % checked)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
