#!/usr/bin/python3
"""Trains small SentencePiece models and writes them, with the ids that
SentencePiece itself gives, as fixtures for loader/tokenizer's reading of
tokenizer.model files (spmodel.go). Not run by the tests.

Needs Debian's python3-sentencepiece and python3-protobuf (apt-get install
python3-sentencepiece python3-protobuf), hence /usr/bin/python3:

  /usr/bin/python3 scripts/tokenizer-gen-spm.py

Each model goes to loader/tokenizer/testdata/spm/NAME/ as tokenizer.model.gz
(gzip keeps the charsmap small; LoadDir reads either name), with a
tokenizer_config.json when the case has one, and vectors.json: for each text
the ids with and without the special tokens, and the decoded text.

The expected ids follow what transformers does with such a folder:
- LlamaTokenizer (legacy, the default): the text is split at the added
  tokens (the model's control and user-defined pieces), each other piece
  encoded by SentencePiece with its dummy prefix; BOS first.
- LlamaTokenizer with legacy false: the same, but only the text's first
  piece gets the dummy prefix, and not when it starts with a space (the
  fast tokenizer's Metaspace, which transformers loads by default; the
  slow class adds one there); a copy of the model without the prefix
  encodes the others.
- other classes (the remote-code tokenizers that call SentencePiece
  directly, or no tokenizer_config.json): the text split at the special
  tokens the slow class registers (BOS, EOS and the unknown piece), and
  SentencePiece on each piece between them, which reads a control piece
  in the text as text and a user-defined one as one piece; BOS first.
"""
import gzip, json, os, random, re, tempfile

import sentencepiece as spm
from sentencepiece import sentencepiece_model_pb2 as pb

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "loader", "tokenizer", "testdata", "spm")

rng = random.Random(11)
words = ("the quick brown fox jumps over lazy dog hello world model tokenizer sentence piece language "
         "of and to in is that for it as with was on be by at this from have or one had not but what all "
         "were when we there can an your which their said if do will each about how up out them then she "
         "many some so these would other def return print import class self value data").split()
corpus = []
for _ in range(3000):
    n = rng.randint(3, 14)
    line = " ".join(rng.choice(words) for _ in range(n))
    if rng.random() < 0.3:
        line = line.capitalize() + rng.choice([".", "!", "?", ",", ":"])
    if rng.random() < 0.15:
        line += " " + str(rng.randint(0, 100000))
    if rng.random() < 0.05:
        line = "    " + line + "()"
    corpus.append(line)
corpus += ["Ünïcödé café naïve résumé", "Straße groß", "数字 123 和 中文", "ｆｕｌｌｗｉｄｔｈ"] * 3

texts = [
    "Hello world", "The quick brown fox jumps over the lazy dog.", "", " ", "   ", "x",
    "  leading and   multiple   spaces  ", "tabs\tand\nnewlines\n\nhere", "def f(x):\n    return x\n",
    "unknown ☃ snowman and 😀 emoji", "数字 123 和 中文", "Ünïcödé café naïve résumé", "ｈｅｌｌｏ ｗｏｒｌｄ",
    "numbers 3.14159 and 42 and 100000", "punctuation!!! ??? ... ,,,", "MiXeD CaSe WoRdS",
    "ﬁne ﬂow ① ™ x²", "end with space ", "<|im_start|>user\nhello<|im_end|>\n<|im_start|>assistant\n",
    "a<|im_end|>b", "<s>hello</s> world", "zero\u200bwidth non\u00a0breaking", "typed <reserved_1> control",
]

CASES = [
    # name, trainer args, tokenizer_config.json (None: no file)
    ("llama-bpe", dict(model_type="bpe", vocab_size=700, byte_fallback=True, split_digits=True,
                       normalization_rule_name="identity", remove_extra_whitespaces=False,
                       user_defined_symbols=["<|im_start|>", "<|im_end|>"]),
     {"tokenizer_class": "LlamaTokenizer", "add_bos_token": True, "add_eos_token": False,
      "bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"}),
    ("llama-bpe-nonlegacy", dict(model_type="bpe", vocab_size=700, byte_fallback=True, split_digits=True,
                                 normalization_rule_name="identity", remove_extra_whitespaces=False,
                                 user_defined_symbols=["<|im_start|>", "<|im_end|>"]),
     {"tokenizer_class": "LlamaTokenizer", "legacy": False, "add_eos_token": True}),
    ("unigram-nfkc", dict(model_type="unigram", vocab_size=500, byte_fallback=False,
                          normalization_rule_name="nmt_nfkc"),
     None),
    ("bpe-noprefix", dict(model_type="bpe", vocab_size=600, byte_fallback=True, add_dummy_prefix=False,
                          normalization_rule_name="identity", remove_extra_whitespaces=False,
                          control_symbols=["<reserved_1>"]),
     {"tokenizer_class": "BaichuanTokenizer", "auto_map": {"AutoTokenizer": ["tokenization_baichuan.BaichuanTokenizer", None]}}),
    ("bpe-nobyte", dict(model_type="bpe", vocab_size=500, byte_fallback=False,
                        normalization_rule_name="identity", remove_extra_whitespaces=True,
                        user_defined_symbols=["<|im_end|>"]),
     {"tokenizer_class": "InternLM2Tokenizer", "add_bos_token": False}),
]


