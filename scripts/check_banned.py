#!/usr/bin/python3
"""check_banned.py [ROOT] -- fails when shipped C/C++/CUDA code calls a function the house style
bans (docs/architecture.md, "Contributing"): atoi/atol/atoll/atof (no error reporting),
sprintf/vsprintf/strcpy/strcat/gets (no bounds), strtok (hidden global state). Use the strtol
family with checks, snprintf, memcpy with lengths, strtok_r.

Shipped code is everything under gateway/, cache/, lib/ and backends/; tests/ is not shipped.
Comments and string literals are blanked first (line numbers kept), so prose may name the
functions. Prints every hit as file:line and exits 1 when there is one.
"""
import os
import re
import sys

BANNED = ("atoi", "atol", "atoll", "atof", "sprintf", "vsprintf", "strcpy", "strcat", "gets", "strtok")
SHIPPED = ("gateway", "cache", "lib", "backends")
SUFFIXES = (".c", ".h", ".cc", ".cpp", ".cu", ".cuh")
CALL = re.compile(r"(?<![A-Za-z0-9_.>])(" + "|".join(BANNED) + r")\s*\(")
NOISE = re.compile(r'/\*.*?\*/|//[^\n]*|"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'', re.S)


def blank(m):
    return re.sub(r"[^\n]", " ", m.group(0))


def hits(path):
    with open(path, encoding="utf-8", errors="replace") as f:
        src = NOISE.sub(blank, f.read())
    for no, line in enumerate(src.split("\n"), 1):
        for m in CALL.finditer(line):
            yield "%s:%d: %s() is banned" % (path, no, m.group(1))


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    os.chdir(root)
    found = []
    for top in SHIPPED:
        for d, dirs, files in os.walk(top):
            dirs.sort()
            for name in sorted(files):
                if name.endswith(SUFFIXES):
                    found.extend(hits(os.path.join(d, name)))
    for h in found:
        print(h)
    if found:
        print("check_banned: use strtol/strtoul/strtod with checks, snprintf, memcpy with lengths, strtok_r", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
