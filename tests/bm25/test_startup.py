"""Start-up of the gateway with the bm25 backend: a corrupt index, an index of another format
version, files of two builds, a missing index and bad config values must each stop start-up with
exit status 1 and one clear line naming the file (or the config key); a good index starts."""
import os
import shutil
import struct
import tempfile
import unittest
import zlib

import sgtest
from bm25util import build_index, random_corpus, write_corpus

FILES = ["bm25.meta", "docs.bin", "docs.idx", "terms.bin", "postings.bin"]


def backend(index_dir, **cfg):
    config = {"index": index_dir}
    config.update(cfg)
    return {"name": "lex", "plugin": "bm25", "config": config}


class StartupTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="sg-bm25-start-")
        corpus = os.path.join(cls.dir, "corpus.jsonl")
        write_corpus(corpus, random_corpus(200, seed=5))
        cls.good = os.path.join(cls.dir, "good")
        build_index(corpus, cls.good)
        corpus2 = os.path.join(cls.dir, "corpus2.jsonl")
        write_corpus(corpus2, random_corpus(150, seed=6))
        cls.other = os.path.join(cls.dir, "other")
        build_index(corpus2, cls.other)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.dir, ignore_errors=True)

    def copy(self, name):
        d = os.path.join(self.dir, name)
        shutil.rmtree(d, ignore_errors=True)
        shutil.copytree(self.good, d)
        return d

    def expect_fail(self, config, *needles):
        gw = sgtest.Gateway(config, expect_fail=True)
        rc = gw.wait_exit(30)
        log = gw.read_log()
        shutil.rmtree(gw.dir, ignore_errors=True)
        self.assertEqual(rc, 1, log)
        for n in needles:
            self.assertIn(n, log)
        for bad in ("AddressSanitizer", "runtime error:", "LeakSanitizer"):
            self.assertNotIn(bad, log)
        return log

    def test_good_index_starts(self):
        gw = sgtest.Gateway({"backends": [backend(self.good)]})
        try:
            r = gw.retrieve(["volcano lava"], topk=2)
            self.assertEqual(r.status, 200, r)
            self.assertEqual(len(r.json()["result"][0]), 2)
            self.assertIn("bm25 index", gw.read_log())
        finally:
            gw.stop()

    def test_relative_index_path(self):
        # "index" resolves against the config file's directory
        gw = sgtest.Gateway({"backends": [backend("good")]}, config_dir=self.dir)
        try:
            self.assertEqual(gw.retrieve(["volcano"], topk=1).status, 200)
        finally:
            gw.stop()
            os.unlink(gw.config_path)

    def test_corrupt_payload(self):
        for name in FILES:
            d = self.copy("corrupt-" + name)
            path = os.path.join(d, name)
            with open(path, "r+b") as f:
                f.seek(-2, os.SEEK_END)
                b = f.read(1)
                f.seek(-2, os.SEEK_END)
                f.write(bytes([b[0] ^ 0x41]))
            log = self.expect_fail({"backends": [backend(d)]}, path, "checksum mismatch")
            self.assertIn("backend lex", log)

    def test_other_format_version(self):
        d = self.copy("v2")
        path = os.path.join(d, "terms.bin")
        with open(path, "r+b") as f:
            hdr = bytearray(f.read(64))
            struct.pack_into("<I", hdr, 8, 2)  # version
            struct.pack_into("<I", hdr, 60, zlib.crc32(bytes(hdr[:60])))
            f.seek(0)
            f.write(hdr)
        self.expect_fail({"backends": [backend(d)]}, path, "index format version 2", "rebuild the index")

    def test_files_of_two_builds(self):
        d = self.copy("mixed")
        shutil.copy(os.path.join(self.other, "docs.idx"), os.path.join(d, "docs.idx"))
        self.expect_fail({"backends": [backend(d)]}, os.path.join(d, "docs.idx"), "another build")

    def test_truncated_and_missing(self):
        d = self.copy("truncated")
        path = os.path.join(d, "postings.bin")
        os.truncate(path, os.path.getsize(path) - 5)
        self.expect_fail({"backends": [backend(d)]}, path, "truncated")
        os.unlink(path)
        self.expect_fail({"backends": [backend(d)]}, path, "cannot open")
        missing = os.path.join(self.dir, "no-such-index")
        self.expect_fail({"backends": [backend(missing)]}, missing, "cannot open the index directory")

    def test_not_an_index(self):
        d = os.path.join(self.dir, "notindex")
        os.makedirs(d, exist_ok=True)
        for name in FILES:
            with open(os.path.join(d, name), "w") as f:
                f.write("this is a text file, not an index, but long enough to have a header of 64 bytes......\n")
        self.expect_fail({"backends": [backend(d)]}, os.path.join(d, "bm25.meta"), "bad magic")

    def test_header_only_verification_starts(self):
        # "verify": "header" skips payload checksums: a damaged document body is not detected at start-up
        d = self.copy("header-only")
        path = os.path.join(d, "docs.bin")
        with open(path, "r+b") as f:
            f.seek(-3, os.SEEK_END)
            f.write(b"x")
        gw = sgtest.Gateway({"backends": [backend(d, verify="header")]})
        gw.stop()
        self.expect_fail({"backends": [backend(d)]}, path, "payload checksum mismatch")

    def test_bad_config(self):
        cases = [
            ({"index": self.good, "k2": 1}, "config.k2: unknown key"),
            ({"index": self.good, "k1": -1}, "config.k1"),
            ({"index": self.good, "b": 1.5}, "config.b"),
            ({"index": self.good, "workers": 0}, "config.workers"),
            ({"index": self.good, "max_topk": "ten"}, "config.max_topk"),
            ({"index": self.good, "verify": "sometimes"}, "config.verify"),
            ({"index": self.good, "preload": "yes"}, "config.preload"),
            ({}, "config.index"),
            ({"index": 42}, "config.index"),
        ]
        for cfg, needle in cases:
            log = self.expect_fail({"backends": [{"name": "lex", "plugin": "bm25", "config": cfg}]}, needle)
            self.assertIn("backend lex", log)


if __name__ == "__main__":
    sgtest.main()
