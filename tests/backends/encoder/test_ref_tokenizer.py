"""The reference tokenizer of the Python references (ref_tokenizer.py: make_xenc_fixture.py,
xenc_ref.py behind the rerank tests, the benchmark peer): it reproduces transformers' own ids in
tests/fixtures/tokenizer_golden.jsonl, and truncate_pair follows the two longest_first rules it
states, on cases worked out by hand from those rules. Run: ctest -R local.ref_tokenizer."""
import os
import unittest

import ref_tokenizer as rt

VOCAB = os.path.join(rt.HERE, "..", "..", "fixtures", "e5-tiny", "vocab.txt")


class RefTokenizer(unittest.TestCase):
    def test_golden(self):
        n, bad = rt.check_golden(rt.BertTokenizer(VOCAB))
        self.assertEqual((n, bad), (40, []))

    def test_truncate_pair(self):
        a = lambda n: list(range(n))  # noqa: E731
        # (len a, len b, budget): (slow, fast) lengths kept
        cases = {(10, 10, 7): ((4, 3), (3, 4)),    # both cut, odd budget: the one case they differ
                 (10, 10, 8): ((4, 4), (4, 4)),
                 (2, 20, 10): ((2, 8), (2, 8)),    # the shorter fits: whole, the longer the rest
                 (7, 20, 10): ((5, 5), (5, 5)),    # it does not: halves
                 (8, 3, 7): ((4, 3), (4, 3)),
                 (3, 4, 7): ((3, 4), (3, 4))}      # nothing to cut
        for (la, lb, budget), want in cases.items():
            got = tuple(tuple(map(len, rt.truncate_pair(a(la), a(lb), budget, rule))) for rule in ("slow", "fast"))
            self.assertEqual(got, want, (la, lb, budget))

    def test_special_tokens_and_pairs(self):
        tok = rt.BertTokenizer(VOCAB)
        self.assertEqual(tok.ids("[CLS]hello[SEP]"), [tok.cls] + tok.ids("hello") + [tok.sep])
        self.assertEqual(tok.ids("x" * 101), [tok.unk])
        ids, types = tok.encode_pair("who wrote hamlet", "shakespeare wrote hamlet", 8, "fast")
        self.assertEqual(len(ids), 8)
        first_sep = ids.index(tok.sep)
        self.assertEqual((ids[0], ids[-1]), (tok.cls, tok.sep))
        self.assertEqual(types, [0] * (first_sep + 1) + [1] * (8 - first_sep - 1))


if __name__ == "__main__":
    unittest.main(verbosity=2)
