"""The remote plugins' config errors, exactly as the gateway prints them (`searchgate --check`): one
wrong key at a time for serper (and its page reader), upstream and qdrant, including the HTTP
engine's shared keys with their cross-key checks (burst against qps, proxy URL, ca_file). The
messages are part of the interface (operators grep for them); the plugins read their keys from
declarative tables (lib/cfg.h) that must keep producing these exact lines."""
import json
import os
import subprocess
import tempfile
import unittest

import rtest

BASE = {
    "upstream": {"servers": ["http://127.0.0.1:9"], "health_interval_ms": 0},
    "serper": {"api_key_env": "SP_KEY", "base_url": "http://127.0.0.1:9"},
    "qdrant": {"model": "/nonexistent-model", "url": "http://127.0.0.1:9", "check_collection": False},
}
ENV = {"SP_KEY": "k1", "EMPTY_VAR": ""}

# (plugin, keys over BASE, the error line from "config")
ERRORS = [
    ('upstream', {"timeout_ms": 0}, 'config.timeout_ms: expected an integer in [1, 3600000], got 0'),
    ('upstream', {"connect_timeout_ms": "x"}, 'config.connect_timeout_ms: expected an integer in [1, 600000], got "x"'),
    ('upstream', {"max_response_bytes": 10}, 'config.max_response_bytes: expected an integer in [1024, 4294967296], got 10'),
    ('upstream', {"max_response_bytes": 4294967297}, 'config.max_response_bytes: expected an integer in [1024, 4294967296], got 4294967297'),
    ('upstream', {"ca_file": "/nonexistent.pem"}, 'config.ca_file: cannot open /nonexistent.pem, got "/nonexistent.pem"'),
    ('upstream', {"ca_file": ""}, 'config.ca_file: expected a non-empty string, got ""'),
    ('upstream', {"tls_verify": 1}, 'config.tls_verify: expected true or false, got 1'),
    ('upstream', {"proxy": "nohost"}, 'config.proxy: expected a proxy URL such as "http://host:3128", got "nohost"'),
    ('upstream', {"proxy": 3}, 'config.proxy: expected a non-empty string, got 3'),
    ('upstream', {"http2": "yes"}, 'config.http2: expected true or false, got "yes"'),
    ('upstream', {"max_inflight": -1}, 'config.max_inflight: expected an integer in [0, 1000000], got -1'),
    ('upstream', {"qps": -1}, 'config.qps: expected a number in [0, 1e+06], got -1'),
    ('upstream', {"qps": 5, "burst": 0.5}, 'config.burst: expected a number in [1, 1e+06], got 0.5'),
    ('upstream', {"burst": 2000000.0}, 'config.burst: expected a number in [1, 1e+06], got 2000000'),
    ('upstream', {"max_queue": 100000000.0}, 'config.max_queue: expected an integer in [0, 10000000], got 100000000'),
    ('upstream', {"max_connections": 1.5}, 'config.max_connections: expected an integer in [0, 100000], got 1.5'),
    ('upstream', {"retries": 11}, 'config.retries: expected an integer in [0, 10], got 11'),
    ('upstream', {"backoff_ms": 0}, 'config.backoff_ms: expected an integer in [1, 60000], got 0'),
    ('upstream', {"nope": 1}, 'config.nope: unknown key (allowed: servers, path, access_path, balance, return_scores, add_url, retries, backoff_ms, health_method, health_path, health_body, health_interval_ms, health_timeout_ms, revive_ms, data_version, connect_timeout_ms, timeout_ms, max_response_bytes, ca_file, tls_verify, proxy, http2, max_inflight, qps, burst, max_queue, max_connections, on_cancel)'),
    ('upstream', {"servers": []}, 'config.servers: expected a non-empty array of base URLs such as "http://10.0.0.5:8000", got []'),
    ('upstream', {"servers": ["ftp://x"]}, 'config.servers[0]: expected an http:// or https:// base URL, got "ftp://x"'),
    ('upstream', {"servers": ["http://a", 3]}, 'config.servers[1]: expected an http:// or https:// base URL, got 3'),
    ('upstream', {"path": "x"}, 'config.path: expected a path starting with \'/\', got "x"'),
    ('upstream', {"access_path": 5}, 'config.access_path: expected a non-empty string, got 5'),
    ('upstream', {"balance": "random"}, 'config.balance: expected one of "least_inflight", "round_robin", got "random"'),
    ('upstream', {"return_scores": 0}, 'config.return_scores: expected true or false, got 0'),
    ('upstream', {"add_url": "n"}, 'config.add_url: expected true or false, got "n"'),
    ('upstream', {"health_method": "PUT"}, 'config.health_method: expected one of "POST", "GET", got "PUT"'),
    ('upstream', {"health_path": "p"}, 'config.health_path: expected a path starting with \'/\', got "p"'),
    ('upstream', {"health_body": ""}, 'config.health_body: expected a non-empty string, got ""'),
    ('upstream', {"health_interval_ms": -1}, 'config.health_interval_ms: expected an integer in [0, 3600000], got -1'),
    ('upstream', {"health_timeout_ms": 0}, 'config.health_timeout_ms: expected an integer in [1, 600000], got 0'),
    ('upstream', {"revive_ms": 3600001}, 'config.revive_ms: expected an integer in [0, 3600000], got 3600001'),
    ('upstream', {"data_version": ""}, 'config.data_version: expected a non-empty string, got ""'),
    ('upstream', {"data_version": 5}, 'config.data_version: expected a non-empty string, got 5'),
    ('serper', {"proxy": "nohost"}, 'config.proxy: expected a proxy URL such as "http://host:3128", got "nohost"'),
    ('serper', {"qps": 5, "burst": 0.5}, 'config.burst: expected a number in [1, 1e+06], got 0.5'),
    ('serper', {"ca_file": "/nonexistent.pem"}, 'config.ca_file: cannot open /nonexistent.pem, got "/nonexistent.pem"'),
    ('serper', {"api_key_env": None}, 'config.api_key_env: required key is missing'),
    ('serper', {"api_key_env": "EMPTY_VAR"}, 'config.api_key_env: environment variable EMPTY_VAR (named here) is not set or empty'),
    ('serper', {"base_url": "x"}, 'config.base_url: expected an http:// or https:// URL, got "x"'),
    ('serper', {"gl": "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"}, 'config.gl: expected a short string ("" leaves it out of the request), got "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"'),
    ('serper', {"gl": 5}, 'config.gl: expected a short string ("" leaves it out of the request), got 5'),
    ('serper', {"params": 5}, 'config.params: expected an object of extra request fields (e.g. {"tbs": "qdr:y"}), got 5'),
    ('serper', {"params": {"q": 1}}, 'config.params.q: is set by the backend itself (use the gl/hl keys), got 1'),
    ('serper', {"params": {"tbs": "qdr:y"}, "max_topk": 1001}, 'config.max_topk: expected an integer in [1, 1000], got 1001'),
    ('serper', {"backoff_ms": 6000, "backoff_max_ms": 5999}, 'config.backoff_max_ms: expected an integer in [6000, 600000], got 5999'),
    ('serper', {"backoff_max_ms": 600001}, 'config.backoff_max_ms: expected an integer in [200, 600000], got 600001'),
    ('serper', {"data_version": ""}, 'config.data_version: expected a non-empty string, got ""'),
    ('serper', {"key_rest_s": 0}, 'config.key_rest_s: expected an integer in [1, 86400], got 0'),
    ('serper', {"reader": 5}, "config.reader: expected an object (the page reader's settings)"),
    ('serper', {"reader": {"nope": 1}}, 'config.reader.nope: unknown key (allowed: base_url, api_key_env, key_rest_s, format, headers, retries, backoff_ms, backoff_max_ms, connect_timeout_ms, timeout_ms, max_response_bytes, ca_file, tls_verify, proxy, http2, max_inflight, qps, burst, max_queue, max_connections, on_cancel)'),
    ('serper', {"reader": {"base_url": "x"}}, 'config.reader.base_url: expected an http:// or https:// URL, got "x"'),
    ('serper', {"reader": {"format": "xml"}}, 'config.reader.format: expected one of "json", "text", got "xml"'),
    ('serper', {"reader": {"headers": {"Accept": "x"}}}, 'config.reader.headers.Accept: is set by the backend itself, got "x"'),
    ('serper', {"reader": {"retries": -1}}, 'config.reader.retries: expected an integer in [0, 10], got -1'),
    ('serper', {"reader": {"backoff_max_ms": 1}}, 'config.reader.backoff_max_ms: expected an integer in [500, 600000], got 1'),
    ('serper', {"reader": {"proxy": "p"}}, 'config.reader.proxy: expected a proxy URL such as "http://host:3128", got "p"'),
    ('serper', {"reader": {"key_rest_s": 0}}, 'config.reader.key_rest_s: expected an integer in [1, 86400], got 0'),
    ('serper', {"reader": {"api_key_env": "EMPTY_VAR"}}, 'config.reader.api_key_env: environment variable EMPTY_VAR (named here) is not set or empty'),
    ('serper', {"reader": {"timeout_ms": 0}}, 'config.reader.timeout_ms: expected an integer in [1, 3600000], got 0'),
    ('serper', {"reader": {"ca_file": "/nope"}}, 'config.reader.ca_file: cannot open /nope, got "/nope"'),
    ('serper', {"reader": {"qps": 2, "burst": 0}}, 'config.reader.burst: expected a number in [1, 1e+06], got 0'),
    ('qdrant', {"max_response_bytes": 10}, 'config.max_response_bytes: expected an integer in [1024, 4294967296], got 10'),
    ('qdrant', {"burst": 2000000.0}, 'config.burst: expected a number in [1, 1e+06], got 2000000'),
    ('qdrant', {"url": "x"}, 'config.url: expected an http:// or https:// URL (the REST port, 6333), got "x"'),
    ('qdrant', {"collection": ""}, 'config.collection: expected a non-empty string, got ""'),
    ('qdrant', {"vector": 3}, 'config.vector: expected a non-empty string, got 3'),
    ('qdrant', {"api_key_env": "EMPTY_VAR"}, 'config.api_key_env: environment variable EMPTY_VAR (named here) is not set or empty'),
    ('qdrant', {"model": None}, 'config.model: required key is missing'),
    ('qdrant', {"prefix": 3}, 'config.prefix: expected a string, got 3'),
    ('qdrant', {"max_length": 513}, 'config.max_length: expected an integer in [2, 512], got 513'),
    ('qdrant', {"hnsw_ef": 0}, 'config.hnsw_ef: expected an integer in [1, 1000000], got 0'),
    ('qdrant', {"exact": 1}, 'config.exact: expected true or false, got 1'),
    ('qdrant', {"score_threshold": 2000000000.0}, 'config.score_threshold: expected a number in [-1e+09, 1e+09], got 2000000000'),
    ('qdrant', {"encoder_threads": 65}, 'config.encoder_threads: expected an integer in [1, 64], got 65'),
    ('qdrant', {"max_batch": 0}, 'config.max_batch: expected an integer in [1, 4096], got 0'),
    ('qdrant', {"max_pending": 0}, 'config.max_pending: expected an integer in [1, 10000000], got 0'),
    ('qdrant', {"check_collection": "no"}, 'config.check_collection: expected true or false, got "no"'),
    ('qdrant', {"max_topk": 0}, 'config.max_topk: expected an integer in [1, 100000], got 0'),
    ('qdrant', {"data_version": 1}, 'config.data_version: expected a non-empty string, got 1'),
]

