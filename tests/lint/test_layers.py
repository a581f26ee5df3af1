#!/usr/bin/python3
"""Self-test of scripts/check_layers.py's rules inside gateway/ (the rooms, include circles and the
lists of known exceptions): each seeded violation in a temporary tree must fail the check, the
same tree without it must pass. Usage: test_layers.py ROOT"""
import os
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", ".."))

TABLE = """# test table

```layers
lib/               -> (nothing)
gateway/           -> gateway/http/ gateway/pipeline/ gateway/policy/ lib/
gateway/http/      -> gateway/pipeline/ gateway/policy/ lib/
gateway/pipeline/  -> gateway/policy/ lib/
gateway/policy/    -> lib/
```
%s
"""


def run(tree):
    p = subprocess.run(["/usr/bin/python3", os.path.join(ROOT, "scripts", "check_layers.py"), tree],
                       capture_output=True, text=True)
    return p.returncode, p.stdout + p.stderr


def write(tree, path, text):
    full = os.path.join(tree, path)
    os.makedirs(os.path.dirname(full), exist_ok=True)
    with open(full, "w") as f:
        f.write(text)


def tree_with(t, known=""):
    write(t, "docs/architecture.md", TABLE % known)
    write(t, "lib/buf.h", "#include <stddef.h>\n")
    write(t, "gateway/main.c", '#include "retrieve.h"\n#include "query.h"\n')
    write(t, "gateway/http/retrieve.h", "\n")
    write(t, "gateway/http/retrieve.c", '#include "retrieve.h"\n#include "query.h"\n#include "clients.h"\n#include "buf.h"\n')
    write(t, "gateway/pipeline/query.h", '#include "buf.h"\n')
    write(t, "gateway/pipeline/query.c", '#include "query.h"\n#include "clients.h"\n')
    write(t, "gateway/policy/clients.h", "\n")
    write(t, "gateway/policy/clients.c", '#include "clients.h"\n')


def expect(t, rc_want, *needles):
    rc, out = run(t)
    assert rc == rc_want, "rc %d, wanted %d:\n%s" % (rc, rc_want, out)
    for n in needles:
        assert n in out, "%r not in:\n%s" % (n, out)


def upward_edge():
    """pipeline/ including an http/ header is against the rooms."""
    with tempfile.TemporaryDirectory() as t:
        tree_with(t)
        write(t, "gateway/http/gate.h", "\n")
        expect(t, 0)
        write(t, "gateway/pipeline/query.c", '#include "query.h"\n#include "gate.h"\n')
        expect(t, 1, 'gateway/pipeline/query.c includes "gate.h"', "gateway/pipeline/ may not use gateway/http/")
        # listed as known: passes; the list entry going stale fails
        write(t, "docs/architecture.md", TABLE % "```layers-known\ngateway/pipeline/query.c -> gateway/http/gate.h\n```\n")
        expect(t, 0)
        write(t, "gateway/pipeline/query.c", '#include "query.h"\n')
        expect(t, 1, "layers-known lists gateway/pipeline/query.c -> gateway/http/gate.h")


def circle_in_one_room():
    """Two units of one room including each other: allowed by the table, a circle all the same."""
    with tempfile.TemporaryDirectory() as t:
        tree_with(t)
        write(t, "gateway/policy/budget.h", '#include "clients.h"\n')
        write(t, "gateway/policy/budget.c", '#include "budget.h"\n')
        expect(t, 0)
        write(t, "gateway/policy/clients.c", '#include "clients.h"\n#include "budget.h"\n')  # .c edge
        expect(t, 1, "include circle among gateway/ units", "gateway/policy/budget gateway/policy/clients")
        # a known circle passes, and so does a smaller one inside it; a stale one fails
        known = "```circles-known\ngateway/policy/budget gateway/policy/clients gateway/pipeline/query\n```\n"
        write(t, "docs/architecture.md", TABLE % known)
        expect(t, 0)
        write(t, "gateway/policy/clients.c", '#include "clients.h"\n')
        expect(t, 1, "circles-known lists gateway/pipeline/query gateway/policy/budget gateway/policy/clients")


def circle_through_three_rooms():
    """A circle made of allowed-looking edges plus one known upward edge is still a circle."""
    with tempfile.TemporaryDirectory() as t:
        tree_with(t, "```layers-known\ngateway/policy/clients.c -> gateway/http/retrieve.h\n```\n")
        write(t, "gateway/policy/clients.c", '#include "clients.h"\n#include "retrieve.h"\n')
        expect(t, 1, "gateway/http/retrieve gateway/pipeline/query gateway/policy/clients")


def real_table():
    """The project's own table: a seeded upward include from the pipeline fails."""
    with tempfile.TemporaryDirectory() as t:
        os.makedirs(os.path.join(t, "docs"))
        shutil.copy(os.path.join(ROOT, "docs", "architecture.md"), os.path.join(t, "docs", "architecture.md"))
        with open(os.path.join(t, "docs", "architecture.md")) as f:
            text = f.read()
        # the known lists name files of the real tree: drop them for the seeded one
        for block in ("layers-known", "circles-known"):
            i = text.find("```%s\n" % block)
            if i >= 0:
                text = text[:i] + text[text.index("```\n", i + 3) + 4:]
        with open(os.path.join(t, "docs", "architecture.md"), "w") as f:
            f.write(text)
        write(t, "gateway/pipeline/query.c", '#include "query.h"\n')
        write(t, "gateway/pipeline/query.h", "\n")
        write(t, "gateway/http/retrieve.c", '#include "retrieve.h"\n#include "query.h"\n')
        write(t, "gateway/http/retrieve.h", "\n")
        expect(t, 0)
        write(t, "gateway/pipeline/query.c", '#include "query.h"\n#include "retrieve.h"\n')
        expect(t, 1, "gateway/pipeline/ may not use gateway/http/", "include circle")


if __name__ == "__main__":
    upward_edge()
    circle_in_one_room()
    circle_through_three_rooms()
    real_table()
    print("ok")
