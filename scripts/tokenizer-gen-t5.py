#!/usr/bin/python3
"""Builds a T5-style Unigram tokenizer.json with a real SentencePiece
Precompiled charsmap (nmt_nfkc), and vectors whose expected ids come from
SentencePiece itself. Not run by the tests.

Needs Debian's python3-sentencepiece and python3-protobuf (apt-get install
python3-sentencepiece python3-protobuf), hence /usr/bin/python3:

  /usr/bin/python3 scripts/tokenizer-gen-t5.py

It trains a small unigram model (pad 0, eos 1, unk 2, like T5) on a local
corpus, writes loader/tokenizer/testdata/tokenizers/t5-sp/tokenizer.json.gz
laid out like t5-base's tokenizer.json (Precompiled normalizer,
WhitespaceSplit + Metaspace pre-tokenizer, Unigram, "$A </s>" template,
Metaspace decoder), and loader/tokenizer/testdata/vectors/t5-sp.json.

SentencePiece's lattice sums float32 scores, tokenizers' sums float64, so
on exact ties (e.g. "000" as "0"+"00" or "00"+"0" with equal scores) they
may pick different segmentations; texts with such ties are left out
("1,000,000" was one: SentencePiece [208, 98], tokenizers-style float64 and
transformers.js [98, 208]).
"""
import base64, gzip, json, os, random, tempfile

import sentencepiece as spm
from sentencepiece import sentencepiece_model_pb2 as pb

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "loader", "tokenizer", "testdata")

corpus_lines = []
rng = random.Random(7)
words = ("the quick brown fox jumps over lazy dog hello world translate English to German summarize "
         "this text model tokenizer unigram sentence piece language the of and to in is that for it as "
         "with was on be by at this from have or one had not but what all were when we there can an your "
         "which their said if do will each about how up out them then she many some so these would other").split()
for _ in range(4000):
    n = rng.randint(3, 14)
    line = " ".join(rng.choice(words) for _ in range(n))
    if rng.random() < 0.3:
        line = line.capitalize() + rng.choice([".", "!", "?", ","])
    if rng.random() < 0.1:
        line += " " + str(rng.randint(0, 100000))
    corpus_lines.append(line)
corpus_lines += ["Ünïcödé café naïve résumé", "Straße groß", "数字 123 和 中文", "ｆｕｌｌｗｉｄｔｈ"]

texts = [
    "Hello world", "translate English to German: The house is wonderful.", "summarize: the quick brown fox",
    "  leading and   multiple   spaces  ", "tabs\tand\nnewlines\n\nhere", "", "x",
    "ｈｅｌｌｏ ｗｏｒｌｄ", "ﬁne ﬂow ligatures", "① ② ③ ™ ℃ Ⅻ x² H₂O", "café vs cafe\u0301", "naïve résumé",
    "non\u00a0breaking\u3000ideographic", "zero\u200bwidth", "Straße", "unknown ☃ snowman and 😀 emoji",
    "数字 123 和 中文", "MiXeD CaSe WoRdS", "numbers 3.14159 and 42", "punctuation!!! ??? ... ,,,",
    "the the the the the", "Ω ≈ ç √ ∫ ˜ µ ≤ ≥ ÷", "\u3000\u3000indented", "end with space ",
]


def main():
    with tempfile.TemporaryDirectory() as d:
        inp = os.path.join(d, "corpus.txt")
        with open(inp, "w", encoding="utf-8") as f:
            f.write("\n".join(corpus_lines) + "\n")
        prefix = os.path.join(d, "m")
        spm.SentencePieceTrainer.train(
            input=inp, model_prefix=prefix, vocab_size=300, model_type="unigram",
            normalization_rule_name="nmt_nfkc", character_coverage=0.9995,
            pad_id=0, eos_id=1, unk_id=2, bos_id=-1, byte_fallback=False,
            minloglevel=2)
        sp = spm.SentencePieceProcessor(model_file=prefix + ".model")
        proto = pb.ModelProto()
        proto.ParseFromString(open(prefix + ".model", "rb").read())

    vocab = [[p.piece, p.score] for p in proto.pieces]
    charsmap = base64.b64encode(proto.normalizer_spec.precompiled_charsmap).decode()
    special = lambda i, s: {"id": i, "content": s, "single_word": False, "lstrip": False,
                            "rstrip": False, "normalized": False, "special": True}
    tok = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [special(0, "<pad>"), special(1, "</s>"), special(2, "<unk>")],
        "normalizer": {"type": "Precompiled", "precompiled_charsmap": charsmap},
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "WhitespaceSplit"},
            {"type": "Metaspace", "replacement": "\u2581", "add_prefix_space": True, "prepend_scheme": "always"}]},
        "post_processor": {"type": "TemplateProcessing",
                           "single": [{"Sequence": {"id": "A", "type_id": 0}}, {"SpecialToken": {"id": "</s>", "type_id": 0}}],
                           "pair": [{"Sequence": {"id": "A", "type_id": 0}}, {"SpecialToken": {"id": "</s>", "type_id": 0}},
                                    {"Sequence": {"id": "B", "type_id": 0}}, {"SpecialToken": {"id": "</s>", "type_id": 0}}],
                           "special_tokens": {"</s>": {"id": "</s>", "ids": [1], "tokens": ["</s>"]}}},
        "decoder": {"type": "Metaspace", "replacement": "\u2581", "add_prefix_space": True, "prepend_scheme": "always"},
        "model": {"type": "Unigram", "unk_id": 2, "vocab": vocab, "byte_fallback": False},
    }
    out_dir = os.path.join(ROOT, "tokenizers", "t5-sp")
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "tokenizer.json.gz"), "wb") as f:
        f.write(gzip.compress(json.dumps(tok, ensure_ascii=False).encode(), 9, mtime=0))

    vectors = []
    for i, t in enumerate(texts):
        ids = sp.encode(t)
        for add in (False, True):
            vectors.append({"id": f"t5-sp-{i}-{'special' if add else 'plain'}",
                            "tokenizer": "../tokenizers/t5-sp/tokenizer.json.gz",
                            "input": t, "add_special_tokens": add,
                            "expected_ids": ids + ([1] if add else [])})
    with open(os.path.join(ROOT, "vectors", "t5-sp.json"), "w", encoding="utf-8") as f:
        json.dump(vectors, f, ensure_ascii=False, indent=1)
        f.write("\n")
    print(f"t5-sp: {len(vocab)} pieces, charsmap {len(proto.normalizer_spec.precompiled_charsmap)} bytes, {len(vectors)} vectors")


if __name__ == "__main__":
    main()
