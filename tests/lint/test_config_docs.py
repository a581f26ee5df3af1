#!/usr/bin/python3
"""The plugins' config tables (sg_cfg_key_t, lib/cfg.h) against their documentation: for every
backends/<name>/ whose sources hold a table and that has a docs/backends/<name>.md, the keys of the
table and the keys of the page's first `| key | ...` table must be the same, and every integer
key's bounds and default must appear in its row. Usage: test_config_docs.py ROOT"""
import glob
import os
import re
import sys

ROOT = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", ".."))
TABLE = re.compile(r"static const sg_cfg_key_t (\w+)\[\] = \{(.*?)\n\};", re.S)
ENTRY = re.compile(r'SG_CFG_(INT|DOUBLE|BOOL|STRING|PATH|ENUM)\(\s*\w+,\s*\w+,\s*"([^"]+)"([^)]*)\)|SG_CFG_CUSTOM_KEY\("([^"]+)"\)')


def code_tables(plugin_dir):
    keys = {}
    for path in sorted(glob.glob(os.path.join(plugin_dir, "*.c"))):
        with open(path) as f:
            for _, body in TABLE.findall(f.read()):
                for kind, key, args, custom in ENTRY.findall(body):
                    if custom:
                        keys[custom] = ("CUSTOM", [])
                    else:
                        keys[key] = (kind, [a.strip() for a in args.split(",") if a.strip()])
    return keys


def doc_rows(page):
    with open(page) as f:
        lines = f.read().split("\n")
    rows, inside = {}, False
    for line in lines:
        if re.match(r"^\|\s*key\s*\|", line):
            inside = True
            continue
        if inside:
            if not line.startswith("|"):
                break
            m = re.match(r"^\|\s*`([^`]+)`\s*\|(.*)$", line)
            if m:
                rows[m.group(1)] = m.group(2)
    return rows


def number(text):
    return text.replace(",", "").replace("_", "")


def main():
    checked, errors = 0, []
    for plugin_dir in sorted(glob.glob(os.path.join(ROOT, "backends", "*"))):
        name = os.path.basename(plugin_dir)
        page = os.path.join(ROOT, "docs", "backends", name + ".md")
        keys = code_tables(plugin_dir)
        if not keys or not os.path.exists(page):
            continue
        checked += 1
        rows = doc_rows(page)
        for k in sorted(set(keys) - set(rows)):
            errors.append("%s: key %s is in the config table but not on %s" % (name, k, os.path.relpath(page, ROOT)))
        for k in sorted(set(rows) - set(keys)):
            errors.append("%s: key %s is documented on %s but not in the config table" % (name, k, os.path.relpath(page, ROOT)))
        for k, (kind, args) in keys.items():
            if kind != "INT" or k not in rows:
                continue
            lo, hi, default = (number(a) for a in args[:3])
            row = number(rows[k])
            for what, v in (("minimum", lo), ("maximum", hi), ("default", default)):
                if not re.search(r"(?<![0-9])%s(?![0-9])" % re.escape(v), row):
                    errors.append("%s: %s's %s %s is not in its row on %s" % (name, k, what, v, os.path.relpath(page, ROOT)))
    for e in errors:
        print(e)
    if checked == 0:
        print("no plugin with both a config table and a doc page was found")
        return 1
    print("%d plugin config table(s) checked against their pages" % checked)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
