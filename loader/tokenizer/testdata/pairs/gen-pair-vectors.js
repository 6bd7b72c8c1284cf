#!/usr/bin/env node
// Generates the pair vectors of loader/tokenizer (pair_test.go) with the
// official Node binding of Hugging Face tokenizers: encode(a, b) with and
// without special tokens, and with truncation {maxLength, LongestFirst}
// (what transformers' fast tokenizer(a, b, truncation=True, max_length=n)
// sets), recording getIds() and getTypeIds().
//
// Not run by the tests. Usage (install OUTSIDE the repo):
//   mkdir -p /tmp/hftok && cd /tmp/hftok && npm init -y &&
//   npm install tokenizers@0.23.2
//   NODE_PATH=/tmp/hftok/node_modules node loader/tokenizer/testdata/pairs/gen-pair-vectors.js
//
// It writes loader/tokenizer/testdata/pairs/<name>.json, and first the
// fixtures it derives to loader/tokenizer/testdata/tokenizers/<name>/:
//   bert-processing  bert-pair (pipeline/testkit/bertref.WriteTokenizer's
//                    tokenizer with 110 tokens, copied there once) with a
//                    BertProcessing post-processor instead of its template
//   xlmr-tiny        XLM-RoBERTa's layout (Unigram, Metaspace, the
//                    "<s> $A </s> </s> $B </s>" template of bge-reranker)
//   odd-template     xlmr-tiny with a template that puts $B first, uses
//                    type ids 0-3 and a special token of two ids
//   roberta-tiny     RoBERTa's layout (byte-level BPE, RobertaProcessing)
//   llama31-tiny     roberta-tiny's model with Llama 3.1's post-processor,
//                    Sequence[ByteLevel, TemplateProcessing]
//   metaspace-first  xlmr-tiny with Metaspace's prepend_scheme "first"
"use strict";
const fs = require("fs");
const path = require("path");
const { Tokenizer } = require("tokenizers");

const tdir = path.resolve(__dirname, "..");
const tokdir = path.join(tdir, "tokenizers");

function readJSON(name) {
  return JSON.parse(fs.readFileSync(path.join(tokdir, name, "tokenizer.json"), "utf8"));
}

function writeFixture(name, obj) {
  fs.mkdirSync(path.join(tokdir, name), { recursive: true });
  fs.writeFileSync(path.join(tokdir, name, "tokenizer.json"), JSON.stringify(obj, null, 1) + "\n");
}

function added(id, content, extra) {
  return { id, content, single_word: false, lstrip: false, rstrip: false, normalized: false, special: true, ...extra };
}

const sp = (id, type_id = 0) => ({ SpecialToken: { id, type_id } });
const seq = (id, type_id = 0) => ({ Sequence: { id, type_id } });
const specialTokens = (m) =>
  Object.fromEntries(Object.entries(m).map(([k, ids]) => [k, { id: k, ids, tokens: ids.map(() => k) }]));

// ---------------------------------------------------------------------------
// Fixtures

function bertProcessing() {
  const t = readJSON("bert-pair");
  const v = t.model.vocab;
  t.post_processor = { type: "BertProcessing", sep: ["[SEP]", v["[SEP]"]], cls: ["[CLS]", v["[CLS]"]] };
  return t;
}

function xlmrTiny() {
  // ids 0-3 as XLM-R has them, <mask> last.
  const vocab = [["<s>", 0], ["<pad>", 0], ["</s>", 0], ["<unk>", 0], ["\u2581", -2]];
  const words = ["the", "a", "is", "what", "tpu", "matrix", "processor", "query", "document", "hello", "world",
    "how", "are", "you", "model", "run", "search", "text", "of", "and", "to", "in"];
  words.forEach((w, i) => vocab.push(["\u2581" + w, -6 - i / 10]));
  const chars = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.,!?'-:;()\"";
  for (const c of chars) vocab.push([c, -8]);
  for (const c of "eiost") vocab.push(["\u2581" + c, -7]);
  vocab.push(["<mask>", 0]);
  const mask = vocab.length - 1;
  return {
    version: "1.0",
    truncation: null,
    padding: null,
    added_tokens: [added(0, "<s>"), added(1, "<pad>"), added(2, "</s>"), added(3, "<unk>"), added(mask, "<mask>", { lstrip: true })],
    normalizer: { type: "Sequence", normalizers: [{ type: "NFKC" }, { type: "Replace", pattern: { Regex: " {2,}" }, content: " " }] },
    pre_tokenizer: { type: "Metaspace", replacement: "\u2581", prepend_scheme: "always", split: true },
    post_processor: {
      type: "TemplateProcessing",
      single: [sp("<s>"), seq("A"), sp("</s>")],
      pair: [sp("<s>"), seq("A"), sp("</s>"), sp("</s>"), seq("B"), sp("</s>")],
      special_tokens: specialTokens({ "<s>": [0], "</s>": [2] }),
    },
    decoder: { type: "Metaspace", replacement: "\u2581", prepend_scheme: "always", split: true },
    model: { type: "Unigram", unk_id: 3, vocab, byte_fallback: false },
  };
}

