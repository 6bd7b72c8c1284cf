#!/usr/bin/env python3
"""Hugging Face transformers next to tputool, on the same checkpoint.

Two subcommands, both writing one JSON file (scripts/device-check.sh runs them):

  tokens  greedy generation with transformers (float32) for the prompts of a
          `tputool generate --json` output, compared id by id with tputool's;
          exit 1 on a difference.
  bench   decode tokens/s of LlamaForCausalLM-style checkpoints on a CUDA GPU,
          eager and torch.compile (static cache, mode="reduce-overhead"), with
          the workload of `tputool bench`: synthetic prompts of exactly
          --prompt-len ids (deterministic, no special ids), exactly --gen-len
          new tokens, greedy, EOS ignored.

Decode tok/s = batch x (gen_len - 1) / (time of a gen_len-token generate
minus time of a 1-token generate): the prefill and the first token are
taken out, as tputool's ITL-based figure does. Medians over --repeat runs
after the warm-up runs (which compile under torch.compile).

  python3 scripts/hf-compare.py tokens --model testdata/stories260K-hf --tputool-json gen.json --out t.json
  python3 scripts/hf-compare.py bench --model /tmp/llama-110m --batch 1,8 --out b.json
"""

import argparse
import json
import statistics
import sys
import time


def _torch():
    import torch  # imported late so that --help works without torch
    import transformers

    return torch, transformers


def tokens(args):
    torch, transformers = _torch()
    with open(args.tputool_json) as f:
        ref = json.load(f)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    model = transformers.AutoModelForCausalLM.from_pretrained(args.model, torch_dtype=torch.float32).to(device).eval()
    rows, bad = [], 0
    for i, r in enumerate(ref):
        prompt = r["prompt_token_ids"]
        want = r["token_ids"]
        ids = torch.tensor([prompt], device=device)
        with torch.no_grad():
            out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=len(want),
                                 min_new_tokens=len(want), do_sample=False, eos_token_id=None, pad_token_id=0)
        got = out[0, len(prompt):].tolist()
        first = next((k for k, (a, b) in enumerate(zip(want, got)) if a != b), None)
        if first is not None or len(got) != len(want):
            bad += 1
        rows.append({"prompt": i, "prompt_token_ids": prompt, "tputool": want, "transformers": got,
                     "first_difference": first})
    result = {"model": args.model, "device": device, "dtype": "float32",
              "transformers": transformers.__version__, "torch": torch.__version__, "equal": bad == 0, "rows": rows}
    with open(args.out, "w") as f:
        json.dump(result, f, indent=1)
    for r in rows:
        if r["first_difference"] is not None:
            print(f"prompt {r['prompt']}: token {r['first_difference']} differs: "
                  f"transformers {r['transformers'][r['first_difference']:][:4]}, tputool {r['tputool'][r['first_difference']:][:4]}")
    return 0 if bad == 0 else 1


def synthetic_prompts(batch, length, vocab, special):
    """Deterministic ids in [0, vocab) without special ids, one row per prompt."""
    rows = []
    for b in range(batch):
        row, x = [], 12345 + 7919 * b
        while len(row) < length:
            x = (x * 6364136223846793005 + 1442695040888963407) % (1 << 64)
            tok = (x >> 33) % vocab
            if tok not in special:
                row.append(tok)
        rows.append(row)
    return rows


