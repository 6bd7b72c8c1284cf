"""Writes the benchmark scripts' tokenizer: the byte-level BPE of
loader/tokenizer/testdata/tokenizers/qwen2-tiny padded with plain added
tokens <|pad_N|> up to a model's vocabulary, so that every id the random
model picks decodes to text both tputool and ollama stream.

    python3 scripts/pad-tokenizer.py OUT VOCAB [ID=CONTENT ...]

ID=CONTENT pairs name ids that are special tokens with that content
instead of pads (the ones ollama's converter looks for)."""
import json
import sys

out, vocab = sys.argv[1], int(sys.argv[2])
special = {int(k): v for k, v in (a.split("=", 1) for a in sys.argv[3:])}
t = json.load(open("loader/tokenizer/testdata/tokenizers/qwen2-tiny/tokenizer.json"))
n = 1 + max([t["model"]["vocab"][k] for k in t["model"]["vocab"]] + [a["id"] for a in t["added_tokens"]])
for i in range(n, vocab):
    t["added_tokens"].append({"id": i, "content": special.get(i, "<|pad_%d|>" % i), "single_word": False, "lstrip": False,
                              "rstrip": False, "normalized": False, "special": i in special})
json.dump(t, open(out, "w"))