# accepted: "" and null where they mean "leave it out" or "the default"
VALID = [
    ('upstream', {'access_path': None}),
    ('serper', {'gl': ''}),
    ('serper', {'hl': None}),
]


class TestConfigErrors(unittest.TestCase):
    def check(self, plugin, keys):
        conf = dict(BASE[plugin])
        conf.update(keys)
        cfg = {"listen": {"host": "127.0.0.1", "port": 0}, "threads": 1,
               "backends": [{"name": "b", "plugin": plugin, "config": conf}]}
        with tempfile.TemporaryDirectory(prefix="sgcfg-") as d:
            path = os.path.join(d, "gateway.json")
            with open(path, "w") as f:
                json.dump(cfg, f)
            env = dict(os.environ)
            env.setdefault("LSAN_OPTIONS", "suppressions=" + os.path.join(rtest.sgtest.SOURCE_DIR, "tests", "lsan.supp"))
            env.update(ENV)
            r = subprocess.run([rtest.sgtest.binary("searchgate"), "--config", path, "--check", "--port", "0"],
                               capture_output=True, text=True, env=env, timeout=rtest.sgtest.scaled(60))
        return r.returncode, r.stdout + r.stderr

    def plugins(self):
        return [p for p in BASE if os.path.exists(rtest.sgtest.binary(os.path.join("plugins", "sg_%s.so" % p)))]

    def test_errors(self):
        have = self.plugins()
        for plugin, keys, msg in ERRORS:
            if plugin not in have:
                continue
            with self.subTest(plugin=plugin, keys=keys):
                rc, out = self.check(plugin, keys)
                self.assertNotEqual(rc, 0, out)
                self.assertIn("): " + msg + "\n", out)

    def test_valid(self):
        have = self.plugins()
        for plugin, keys in VALID:
            if plugin not in have:
                continue
            with self.subTest(plugin=plugin, keys=keys):
                rc, out = self.check(plugin, keys)
                self.assertEqual(rc, 0, out)


if __name__ == "__main__":
    unittest.main()
