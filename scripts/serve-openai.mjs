// Drives a running `tputool serve` with the official openai npm client, as a
// manual check that the server speaks the API the way that client expects
// (docs/serve.md): lists the models, runs a chat completion (plain and
// streamed), a completion (plain and streamed), and asks for an unknown
// model (a 404). It prints what it gets and exits non-zero on any failure.
//
//   npm ci --prefix scripts                      # once: installs openai into scripts/node_modules
//   tputool serve --model ./testdata/stories260K-hf &
//   node scripts/serve-openai.mjs                # http://127.0.0.1:8000, the first model listed
//   node scripts/serve-openai.mjs --url http://127.0.0.1:8123 --model NAME --max-tokens 32
//
// The API key is TPUTOOL_API_KEY when set. A model without a chat template
// answers the chat requests with 400 naming it: the script reports that as
// skipped unless --require-chat is given.
import OpenAI from "openai";
import { parseArgs } from "node:util";

const { values: args } = parseArgs({
  options: {
    url: { type: "string", default: "http://127.0.0.1:8000" },
    model: { type: "string" },
    "max-tokens": { type: "string", default: "24" },
    "require-chat": { type: "boolean", default: false },
  },
});
const maxTokens = Number(args["max-tokens"]);

const client = new OpenAI({
  baseURL: args.url.replace(/\/+$/, "") + "/v1",
  apiKey: process.env.TPUTOOL_API_KEY || "no-key",
  maxRetries: 0,
  timeout: 120_000,
});

let failures = 0;

async function check(name, fn) {
  const start = performance.now();
  try {
    const note = await fn();
    const ms = (performance.now() - start).toFixed(0);
    console.log(`ok    ${name} (${ms} ms)${note ? ": " + note : ""}`);
  } catch (err) {
    if (err instanceof Skip) {
      console.log(`skip  ${name}: ${err.message}`);
      return;
    }
    failures++;
    const status = err instanceof OpenAI.APIError ? ` [HTTP ${err.status}]` : "";
    console.log(`FAIL  ${name}${status}: ${err.message}`);
  }
}

class Skip extends Error {}

function expect(cond, what) {
  if (!cond) throw new Error(what);
}

// noTemplate turns the 400 of a model without a chat template into a skip.
function noTemplate(err) {
  if (!args["require-chat"] && err instanceof OpenAI.BadRequestError && /chat template/i.test(err.message)) {
    throw new Skip(`the model has no chat template (${err.message})`);
  }
  throw err;
}

const show = (s) => JSON.stringify(s.length > 80 ? s.slice(0, 79) + "…" : s);

let model = args.model;

await check("GET /v1/models", async () => {
  const ids = [];
  for await (const m of client.models.list()) ids.push(m.id);
  expect(ids.length > 0, "no model listed");
  model ??= ids[0];
  expect(ids.includes(model), `--model ${model} is not listed (have ${ids.join(", ")})`);
  return ids.join(", ");
});
if (!model) {
  console.log("no model to ask; stopping");
  process.exit(1);
}

const messages = [
  { role: "system", content: "You are brief." },
  { role: "user", content: "Tell me a story about a cat." },
];

await check("POST /v1/chat/completions", async () => {
  const r = await client.chat.completions
    .create({ model, messages, max_tokens: maxTokens, temperature: 0 })
    .catch(noTemplate);
  const c = r.choices[0];
  expect(r.object === "chat.completion", `object ${r.object}`);
  expect(c.message.role === "assistant", `role ${c.message.role}`);
  expect(["stop", "length"].includes(c.finish_reason), `finish_reason ${c.finish_reason}`);
  expect(r.usage.total_tokens === r.usage.prompt_tokens + r.usage.completion_tokens, "usage does not add up");
  return `${show(c.message.content)} (${c.finish_reason}, ${r.usage.completion_tokens} tokens)`;
});

await check("POST /v1/chat/completions stream", async () => {
  const stream = await client.chat.completions
    .create({ model, messages, max_tokens: maxTokens, temperature: 0, stream: true, stream_options: { include_usage: true } })
    .catch(noTemplate);
  let text = "", chunks = 0, finish = null, usage = null;
  for await (const chunk of stream) {
    expect(chunk.object === "chat.completion.chunk", `object ${chunk.object}`);
    if (chunk.usage) usage = chunk.usage;
    for (const c of chunk.choices) {
      if (c.delta?.content) { text += c.delta.content; chunks++; }
      if (c.finish_reason) finish = c.finish_reason;
    }
  }
  expect(chunks > 0, "no content chunk");
  expect(finish, "no finish_reason");
  return `${show(text)} (${chunks} chunks, ${finish}${usage ? `, ${usage.completion_tokens} tokens` : ""})`;
});

await check("POST /v1/completions", async () => {
  const r = await client.completions.create({ model, prompt: "Once upon a time", max_tokens: maxTokens, temperature: 0 });
  const c = r.choices[0];
  expect(r.object === "text_completion", `object ${r.object}`);
  expect(c.text.length > 0, "empty text");
  expect(r.usage.completion_tokens > 0 && r.usage.completion_tokens <= maxTokens, `completion_tokens ${r.usage.completion_tokens}`);
  return `${show(c.text)} (${c.finish_reason}, ${r.usage.completion_tokens} tokens)`;
});

await check("POST /v1/completions stream, n=2, seed", async () => {
  const stream = await client.completions.create({
    model, prompt: "Once upon a time", max_tokens: maxTokens, temperature: 0.8, seed: 7, n: 2, stream: true,
  });
  const texts = ["", ""];
  const finish = [null, null];
  for await (const chunk of stream) {
    for (const c of chunk.choices) {
      texts[c.index] += c.text;
      if (c.finish_reason) finish[c.index] = c.finish_reason;
    }
  }
  expect(finish.every(Boolean), `finish_reason ${finish}`);
  return texts.map((t, i) => `[${i}] ${show(t)}`).join(" ");
});

await check("unknown model is a 404", async () => {
  try {
    await client.completions.create({ model: "no-such-model", prompt: "x", max_tokens: 1 });
  } catch (err) {
    expect(err instanceof OpenAI.NotFoundError, `got ${err.constructor.name}: ${err.message}`);
    return err.message;
  }
  throw new Error("the request succeeded");
});

console.log(failures ? `${failures} check(s) failed` : "all checks passed");
process.exit(failures ? 1 : 0);
