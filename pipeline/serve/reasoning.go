package serve

import (
	"strings"

	"github.com/tputool/tputool/loader/tokenizer/chat"
)

// Reasoning marks a thinking model's reasoning in its output (Qwen3,
// Qwen3.5, DeepSeek-R1: <think> … </think>). Chat answers carry the text
// between the tags as reasoning_content, apart from content, in the
// message and in the stream's deltas, as vLLM's reasoning parsers and
// OpenAI's o-series answers do.
type Reasoning struct {
	Start, End string
}

// ThinkTags is the reasoning markup of the Qwen and DeepSeek-R1 families.
var ThinkTags = Reasoning{Start: "<think>", End: "</think>"}

// ReasoningOf returns the reasoning markup a chat template uses, nil when
// it uses none: a template that writes both think tags (the Qwen3 and
// Qwen3.5 templates do, to close an empty thought or open one in the
// generation prompt).
func ReasoningOf(t *chat.Template) *Reasoning {
	if t == nil {
		return nil
	}
	src := t.Source()
	if strings.Contains(src, ThinkTags.Start) && strings.Contains(src, ThinkTags.End) {
		r := ThinkTags
		return &r
	}
	return nil
}

// splitter separates reasoning from content in text that arrives in
// pieces: a tag split over two pieces is held back until it is whole. The
// start tag is honoured only before any content (a model may quote the
// tags in its answer); whitespace right after a tag is dropped. Where call
// is set (a tool call's opening markup), a call inside the reasoning ends
// it: Qwen3.5 models sometimes call a tool without closing their thought
// first, and the call is the answer's, as vLLM's qwen3 reasoning parser
// reads it.
type splitter struct {
	r       Reasoning
	call    string
	inside  bool
	content bool   // some content has been emitted
	trim    bool   // drop the whitespace that follows a tag
	pending string // text held back: it may begin a tag
	lead    string // whitespace before any content: dropped if a thought follows
}

// newSplitter starts a splitter; inside says the prompt already opened
// the reasoning (a generation prompt ending with the start tag).
func newSplitter(r Reasoning, inside bool) *splitter {
	return &splitter{r: r, inside: inside, trim: inside}
}

// promptOpens reports whether the rendered prompt ends inside the
// reasoning: its generation prompt ends with the start tag (a tag in a
// user's text earlier does not count).
func promptOpens(r Reasoning, prompt string) bool {
	return strings.HasSuffix(strings.TrimRight(prompt, " \t\r\n"), r.Start)
}

// promptCloses reports whether the rendered prompt ends with a closed
// thought (Qwen3's template with enable_thinking false writes an empty
// one): the model answers at once.
func promptCloses(r Reasoning, prompt string) bool {
	return strings.HasSuffix(strings.TrimRight(prompt, " \t\r\n"), r.End)
}

// feed splits the next piece of text.
func (s *splitter) feed(text string) (reasoning, content string) {
	buf := s.pending + text
	s.pending = ""
	var rb, cb strings.Builder
	emit := func(t string) {
		if s.trim {
			t = strings.TrimLeft(t, " \t\r\n")
			if t == "" {
				return
			}
			s.trim = false
		}
		switch {
		case s.inside:
			rb.WriteString(t)
		case !s.content && strings.TrimSpace(t) == "":
			s.lead += t // a thought may still open
		default:
			s.content = true
			cb.WriteString(s.lead + t)
			s.lead = ""
		}
	}
	for buf != "" {
		tag := s.r.End
		if !s.inside {
			if s.content {
				emit(buf) // past the answer's start, tags are text
				buf = ""
				break
			}
			tag = s.r.Start
		}
		i := strings.Index(buf, tag)
		if s.inside && s.call != "" {
			if j := strings.Index(buf, s.call); j >= 0 && (i < 0 || j < i) {
				emit(buf[:j]) // the thought ends where the call starts
				buf = buf[j:]
				s.inside, s.trim, s.lead = false, false, ""
				continue
			}
		}
		if i >= 0 {
			if !s.inside && strings.TrimSpace(buf[:i]) != "" { // an answer that quotes the tag
				emit(buf)
				buf = ""
				break
			}
			emit(buf[:i])
			buf = buf[i+len(tag):]
			s.inside, s.trim, s.lead = !s.inside, true, ""
			continue
		}
		keep := heldBack(buf, tag)
		if s.inside && s.call != "" {
			keep = max(keep, heldBack(buf, s.call))
		}
		emit(buf[:len(buf)-keep])
		s.pending = buf[len(buf)-keep:]
		break
	}
	return rb.String(), cb.String()
}

// flush returns what feed held back, the text ending.
func (s *splitter) flush() (reasoning, content string) {
	p := s.pending
	s.pending = ""
	if s.inside {
		return p, ""
	}
	lead := s.lead
	s.lead = ""
	return "", lead + p
}

// heldBack is the length of the longest suffix of text that is a proper
// prefix of tag.
func heldBack(text, tag string) int {
	for n := min(len(tag)-1, len(text)); n > 0; n-- {
		if strings.HasSuffix(text, tag[:n]) {
			return n
		}
	}
	return 0
}
