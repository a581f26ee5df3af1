#!/usr/bin/python3
"""Self-test of test_config_docs.py: on a copy of the plugins' and the gateway's sources and pages it
passes, and each kind of drift between a config table and its page (a key, a type, a default, a bound, an enum
choice, a shared fragment's per-plugin default, a grouped row) or a create function that grew past
80 lines makes it fail, naming the key. Usage: test_config_docs_selftest.py ROOT"""
import glob
import os
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", ".."))
LINT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "test_config_docs.py")


def copy_tree(t):
    for pattern in ("backends/*/*.c", "backends/*/*.h", "docs/backends/*.md", "gateway/**/*.c", "gateway/**/*.h", "lib/**/*.c",
                    "lib/**/*.h", "docs/configuration.md", "docs/rerank.md", "docs/fusion.md"):
        for src in glob.glob(os.path.join(ROOT, pattern), recursive=True):
            dst = os.path.join(t, os.path.relpath(src, ROOT))
            os.makedirs(os.path.dirname(dst), exist_ok=True)
            shutil.copy(src, dst)


def run(t):
    p = subprocess.run(["/usr/bin/python3", LINT, t], capture_output=True, text=True)
    return p.returncode, p.stdout + p.stderr


def edit(t, path, old, new):
    full = os.path.join(t, path)
    with open(full) as f:
        text = f.read()
    assert old in text, "%s: %r not found" % (path, old)
    with open(full, "w") as f:
        f.write(text.replace(old, new, 1))
    return text


def restore(t, path, text):
    with open(os.path.join(t, path), "w") as f:
        f.write(text)


