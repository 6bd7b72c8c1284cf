// Command chat-template-check renders a chat template file with tputool's
// sandbox (loader/tokenizer/chat) on a fixed conversation (a system
// message, tools, an assistant tool call with thinking, a tool result, a
// final answer, a user turn, the generation prompt, reasoning_effort
// "high") and prints the text. scripts/chat-template-check.sh renders the
// same with Python's jinja2 in transformers' environment and compares:
//
//	scripts/chat-template-check.sh path/to/chat_template.jinja
//
// Real templates are not committed to this repository; this checks any
// template file by hand.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"

	"github.com/tputool/tputool/loader/tokenizer/chat"
)

// Conversation is the fixed input, shared with chat-template-check.py
// through -json.
const Conversation = `{
 "messages": [
  {"role": "system", "content": "Be brief."},
  {"role": "user", "content": "Weather in Paris?"},
  {"role": "assistant", "content": "", "thinking": "Need the tool.",
   "tool_calls": [{"function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
  {"role": "tool", "content": "{\"temp\": 21}"},
  {"role": "assistant", "content": "21 C."},
  {"role": "user", "content": "Thanks"}
 ],
 "tools": [{"type": "function", "function": {"name": "get_weather", "description": "Get the weather",
  "parameters": {"type": "object", "properties": {"city": {"type": "string", "description": "City name"},
   "unit": {"type": "string", "enum": ["c", "f"], "default": "c"}, "days": {"type": "array", "items": {"type": "integer"}},
   "opts": {"type": "object", "properties": {"a": {"type": "boolean"}}, "required": ["a"]}}, "required": ["city"]}}}],
 "reasoning_effort": "high"
}`

func main() {
	if len(os.Args) == 2 && os.Args[1] == "-json" {
		fmt.Print(Conversation)
		return
	}
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: chat-template-check TEMPLATE | -json")
		os.Exit(2)
	}
	if err := run(os.Args[1]); err != nil {
		fmt.Fprintln(os.Stderr, "chat-template-check:", err)
		os.Exit(1)
	}
}

func run(path string) error {
	src, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	t, err := chat.New(path, string(src), chat.Options{})
	if err != nil {
		return err
	}
	var conv struct {
		Messages []map[string]any  `json:"messages"`
		Tools    []json.RawMessage `json:"tools"`
		Effort   string            `json:"reasoning_effort"`
	}
	if err := json.Unmarshal([]byte(Conversation), &conv); err != nil {
		return err
	}
	var in chat.Input
	for _, m := range conv.Messages {
		msg := chat.Message{Extra: map[string]any{}}
		for k, v := range m {
			switch k {
			case "role":
				msg.Role = v.(string)
			case "content":
				msg.Content = v.(string)
			default:
				msg.Extra[k] = v
			}
		}
		in.Messages = append(in.Messages, msg)
	}
	for _, tool := range conv.Tools {
		in.Tools = append(in.Tools, tool)
	}
	in.AddGenerationPrompt = true
	in.Extra = map[string]any{"reasoning_effort": conv.Effort}
	out, err := t.Render(context.Background(), in)
	if err != nil {
		return err
	}
	fmt.Print(out)
	return nil
}
