#!/usr/bin/python3
"""check_funclen.py [ROOT] -- fails when a function in gateway/, cache/ or lib/ is longer than 80
lines (signature to closing brace). Long functions there mixed several steps of a request in one
place; each step gets a function of its own. Functions are found in the house style's layout: the
opening brace alone in column 0 after the line that closes the signature, the closing one alone
in column 0. Prints each offender as file:line: name (n lines)."""
import os
import re
import sys

DIRS = ("gateway", "cache", "lib")
LIMIT = 80


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    os.chdir(root)
    found = []
    for top in DIRS:
        for d, dirs, files in os.walk(top):
            dirs.sort()
            for name in sorted(files):
                if not name.endswith(".c"):
                    continue
                path = os.path.join(d, name)
                with open(path, encoding="utf-8", errors="replace") as f:
                    lines = f.read().split("\n")
                start = None
                for i, line in enumerate(lines):
                    if start is None and line == "{" and i > 0 and lines[i - 1].rstrip().endswith(")"):
                        start = i - 1
                        while start > 0 and lines[start][:1] in (" ", "\t"):  # a signature over several lines
                            start -= 1
                    elif start is not None and line == "}":
                        n = i - start + 1
                        m = re.search(r"(\w+)\s*\(", lines[start])
                        if n > LIMIT:
                            found.append("%s:%d: %s (%d lines)" % (path, start + 1, m.group(1) if m else "?", n))
                        start = None
    for f in found:
        print(f)
    if found:
        print("check_funclen: functions in %s stay under %d lines" % ("/, ".join(DIRS) + "/", LIMIT), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
