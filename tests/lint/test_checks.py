#!/usr/bin/python3
"""Self-test of the source checks in scripts/: each must fail on a tree that breaks its rule and
pass on one that keeps it. Usage: test_checks.py ROOT"""
import os
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", ".."))


def run(script, tree):
    p = subprocess.run(["/usr/bin/python3", os.path.join(ROOT, "scripts", script), tree], capture_output=True, text=True)
    return p.returncode, p.stdout + p.stderr


def write(tree, path, text):
    full = os.path.join(tree, path)
    os.makedirs(os.path.dirname(full), exist_ok=True)
    with open(full, "w") as f:
        f.write(text)


def check_banned():
    with tempfile.TemporaryDirectory() as t:
        write(t, "gateway/ok.c", '/* sprintf( is fine in a comment */\nstatic const char *s = "strcpy(";\n'
              "int f(char *b) { return snprintf(b, 4, \"x\") + (int)strtol(b, 0, 10); }\n")
        write(t, "tests/unit/t.c", "int g(const char *s) { return atoi(s); }\n")  # not shipped
        rc, out = run("check_banned.py", t)
        assert rc == 0, out
        write(t, "backends/x/bad.c", "int h(const char *s)\n{\n    char b[9];\n    sprintf(b, \"%d\", atoi(s));\n    return 0;\n}\n")
        rc, out = run("check_banned.py", t)
        assert rc == 1, out
        assert "backends/x/bad.c:4: sprintf() is banned" in out, out
        assert "backends/x/bad.c:4: atoi() is banned" in out, out


def drop_known_lists(path):
    """Removes the lists of known exceptions (layers-known, circles-known) from a copied table."""
    with open(path) as f:
        text = f.read()
    for block in ("layers-known", "circles-known"):
        i = text.find("```%s\n" % block)
        if i >= 0:
            text = text[:i] + text[text.index("```\n", i + 3) + 4:]
    with open(path, "w") as f:
        f.write(text)


def check_layers():
    with tempfile.TemporaryDirectory() as t:
        shutil.copy(os.path.join(ROOT, "docs", "architecture.md"), os.path.join(t, "architecture.md"))
        os.makedirs(os.path.join(t, "docs"))
        shutil.move(os.path.join(t, "architecture.md"), os.path.join(t, "docs", "architecture.md"))
        drop_known_lists(os.path.join(t, "docs", "architecture.md"))  # they name files of the real tree
        write(t, "lib/buf.h", "#include <stddef.h>\n")
        write(t, "cache/cache.h", '#include "../lib/buf.h"\n')
        write(t, "gateway/server.c", '#include "../cache/cache.h"\n#include "buf.h"\n')
        rc, out = run("check_layers.py", t)
        assert rc == 0, out
        write(t, "cache/bad.c", '#include "../gateway/server.h"\n')  # up
        write(t, "gateway/server.h", "\n")
        rc, out = run("check_layers.py", t)
        assert rc == 1, out
        assert "cache/bad.c" in out and "gateway" in out, out
        os.remove(os.path.join(t, "cache", "bad.c"))
        write(t, "backends/cuda/internal.cuh", '#include "../../tests/gpu/emu/cuda_emu.h"\n')  # shipped -> tests
        write(t, "tests/gpu/emu/cuda_emu.h", "\n")
        rc, out = run("check_layers.py", t)
        assert rc == 1 and "backends/cuda/internal.cuh" in out, out


def check_funclen():
    with tempfile.TemporaryDirectory() as t:
        body = "".join("    x += %d;\n" % i for i in range(70))
        write(t, "gateway/ok.c", "static int f(int x,\n             int y)\n{\n" + body + "    return x + y;\n}\n")
        rc, out = run("check_funclen.py", t)
        assert rc == 0, out
        body = "".join("    x += %d;\n" % i for i in range(90))
        write(t, "cache/long.c", "int g(int x)\n{\n" + body + "    return x;\n}\n")
        rc, out = run("check_funclen.py", t)
        assert rc == 1 and "cache/long.c:1: g (" in out, out


if __name__ == "__main__":
    check_banned()
    check_funclen()
    if os.path.exists(os.path.join(ROOT, "scripts", "check_layers.py")):
        check_layers()
    print("ok")