# (file, old, new, what the lint must say)
DRIFTS = [
    ("docs/backends/local.md", "| `max_wait_ms` | integer | 2 |", "| `max_wait_ms` | integer | 3 |",
     "local: max_wait_ms's default 2 is not in its default (3)"),
    ("docs/backends/local.md", "| `max_queue` | integer | 8192 | 1 … 100,000,000 |", "| `max_queue` | integer | 8192 | 1 … 10,000,000 |",
     "local: max_queue's maximum 100000000 is not in its bounds"),
    ("docs/backends/local.md", "| `teams` | boolean |", "| `teams` | integer |", "local: teams is a boolean in the table"),
    ("docs/backends/local.md", "`auto`, `openblas`, `onednn`", "`auto`, `openblas`", "local: encoder_blas's choice onednn is not in its bounds"),
    ("docs/backends/local.md", "| `gpu_rescore` |", "| `gpu_rescored` |", "local: key gpu_rescore of local_config is not on"),
    ("docs/backends/upstream.md", "| `timeout_ms` | integer | 60000 |", "| `timeout_ms` | integer | 30000 |",
     "upstream: timeout_ms's default 60000 is not in its default (30000)"),
    ("docs/backends/upstream.md", "system store, `true`, none, `false`", "system store, `true`, none, `true`",
     "upstream: http2 has the default false, not in its row's defaults"),
    ("docs/backends/serper.md", "| `backoff_ms` | integer | 500 |", "| `backoff_ms` | integer | 400 |",
     "serper: backoff_ms's default 500 is not in its default (400)"),
    ("docs/backends/serper.md", "| `gl` | string | `\"us\"` | < 32 bytes", "| `gl` | string | `\"us\"` | < 16 bytes",
     "serper: gl's length limit 32 is not in its bounds"),
    ("backends/qdrant/qdrant.c", "SG_HTTP_CONF_KEYS(sg_backend, conf, 2000, 30000,", "SG_HTTP_CONF_KEYS(sg_backend, conf, 2000, 31000,",
     "qdrant: timeout_ms's default 31000 is not in its default (30000)"),
    # the gateway's own tables against docs/configuration.md
    ("docs/configuration.md", "| `max_queries` | integer | 10000 |", "| `max_queries` | integer | 1000 |",
     "gateway: max_queries's default 10000 is not in its default (1000)"),
    ("docs/configuration.md", "| `sse_keepalive_s` | integer | 15 | 1 – 3600 |", "| `sse_keepalive_s` | integer | 15 | 1 – 360 |",
     "gateway: sse_keepalive_s's maximum 3600 is not in its bounds"),
    ("docs/configuration.md", "| `weight` | integer |", "| `weights` | integer |", "gateway: key weight of client_quota_config is not on"),
    ("gateway/config/config.c", "{\"queue\", \"reject\", NULL}", "{\"queue\", \"reject\", \"drop\", NULL}",
     "gateway: mode's choice drop is not in its bounds"),
    ("gateway/config/config.c", "SG_CFG_BOOL(sg_config_t, mcp.enabled, \"enabled\", 1)", "SG_CFG_BOOL(sg_config_t, mcp.enabled, \"enabled\", 0)",
     "gateway: enabled's default false is not in its default"),
    # a route's or client's "trace" (trace_conf.c) against configuration.md's "Query traces"
    ("docs/configuration.md", "| `keep` | integer | 0 (all) | 0 – 10^6 |", "| `keep` | integer | 0 (all) | 0 – 10^5 |",
     "gateway: keep's maximum 1000000 is not in its bounds (0 – 10^5) on docs/configuration.md"),
    ("gateway/config/trace_conf.c", "\"rotate_bytes\", 0, (int64_t)1 << 50, 268435456)", "\"rotate_bytes\", 0, (int64_t)1 << 50, 1 << 20)",
     "gateway: rotate_bytes's default 1048576 is not in its default"),
    # a route's "rerank" (rerank_conf.c) against docs/rerank.md
    ("docs/rerank.md", "| `batch` | integer | 32 |", "| `batch` | integer | 16 |", "gateway: batch's default 32 is not in its default (16) on docs/rerank.md"),
    ("gateway/config/rerank_conf.c", "{\"fast\", \"slow\", NULL}", "{\"fast\", \"slow\", \"exact\", NULL}",
     "gateway: truncation's choice exact is not in its bounds"),
    ("docs/rerank.md", "| `workers` |", "| `threads` |", "gateway: key workers of rerank_config is not on docs/rerank.md"),
    # cache.redis (lib/redis/redis_conf.c) against configuration.md's "cache.redis"
    ("docs/configuration.md", "| `timeout_ms` | integer | 50 | 1–60000 |", "| `timeout_ms` | integer | 50 | 1–6000 |",
     "gateway: timeout_ms's maximum 60000 is not in its bounds (1–6000) on docs/configuration.md"),
    ("lib/redis/redis_conf.c", "\"db\", 0, 2147483647, 0)", "\"db\", 0, 2147483647, 1)", "gateway: db's default 1 is not in its default (0)"),
    ("docs/configuration.md", "| `sentinel_username` |", "| `sentinel_user` |",
     "gateway: key sentinel_username of redis_config is not on docs/configuration.md"),
    # a fusion route and its "fusion" object (config_fusion.c, one page table) against docs/fusion.md
    ("docs/fusion.md", "| `fusion.k` | number | 60 |", "| `fusion.k` | number | 50 |",
     "gateway: fusion.k's default 60 is not in its default (50) on docs/fusion.md"),
    ("gateway/config/config_fusion.c", "{\"rrf\", \"weighted\", NULL}", "{\"rrf\", \"weighted\", \"max\", NULL}",
     "gateway: fusion.method's choice max is not in its bounds"),
    ("docs/fusion.md", "| `fusion.depth` |", "| `depth` |", "gateway: key fusion.depth of fusion_route_config is not on docs/fusion.md"),
    ("gateway/config/fusion_conf.h", "#define SG_FUSION_DEFAULT_K 60.0", "#define SG_FUSION_DEFAULT_K 30.0",
     "gateway: fusion.k's default 30 is not in its default (60)"),
    ("backends/upstream/upstream.c", "    self->conf.name = \"upstream\";\n", "    self->conf.name = \"upstream\";\n" + "    (void)0;\n" * 60,
     "backends/upstream/upstream.c: up_create is"),
]


def main():
    with tempfile.TemporaryDirectory() as t:
        copy_tree(t)
        rc, out = run(t)
        assert rc == 0, out
        for path, old, new, msg in DRIFTS:
            text = edit(t, path, old, new)
            rc, out = run(t)
            assert rc == 1 and msg in out, "%s: %r -> %r: expected %r in:\n%s" % (path, old, new, msg, out)
            restore(t, path, text)
        rc, out = run(t)
        assert rc == 0, out
    print("test_config_docs catches %d kinds of drift" % len(DRIFTS))
    return 0


if __name__ == "__main__":
    sys.exit(main())
