"""BERT uncased WordPiece tokenization, as transformers 4.36 performs it (BertTokenizer and
BertTokenizerFast), written here from its rules for the Python references and fixture makers of
tests/ (Debian has no transformers): tests/backends/encoder/make_xenc_fixture.py,
tests/integration/xenc_ref.py and tests/bench/local/ref_server.py. check_golden() compares it with tests/fixtures/
tokenizer_golden.jsonl, made with transformers itself; the scripts that write fixtures refuse to
run unless it reproduces every case id for id.

The rules, in order:
  1. Cleaning, character by character: U+0000, U+FFFD and control characters (category C*, except
     tab, newline and carriage return) are dropped; those three and category Zs become a space;
     a CJK ideograph (CJK_RANGES) gets a space on each side.
  2. NFC normalisation; the text is split at whitespace (Python's str.split).
  3. Each word is lower-cased, decomposed (NFD) with its non-spacing marks (Mn) dropped, and cut
     around punctuation (the ASCII symbols ! to /, : to @, [ to `, { to ~, and category P*): each
     punctuation character is a token of its own.
  4. WordPiece: a token of more than 100 characters is [UNK]; otherwise it is covered from the left
     by the longest vocabulary entries, every piece after the first looked up as "##" + piece; a
     token that cannot be covered is a single [UNK].
  5. The special tokens (SPECIAL) written literally in the text are kept whole: the text is cut
     around them first, and each is its own id.
A sequence is [CLS] ids [SEP]; a pair is [CLS] A [SEP] B [SEP], token types 0 up to the first
[SEP] and 1 after it, cut to length by truncate_pair ("longest_first", in the two ways the slow and
the fast tokenizer implement it).
"""
import itertools
import json
import os
import re
import unicodedata

HERE = os.path.dirname(os.path.abspath(__file__))
GOLDEN = os.path.join(HERE, "..", "..", "fixtures", "tokenizer_golden.jsonl")

SPECIAL = ("[UNK]", "[SEP]", "[PAD]", "[CLS]", "[MASK]")
CJK_RANGES = ((0x4E00, 0x9FFF), (0x3400, 0x4DBF), (0x20000, 0x2A6DF), (0x2A700, 0x2B73F), (0x2B740, 0x2B81F),
              (0x2B820, 0x2CEAF), (0xF900, 0xFAFF), (0x2F800, 0x2FA1F))
ASCII_PUNCTUATION = frozenset("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~")
MAX_WORD = 100
_SPECIAL_SPLIT = re.compile("(%s)" % "|".join(re.escape(s) for s in SPECIAL))


def _cleaned(c):
    """Rule 1 for one character: what it becomes ("" when dropped)."""
    if c in "\t\n\r":
        return " "
    cat = unicodedata.category(c)
    if cat == "Zs":
        return " "
    if c in "\x00\ufffd" or cat.startswith("C"):
        return ""
    if any(lo <= ord(c) <= hi for lo, hi in CJK_RANGES):
        return " %s " % c
    return c


def _is_punctuation(c):
    return c in ASCII_PUNCTUATION or unicodedata.category(c).startswith("P")


def _without_marks(word):
    return "".join(c for c in unicodedata.normalize("NFD", word) if unicodedata.category(c) != "Mn")


def basic_tokens(text):
    """Rules 1 to 3: the words and punctuation tokens of a text without special tokens."""
    text = unicodedata.normalize("NFC", "".join(_cleaned(c) for c in text))
    tokens = []
    for word in text.split():
        for punct, run in itertools.groupby(_without_marks(word.lower()), key=_is_punctuation):
            if punct:
                tokens.extend(run)
            else:
                tokens.append("".join(run))
    return " ".join(tokens).split()


class BertTokenizer:
    def __init__(self, vocab_file):
        with open(vocab_file, encoding="utf-8") as f:
            self.vocab = {line.rstrip("\n"): i for i, line in enumerate(f)}
        self.unk, self.cls, self.sep = self.vocab["[UNK]"], self.vocab["[CLS]"], self.vocab["[SEP]"]

    def wordpiece(self, token):
        """Rule 4: the ids of one token."""
        if len(token) > MAX_WORD:
            return [self.unk]
        ids, start = [], 0
        while start < len(token):
            prefix = "##" if start else ""
            for end in range(len(token), start, -1):
                found = self.vocab.get(prefix + token[start:end])
                if found is not None:
                    break
            else:
                return [self.unk]
            ids.append(found)
            start = end
        return ids

    def ids(self, text):
        """The ids of a text, no [CLS]/[SEP] added and nothing cut (rule 5 around rules 1 to 4)."""
        out = []
        for i, part in enumerate(_SPECIAL_SPLIT.split(text)):
            if i % 2:
                out.append(self.vocab[part])
            else:
                for token in basic_tokens(part):
                    out += self.wordpiece(token)
        return out

    def encode(self, text, max_length):
        """[CLS] ids [SEP], the ids cut to max_length - 2."""
        return [self.cls] + self.ids(text)[:max_length - 2] + [self.sep]

    def encode_pair(self, a, b, max_length, rule):
        """tokenizer(a, b, truncation="longest_first", max_length=max_length): (ids, token types);
        rule "slow" or "fast" (truncate_pair)."""
        ids_a, ids_b = truncate_pair(self.ids(a), self.ids(b), max_length - 3, rule)
        return ([self.cls] + ids_a + [self.sep] + ids_b + [self.sep],
                [0] * (len(ids_a) + 2) + [1] * (len(ids_b) + 1))


def truncate_pair(a, b, budget, rule):
    """Cuts the token lists a and b, from their ends, to `budget` tokens in all ("longest_first";
    the special tokens are not counted). Nothing is cut when they fit. Otherwise:

    "slow" (transformers' PreTrainedTokenizerBase.truncate_sequences): of the k tokens to remove,
    the longer list (b when they are equal) loses as many as make it as short as the other, at
    most k; the rest are shared, a losing half of them rounded down and b the other part.

    "fast" (the tokenizers library's truncate_encodings, what BertTokenizerFast runs): when the
    shorter list fits in half the budget it stays whole and the longer keeps the rest of the
    budget; otherwise each keeps half, the longer (b when they are equal) the odd token too.

    They differ only when both lists are cut and the budget is odd."""
    if len(a) + len(b) <= budget:
        return a, b
    if rule == "slow":
        k = len(a) + len(b) - budget
        first = min(abs(len(a) - len(b)), k)
        rest = k - first
        cut_a, cut_b = rest // 2, rest - rest // 2
        if len(a) > len(b):
            cut_a += first
        else:
            cut_b += first
        return a[:max(0, len(a) - cut_a)], b[:max(0, len(b) - cut_b)]
    if rule != "fast":
        raise ValueError("rule must be slow or fast, not %r" % rule)
    a_longer = len(a) > len(b)
    short = len(b) if a_longer else len(a)
    if short <= budget - short:
        keep_short, keep_long = short, budget - short
    else:
        keep_short, keep_long = budget // 2, budget - budget // 2
    keep_a, keep_b = (keep_long, keep_short) if a_longer else (keep_short, keep_long)
    return a[:keep_a], b[:keep_b]


def check_golden(tok, golden=GOLDEN):
    """The ids of "query: " + text for every case of the golden file against transformers' own:
    (cases, ids of the cases that differ)."""
    n, bad = 0, []
    with open(golden, encoding="utf-8") as f:
        for line in f:
            case = json.loads(line)
            n += 1
            if tok.encode("query: " + case["text"], 256) != case["input_ids"]:
                bad.append(case["id"])
    return n, bad