function oddTemplate() {
  const t = xlmrTiny();
  t.post_processor = {
    type: "TemplateProcessing",
    single: [sp("[X]", 1), seq("A", 2), sp("</s>", 3)],
    pair: [seq("B", 1), sp("[X]", 0), seq("A", 2), sp("</s>", 3)],
    special_tokens: specialTokens({ "[X]": [0, 1], "</s>": [2] }),
  };
  return t;
}

// Metaspace with prepend_scheme "first" (Llama 2 non-legacy, Mistral): "▁"
// goes before the start of a text, each text of a pair being one.
function metaspaceFirst() {
  const t = xlmrTiny();
  t.pre_tokenizer.prepend_scheme = "first";
  t.decoder.prepend_scheme = "first";
  return t;
}

// GPT-2's byte-to-character table: printable Latin-1 bytes stand for
// themselves, the others for 256, 257, ... in byte order.
function byteChars() {
  const keep = (b) => (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff);
  const out = [];
  let next = 256;
  for (let b = 0; b < 256; b++) out.push(String.fromCodePoint(keep(b) ? b : next++));
  return out;
}

function robertaTiny() {
  const vocab = { "<s>": 0, "<pad>": 1, "</s>": 2, "<unk>": 3 };
  let id = 4;
  for (const c of byteChars()) vocab[c] = id++;
  const merges = ["\u0120 t", "h e", "\u0120t he", "\u0120 a", "\u0120 w", "o r", "\u0120w or", "l d", "\u0120wor ld",
    "\u0120 i", "\u0120i s", "e r", "\u0120 q", "u er", "\u0120q uer", "\u0120quer y", "i n", "\u0120 d", "o c"];
  for (const m of merges) vocab[m.replace(" ", "")] = id++;
  const mask = id;
  vocab["<mask>"] = mask;
  const bl = { type: "ByteLevel", add_prefix_space: false, trim_offsets: true, use_regex: true };
  return {
    version: "1.0",
    truncation: null,
    padding: null,
    added_tokens: [added(0, "<s>"), added(1, "<pad>"), added(2, "</s>"), added(3, "<unk>"), added(mask, "<mask>", { lstrip: true })],
    normalizer: null,
    pre_tokenizer: bl,
    post_processor: { type: "RobertaProcessing", sep: ["</s>", 2], cls: ["<s>", 0], trim_offsets: true, add_prefix_space: false },
    decoder: bl,
    model: { type: "BPE", dropout: null, unk_token: null, continuing_subword_prefix: "", end_of_word_suffix: "",
      fuse_unk: false, byte_fallback: false, vocab, merges },
  };
}

function llama31Tiny() {
  const t = robertaTiny();
  const n = Object.keys(t.model.vocab).length;
  t.model.vocab["<|begin_of_text|>"] = n;
  t.model.vocab["<|end_of_text|>"] = n + 1;
  t.added_tokens.push(added(n, "<|begin_of_text|>"), added(n + 1, "<|end_of_text|>"));
  t.post_processor = {
    type: "Sequence",
    processors: [
      { type: "ByteLevel", add_prefix_space: true, trim_offsets: false, use_regex: true },
      {
        type: "TemplateProcessing",
        single: [sp("<|begin_of_text|>"), seq("A")],
        pair: [sp("<|begin_of_text|>"), seq("A"), sp("<|begin_of_text|>", 1), seq("B", 1)],
        special_tokens: specialTokens({ "<|begin_of_text|>": [n] }),
      },
    ],
  };
  return t;
}

// ---------------------------------------------------------------------------
// Vectors

const long1 =
  "A TPU is a matrix processor: it runs the model on large tiles of numbers, and the search for " +
  "the right query text is what this sentence is about, with more words to make it long.";
const long2 =
  "What is the document about? It is about the vector search of a query, the model that runs it, " +
  "and the processor: hello world, again and again, to be long enough for truncation.";

const pairs = [
  ["", ""],
  ["hello", ""],
  ["", "hello world"],
  ["Hello world", "How are you?"],
  ["what is a tpu?", "A TPU is a matrix processor that runs the model."],
  [long1, "short query"],
  ["what is the query?", long2],
  [long1, long2],
  ["a b c d e f", "g h i j k l"],
  ["  leading spaces", " one leading space"],
  ["Ünïcödé  text", "你好，世界"],
];

