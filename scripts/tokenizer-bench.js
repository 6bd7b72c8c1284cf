#!/usr/bin/env node
// JS reference half of scripts/tokenizer-bench.sh: encode throughput of
// @lenml/tokenizers (transformers.js fork) on the benchmark text, one
// paragraph per call, like BenchmarkEncode* in loader/tokenizer.
"use strict";
const fs = require("fs");
const text = fs.readFileSync(process.argv[2], "utf8");
const paras = text.split("\n\n");
const bytes = paras.reduce((n, p) => n + Buffer.byteLength(p, "utf8"), 0);
for (const name of ["qwen3", "llama3"]) {
  const tok = require(`@lenml/tokenizer-${name}`).fromPreTrained();
  for (let round = 0; round < 2; round++) { // round 0 warms the JIT and caches
    const t0 = process.hrtime.bigint();
    let n = 0;
    for (const p of paras) n += tok.encode(p, { add_special_tokens: false }).length;
    const s = Number(process.hrtime.bigint() - t0) / 1e9;
    if (round === 1) console.log(`JS ${name}: ${(bytes / 1e6 / s).toFixed(2)} MB/s (${bytes} bytes, ${n} tokens, ${s.toFixed(2)} s)`);
  }
}