def split_added(text, added):
    if not added:
        return [(False, text)]
    pat = re.compile("|".join(re.escape(a) for a in sorted(added, key=len, reverse=True)))
    out, pos = [], 0
    for m in pat.finditer(text):
        if m.start() > pos:
            out.append((False, text[pos:m.start()]))
        out.append((True, m.group(0)))
        pos = m.end()
    if pos < len(text):
        out.append((False, text[pos:]))
    return out


def main():
    for name, args, cfg in CASES:
        with tempfile.TemporaryDirectory() as d:
            inp = os.path.join(d, "corpus.txt")
            with open(inp, "w", encoding="utf-8") as f:
                f.write("\n".join(corpus) + "\n")
            prefix = os.path.join(d, "m")
            spm.SentencePieceTrainer.train(input=inp, model_prefix=prefix, character_coverage=0.9995,
                                           minloglevel=2, **args)
            raw = open(prefix + ".model", "rb").read()
        proto = pb.ModelProto()
        proto.ParseFromString(raw)
        # The temporary folder's paths would make every run's file differ.
        proto.trainer_spec.ClearField("input")
        proto.trainer_spec.ClearField("model_prefix")
        raw = proto.SerializeToString()
        sp = spm.SentencePieceProcessor(model_proto=raw)
        nopre = pb.ModelProto()
        nopre.CopyFrom(proto)
        nopre.normalizer_spec.add_dummy_prefix = False
        sp_nopre = spm.SentencePieceProcessor(model_proto=nopre.SerializeToString())
        cfg_ = cfg or {}
        llama = cfg_.get("tokenizer_class") == "LlamaTokenizer"
        if llama:  # LlamaConverter adds every control and user-defined piece
            added = {p.piece: i for i, p in enumerate(proto.pieces) if p.type in (3, 4)}
        else:  # the slow class splits at its special tokens only; SentencePiece reads the rest
            added = {proto.pieces[i].piece: i for i in (sp.bos_id(), sp.eos_id(), sp.unk_id()) if i >= 0}
        nonlegacy = llama and cfg_.get("legacy") is False
        add_bos = cfg_.get("add_bos_token", True)
        add_eos = cfg_.get("add_eos_token", False)
        vectors = []
        for t in texts:
            ids = []
            for i, (is_added, part) in enumerate(split_added(t, added)):
                if is_added:
                    ids.append(added[part])
                elif nonlegacy and (i > 0 or part.startswith(" ")):
                    ids += sp_nopre.encode(part)
                else:
                    ids += sp.encode(part)
            with_special = ([sp.bos_id()] if add_bos else []) + ids + ([sp.eos_id()] if add_eos else [])
            vectors.append({"input": t, "ids": ids, "ids_special": with_special, "decode": sp.decode(ids)})
        out = os.path.join(ROOT, name)
        os.makedirs(out, exist_ok=True)
        with open(os.path.join(out, "tokenizer.model.gz"), "wb") as f:
            f.write(gzip.compress(raw, 9, mtime=0))
        if cfg is not None:
            with open(os.path.join(out, "tokenizer_config.json"), "w") as f:
                json.dump(cfg, f, indent=1)
                f.write("\n")
        with open(os.path.join(out, "vectors.json"), "w", encoding="utf-8") as f:
            f.write("[\n" + ",\n".join(json.dumps(v, ensure_ascii=False) for v in vectors) + "\n]\n")
        print(f"{name}: {len(proto.pieces)} pieces, {len(raw)} bytes, charsmap {len(proto.normalizer_spec.precompiled_charsmap)}")


if __name__ == "__main__":
    main()