def bench(args):
    torch, transformers = _torch()
    if not torch.cuda.is_available():
        print("hf-compare bench: no CUDA device", file=sys.stderr)
        return 2
    dtype = {"bf16": torch.bfloat16, "f32": torch.float32}[args.dtype]
    cfg = transformers.AutoConfig.from_pretrained(args.model)
    special = set()
    for k in ("bos_token_id", "eos_token_id", "pad_token_id"):
        v = getattr(cfg, k, None)
        special.update(v if isinstance(v, list) else [v] if v is not None else [])
    out = {"model": args.model, "gpu": torch.cuda.get_device_name(0), "dtype": args.dtype,
           "transformers": transformers.__version__, "torch": torch.__version__,
           "prompt_len": args.prompt_len, "gen_len": args.gen_len, "rows": []}
    for mode in args.modes.split(","):
        model = transformers.AutoModelForCausalLM.from_pretrained(args.model, torch_dtype=dtype).to("cuda").eval()
        if mode == "compile":
            model.generation_config.cache_implementation = "static"
            if hasattr(transformers, "CompileConfig"):
                # transformers >= 4.48 compiles the decoding forward itself
                # when the cache is static (CompileConfig's defaults:
                # fullgraph, "reduce-overhead", i.e. CUDA graphs) and marks
                # each CUDA-graph step; wrapping model.forward by hand there
                # fails on transformers 5 ("accessing tensor output of
                # CUDAGraphs that has been overwritten").
                model.generation_config.compile_config = transformers.CompileConfig(
                    fullgraph=True, mode="reduce-overhead")
            else:
                model.forward = torch.compile(model.forward, mode="reduce-overhead", fullgraph=True)
        elif mode != "eager":
            raise SystemExit(f"--modes: {mode!r} is not eager or compile")
        for batch in [int(b) for b in args.batch.split(",")]:
            ids = torch.tensor(synthetic_prompts(batch, args.prompt_len, cfg.vocab_size, special), device="cuda")
            mask = torch.ones_like(ids)

            def gen(n):
                torch.cuda.synchronize()
                t = time.perf_counter()
                with torch.no_grad():
                    model.generate(ids, attention_mask=mask, max_new_tokens=n, min_new_tokens=n, do_sample=False,
                                   eos_token_id=None, pad_token_id=0)
                torch.cuda.synchronize()
                return time.perf_counter() - t

            t0 = time.perf_counter()
            for _ in range(args.warmup):
                gen(args.gen_len)
                gen(1)
            warmup = time.perf_counter() - t0
            full = [gen(args.gen_len) for _ in range(args.repeat)]
            first = [gen(1) for _ in range(args.repeat)]
            decode_s = max(statistics.median(full) - statistics.median(first), 1e-9)
            steps = args.gen_len - 1
            row = {"mode": "torch.compile" if mode == "compile" else "eager", "batch": batch,
                   "warmup_s": warmup, "prefill_tok_s": batch * args.prompt_len / statistics.median(first),
                   "decode_tok_s": batch * steps / decode_s, "itl_ms": 1000 * decode_s / steps,
                   "generate_s": full, "first_token_s": first}
            out["rows"].append(row)
            print(f"{row['mode']} batch {batch}: decode {row['decode_tok_s']:.1f} tok/s, ITL {row['itl_ms']:.2f} ms, "
                  f"warm-up {warmup:.1f} s", file=sys.stderr)
        del model
        torch.cuda.empty_cache()
    with open(args.out, "w") as f:
        json.dump(out, f, indent=1)
    return 0


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("tokens", help="compare greedy tokens with a `tputool generate --json` output")
    t.add_argument("--model", required=True)
    t.add_argument("--tputool-json", required=True)
    t.add_argument("--out", required=True)
    b = sub.add_parser("bench", help="decode tok/s, eager and torch.compile")
    b.add_argument("--model", required=True)
    b.add_argument("--batch", default="1,8")
    b.add_argument("--prompt-len", type=int, default=128)
    b.add_argument("--gen-len", type=int, default=32)
    b.add_argument("--repeat", type=int, default=3)
    b.add_argument("--warmup", type=int, default=2)
    b.add_argument("--dtype", choices=["bf16", "f32"], default="bf16")
    b.add_argument("--modes", default="eager,compile")
    b.add_argument("--out", required=True)
    args = p.parse_args()
    return tokens(args) if args.cmd == "tokens" else bench(args)


if __name__ == "__main__":
    sys.exit(main())