// Special tokens written in the text, per fixture.
const inText = {
  "bert-pair": ["[SEP] inside [CLS]", "doc [MASK] end"],
  "bert-processing": ["[SEP] inside [CLS]", "doc [MASK] end"],
  "xlmr-tiny": ["</s> inside <s>", "doc <mask> end"],
  "roberta-tiny": ["</s> inside <s>", "doc <mask> end"],
  "llama31-tiny": ["<|begin_of_text|>inside", "doc <|end_of_text|>"],
  "clip-tiny": ["<|startoftext|>inside", "doc <|endoftext|>"],
  "llama2": ["<s> inside </s>", "doc <unk>"],
};

// The fixtures, new and existing; big ones get fewer pairs.
const fixtures = [
  { name: "bert-pair", file: "bert-pair/tokenizer.json" },
  { name: "bert-processing", file: "bert-processing/tokenizer.json", make: bertProcessing },
  { name: "xlmr-tiny", file: "xlmr-tiny/tokenizer.json", make: xlmrTiny },
  { name: "odd-template", file: "odd-template/tokenizer.json", make: oddTemplate },
  { name: "roberta-tiny", file: "roberta-tiny/tokenizer.json", make: robertaTiny },
  { name: "llama31-tiny", file: "llama31-tiny/tokenizer.json", make: llama31Tiny },
  { name: "clip-tiny", file: "clip-tiny/tokenizer.json" },
  { name: "gpt2-tiny", file: "gpt2-tiny/tokenizer.json" },
  { name: "unigram-tiny", file: "unigram-tiny/tokenizer.json" },
  { name: "t5-sp", file: "t5-sp/tokenizer.json.gz", few: true },
  { name: "llama2", file: "llama2/tokenizer.json.gz", few: true },
  { name: "metaspace-first", file: "metaspace-first/tokenizer.json", make: metaspaceFirst },
];

function load(file) {
  const full = path.join(tokdir, file);
  if (file.endsWith(".gz")) return Tokenizer.fromString(require("zlib").gunzipSync(fs.readFileSync(full)).toString("utf8"));
  return Tokenizer.fromFile(full);
}

// The maximum lengths to truncate a pair of n tokens with special tokens,
// of which added are special: every one from added (no room for text) to
// added+9, then a few more up to n+1.
function maxLengths(added, n) {
  const out = new Set();
  for (let m = added; m <= Math.min(n + 1, added + 9); m++) out.add(m);
  for (const m of [Math.floor((added + n) / 2), n - 2, n - 1, n, n + 1]) if (m >= added) out.add(m);
  return [...out].sort((x, y) => x - y);
}

async function main() {
  for (const f of fixtures) {
    if (f.make) writeFixture(f.name, f.make());
    const tok = load(f.file);
    let list = f.few ? [pairs[3], pairs[5], pairs[6], pairs[7], pairs[9]] : pairs.slice();
    if (inText[f.name]) list = list.concat([inText[f.name]]);
    const added = (await tok.encode("", "", { addSpecialTokens: true })).getIds().length;
    const enc = (e) => `"ids": ${JSON.stringify(e.getIds())}, "type_ids": ${JSON.stringify(e.getTypeIds())}`;
    const groups = [];
    for (const [a, b] of list) {
      tok.disableTruncation();
      const plain = await tok.encode(a, b, { addSpecialTokens: false });
      const special = await tok.encode(a, b, { addSpecialTokens: true });
      const lines = [
        `  {"a": ${JSON.stringify(a)}, "b": ${JSON.stringify(b)},`,
        `   "plain": {${enc(plain)}},`,
        `   "special": {${enc(special)}},`,
        `   "truncated": [`,
      ];
      const cut = [];
      for (const m of maxLengths(added, special.getIds().length)) {
        tok.setTruncation(m, { strategy: "LongestFirst" });
        cut.push(`    {"max_length": ${m}, ${enc(await tok.encode(a, b, { addSpecialTokens: true }))}}`);
      }
      groups.push(lines.join("\n") + "\n" + cut.join(",\n") + "]}");
    }
    const text = `{"tokenizer": ${JSON.stringify("../tokenizers/" + f.file)}, "pair_special_tokens": ${added}, "pairs": [\n` +
      groups.join(",\n") + "\n]}\n";
    fs.writeFileSync(path.join(__dirname, `${f.name}.json`), text);
    console.log(f.name, groups.length);
  }
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
