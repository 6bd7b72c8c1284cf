package tokenizer

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/tputool/tputool/internal/errs"
	"github.com/tputool/tputool/loader/tokenizer/chat"
)

// TestChatTemplatesMatchReference renders the real Qwen3, Llama 3 and
// Gemma 3 chat templates and compares with @huggingface/jinja's output
// (testdata/chat, written by scripts/tokenizer-gen-vectors.js).
func TestChatTemplatesMatchReference(t *testing.T) {
	for _, name := range []string{"qwen3", "llama3", "gemma3"} {
		t.Run(name, func(t *testing.T) {
			tk, err := LoadDir(filepath.Join("testdata", "tokenizers", name))
			if err != nil {
				t.Fatal(err)
			}
			tmpl, err := tk.ChatTemplate("")
			if err != nil {
				t.Fatal(err)
			}
			data, err := os.ReadFile(filepath.Join("testdata", "chat", name+".json"))
			if err != nil {
				t.Fatal(err)
			}
			type message struct {
				Role      string          `json:"role"`
				Content   string          `json:"content"`
				ToolCalls json.RawMessage `json:"tool_calls"`
			}
			var ref struct {
				Messages []message
				Cases    []struct {
					Vars     map[string]any
					Messages []message
					Tools    []json.RawMessage
					Expected string
				}
			}
			if err := json.Unmarshal(data, &ref); err != nil {
				t.Fatal(err)
			}
			if len(ref.Cases) == 0 {
				t.Fatal("no cases")
			}
			for _, c := range ref.Cases {
				var in chat.Input
				msgs := ref.Messages
				if c.Messages != nil {
					msgs = c.Messages
				}
				for _, m := range msgs {
					cm := chat.Message{Role: m.Role, Content: m.Content}
					if m.ToolCalls != nil {
						cm.Extra = map[string]any{"tool_calls": m.ToolCalls}
					}
					in.Messages = append(in.Messages, cm)
				}
				for _, tool := range c.Tools {
					in.Tools = append(in.Tools, tool)
				}
				if c.Vars["no_system"] == true {
					in.Messages = in.Messages[1:]
				}
				in.AddGenerationPrompt, _ = c.Vars["add_generation_prompt"].(bool)
				if v, ok := c.Vars["enable_thinking"].(bool); ok {
					in.EnableThinking = &v
				}
				got, err := tmpl.Render(context.Background(), in)
				if err != nil {
					t.Fatalf("%v: %v", c.Vars, err)
				}
				if got != c.Expected {
					t.Errorf("%v:\n got %q\nwant %q", c.Vars, got, c.Expected)
				}
			}
		})
	}
}

func TestChatTemplateMissing(t *testing.T) {
	tk, err := LoadDir(filepath.Join("testdata", "tokenizers", "llama2"))
	if err != nil {
		t.Fatal(err)
	}
	_, err = tk.ChatTemplate("")
	if !errors.Is(err, errs.ErrUnsupported) || !errors.Is(err, ErrNoChatTemplate) {
		t.Fatalf("got %v, want ErrUnsupported and ErrNoChatTemplate", err)
	}
}
