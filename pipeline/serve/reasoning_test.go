package serve

import (
	"strings"
	"testing"
)

// The splitter gives the same reasoning and content whatever the pieces
// the text arrives in, tags split anywhere included.
func TestSplitterPieces(t *testing.T) {
	for _, c := range []struct {
		text, reasoning, content string
		inside                   bool
		call                     string // splitter.call
	}{
		{"<think>\nLet me see.\n</think>\n\nIt is 4.", "Let me see.\n", "It is 4.", false, ""},
		{"It is 4.", "", "It is 4.", false, ""},
		{"Plan first.</think>Done", "Plan first.", "Done", true, ""}, // the prompt opened the thought
		{"<think>never closed", "never closed", "", false, ""},       // cut by max_tokens
		{"Answer <think>quoted</think> tags", "", "Answer <think>quoted</think> tags", false, ""},
		{"<think></think>\n\nEmpty thought.", "", "Empty thought.", false, ""},
		{"<thin", "", "<thin", false, ""},                  // a prefix of the tag that never completes
		{" \n<think>x</think> Yes", "x", "Yes", false, ""}, // whitespace before the thought is not content
		{"  Hi <b>", "", "  Hi <b>", false, ""},            // nor is it dropped before an answer
		// A call inside the thought ends it (Qwen3.5 calls without
		// closing its thought), where calls are that markup.
		{"I need the weather.\n<tool_call>\n<function=f>\n</function>\n</tool_call>", "I need the weather.\n", "<tool_call>\n<function=f>\n</function>\n</tool_call>", true, "<tool_call>"},
		{"<think>Plan.</think>\n<tool_call>{}</tool_call>", "Plan.", "<tool_call>{}</tool_call>", false, "<tool_call>"},
		{"<think>x <tool_call", "x <tool_call", "", false, "<tool_call>"}, // cut short: a prefix stays thought
		{"I need <tool_call> here", "I need <tool_call> here", "", true, ""},
	} {
		for size := 1; size <= len(c.text); size++ {
			s := newSplitter(ThinkTags, c.inside)
			s.call = c.call
			var rb, cb strings.Builder
			for i := 0; i < len(c.text); i += size {
				r, ct := s.feed(c.text[i:min(i+size, len(c.text))])
				rb.WriteString(r)
				cb.WriteString(ct)
			}
			r, ct := s.flush()
			rb.WriteString(r)
			cb.WriteString(ct)
			if rb.String() != c.reasoning || cb.String() != c.content {
				t.Fatalf("%q in pieces of %d: reasoning %q, content %q; want %q, %q", c.text, size, rb.String(), cb.String(), c.reasoning, c.content)
			}
		}
	}
}

func TestPromptOpens(t *testing.T) {
	for prompt, want := range map[string]bool{
		"<|im_start|>assistant\n<think>\n":                   true,
		"<|im_start|>assistant\n<think>\n\n</think>\n\n":     false,
		"<|im_start|>assistant\n":                            false,
		"<think>old</think><|im_start|>assistant\n<think>\n": true,
	} {
		if got := promptOpens(ThinkTags, prompt); got != want {
			t.Errorf("%q: %v, want %v", prompt, got, want)
		}
	}
}
