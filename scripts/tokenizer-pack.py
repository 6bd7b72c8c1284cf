#!/usr/bin/env python3
"""Compress and, for Gemma 3, trim the tokenizer.json files written by
scripts/tokenizer-gen-vectors.js (not run by the tests).

  python3 scripts/tokenizer-pack.py

Gemma 3's tokenizer.json is 33 MB (5.4 MB gzipped). The trimmed copy keeps
the whole vocabulary, every added token and every other component, and
only a subset of the merges, in their original order: the first KEEP_FIRST
merges plus every merge whose result is a substring of a token in the
expected ids of the Gemma 3 vectors. Every merge that BPE applies while
encoding a vector input produces such a substring, and dropping merges that
are never applied does not change the result (the relative order of the
remaining ranks is unchanged), so the trimmed file encodes every vector
input exactly like the full one. Texts outside the vectors may encode
differently with the trimmed file: use the full one for anything else.
"""
import gzip, json, os, sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "loader", "tokenizer", "testdata")
KEEP_FIRST = 40000


def pack(path, data):
    with open(path, "wb") as f:
        f.write(gzip.compress(data, 9, mtime=0))


def main():
    for name in ["qwen3", "llama3", "llama2", "gemma3"]:
        src = os.path.join(ROOT, "tokenizers", name, "tokenizer.json")
        if not os.path.exists(src):
            print(f"{name}: {src} missing (run tokenizer-gen-vectors.js first)", file=sys.stderr)
            continue
        raw = open(src, "rb").read()
        if name == "gemma3":
            tok = json.loads(raw)
            vocab = tok["model"]["vocab"]
            id_to_tok = {i: t for t, i in vocab.items()}
            subs = set()
            vecs = json.load(open(os.path.join(ROOT, "vectors", "gemma3.json")))
            for v in vecs:
                for i in v["expected_ids"]:
                    t = id_to_tok.get(i)
                    if t is None:
                        continue
                    for a in range(len(t)):
                        for b in range(a + 2, len(t) + 1):
                            subs.add(t[a:b])
            merges = tok["model"]["merges"]
            kept = []
            for r, m in enumerate(merges):
                a, b = (m.split(" ", 1) if isinstance(m, str) else m)
                if r < KEEP_FIRST or (a + b) in subs:
                    kept.append(m)
            print(f"gemma3: kept {len(kept)} of {len(merges)} merges", file=sys.stderr)
            tok["model"]["merges"] = kept
            raw = json.dumps(tok, ensure_ascii=False, separators=(",", ":")).encode()
        pack(src + ".gz", raw)
        os.remove(src)
        print(f"{name}: {os.path.getsize(src + '.gz')} bytes", file=sys.stderr)


if __name__ == "__main__":
    main()
