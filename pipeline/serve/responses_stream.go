package serve

import (
	"context"
	"crypto/rand"
	"fmt"
	"net/http"
	"strings"

	"github.com/tputool/tputool/pipeline/generate"
)

// The output items of a response as the answer arrives, and the
// Responses event stream: response.created and response.in_progress;
// per reasoning or message item output_item.added, content_part.added,
// its text's deltas (reasoning_text.delta, output_text.delta), their
// .done, content_part.done and output_item.done; per function call
// output_item.added, function_call_arguments.delta and .done,
// output_item.done; then response.completed, or response.incomplete when
// the answer reached max_output_tokens, or response.failed when the
// generation failed. Every event carries its type and a sequence_number
// counting from 0, as `event: TYPE` and `data: {json}` lines.

// responseItem is one output item.
type responseItem struct {
	index  int    // output_index
	id     string // rs_…, msg_…, fc_…
	typ    string // reasoning, message, function_call
	status string // in_progress, completed, incomplete
	text   strings.Builder
	// encrypted puts a reasoning item's thought in encrypted_content too
	// (as plain text, as ollama writes it), which a client that asks
	// include ["reasoning.encrypted_content"] sends back in place of the
	// content (Codex drops reasoning_text content from the items it
	// returns).
	encrypted bool
	// a function call's
	callID, name, arguments string
	// logprobs are a message's tokens' log-probabilities, when asked.
	logprobs []any
}

// part is the item's content part holding text: a reasoning item's
// reasoning_text, a message's output_text.
func (it *responseItem) part(text string) map[string]any {
	if it.typ == "reasoning" {
		return map[string]any{"type": "reasoning_text", "text": text}
	}
	lps := it.logprobs
	if lps == nil {
		lps = []any{}
	}
	return map[string]any{"type": "output_text", "text": text, "annotations": []any{}, "logprobs": lps}
}

// object is the item's JSON (an item in progress has no content yet).
func (it *responseItem) object() map[string]any {
	o := map[string]any{"id": it.id, "type": it.typ, "status": it.status}
	content := []any{}
	if it.status != "in_progress" {
		content = append(content, it.part(it.text.String()))
	}
	switch it.typ {
	case "reasoning":
		o["summary"], o["content"] = []any{}, content
		if it.encrypted && it.status != "in_progress" {
			o["encrypted_content"] = it.text.String()
		}
	case "message":
		o["role"], o["content"] = "assistant", content
	case "function_call":
		o["call_id"], o["name"], o["arguments"] = it.callID, it.name, it.arguments
	}
	return o
}

// responseOutput turns an answer, as it arrives, into output items
// (through the plan's reasoning splitter and tool parser: answer), and,
// with send set, into the stream's events. An item opens when its first
// text comes and closes when the other kind starts or the answer ends;
// whitespace that no message holds yet waits for text (a tokenizer's
// space before a call is no message); the calls come last.
type responseOutput struct {
	a         *answer
	format    ToolFormat
	items     []*responseItem
	open      *responseItem
	pending   string          // whitespace no message holds yet
	encrypted bool            // reasoning items carry encrypted_content (responseItem)
	reasoning strings.Builder // the whole thought, for the usage
	// send writes an event (its type and sequence number added); false
	// when the client is gone. nil sends nothing (a whole answer).
	send func(typ string, v map[string]any) bool
	// logprob renders a token's log-probability entry (nil: none asked);
	// lps are those of the tokens whose text no message holds yet. The
	// entries go to the message text their tokens' pieces end in; a
	// piece that is only reasoning drops them, and those left at the
	// end (tool-call markup) are dropped.
	logprob func(ev Event) any
	lps     []any
}

// newResponseOutput builds a response's items from an answer of plan p
// (encrypted: reasoning items carry encrypted_content), sending its
// events through send (nil: a whole answer, no events).
func newResponseOutput(p *plan, encrypted bool, send func(string, map[string]any) bool) *responseOutput {
	return &responseOutput{a: &answer{sp: p.splitter(), tp: p.toolParser()}, format: p.tools, encrypted: encrypted, send: send}
}

// event sends one event when the output streams; false when the client
// is gone.
func (o *responseOutput) event(typ string, v map[string]any) bool {
	return o.send == nil || o.send(typ, v)
}

// feed reads the next event's piece of the answer.
func (o *responseOutput) feed(ev Event) bool {
	if o.logprob != nil && hasLogprob(ev, false) {
		o.lps = append(o.lps, o.logprob(ev))
	}
	r, t := o.a.feed(ev.Text)
	if r != "" && t == "" {
		o.lps = nil // the thought's tokens
	}
	return o.add("reasoning", r) && o.text(t)
}

// text adds content: to the open message, or, while it is only
// whitespace and no message is open, to what is pending.
func (o *responseOutput) text(t string) bool {
	if t == "" {
		return true
	}
	if (o.open == nil || o.open.typ != "message") && strings.TrimSpace(o.pending+t) == "" {
		o.pending += t
		return true
	}
	t, o.pending = o.pending+t, ""
	return o.add("message", t)
}

// add appends a piece of kind (reasoning or message) to the open item,
// opening one when the open item is of the other kind (closing that).
func (o *responseOutput) add(kind, piece string) bool {
	if piece == "" {
		return true
	}
	if kind == "reasoning" {
		o.reasoning.WriteString(piece)
	}
	if o.open == nil || o.open.typ != kind {
		if o.open != nil && !o.closeOpen("completed") {
			return false
		}
		if !o.start(kind) {
			return false
		}
	}
	it := o.open
	it.text.WriteString(piece)
	delta := map[string]any{"item_id": it.id, "output_index": it.index, "content_index": 0, "delta": piece}
	if kind == "reasoning" {
		return o.event("response.reasoning_text.delta", delta)
	}
	lps := o.lps
	if lps == nil {
		lps = []any{}
	}
	it.logprobs = append(it.logprobs, o.lps...)
	o.lps = nil
	delta["logprobs"] = lps
	return o.event("response.output_text.delta", delta)
}

// start opens an item of kind with its one content part.
func (o *responseOutput) start(kind string) bool {
	prefix := map[string]string{"reasoning": "rs_", "message": "msg_"}[kind]
	it := &responseItem{index: len(o.items), id: prefix + rand.Text(), typ: kind, status: "in_progress", encrypted: o.encrypted}
	o.items, o.open = append(o.items, it), it
	return o.event("response.output_item.added", map[string]any{"output_index": it.index, "item": it.object()}) &&
		o.event("response.content_part.added", map[string]any{"item_id": it.id, "output_index": it.index, "content_index": 0, "part": it.part("")})
}

// closeOpen closes the open item with status.
func (o *responseOutput) closeOpen(status string) bool {
	it := o.open
	o.open = nil
	it.status = status
	text := it.text.String()
	done := map[string]any{"item_id": it.id, "output_index": it.index, "content_index": 0, "text": text}
	typ := "response.reasoning_text.done"
	if it.typ == "message" {
		typ = "response.output_text.done"
		done["logprobs"] = it.part(text)["logprobs"]
	}
	return o.event(typ, done) &&
		o.event("response.content_part.done", map[string]any{"item_id": it.id, "output_index": it.index, "content_index": 0, "part": it.part(text)}) &&
		o.event("response.output_item.done", map[string]any{"output_index": it.index, "item": it.object()})
}

// end ends the answer (finish is generate's reason): the last text, an
// empty message for an answer with nothing else, the open item closed
// (incomplete when the answer reached its limit), then the calls.
func (o *responseOutput) end(finish string) bool {
	r, t, calls := o.a.finishPieces()
	if !o.add("reasoning", r) || !o.text(t) {
		return false
	}
	// An answer without calls whose text is whitespace, or that has
	// nothing at all: a message holds what there is.
	if len(calls) == 0 && (o.pending != "" || len(o.items) == 0) {
		p := o.pending
		o.pending = ""
		if o.open != nil && !o.closeOpen("completed") {
			return false
		}
		if !o.start("message") || !o.add("message", p) {
			return false
		}
	}
	if o.open != nil {
		status := "completed"
		if finish == generate.FinishLength {
			status = "incomplete"
		}
		if !o.closeOpen(status) {
			return false
		}
	}
	for _, c := range calls {
		it := &responseItem{index: len(o.items), id: "fc_" + rand.Text(), typ: "function_call", status: "in_progress", callID: callID(o.format), name: c.Name}
		o.items = append(o.items, it)
		if !o.event("response.output_item.added", map[string]any{"output_index": it.index, "item": it.object()}) ||
			!o.event("response.function_call_arguments.delta", map[string]any{"item_id": it.id, "output_index": it.index, "delta": c.Arguments}) {
			return false
		}
		it.arguments, it.status = c.Arguments, "completed"
		if !o.event("response.function_call_arguments.done", map[string]any{"item_id": it.id, "output_index": it.index, "name": c.Name, "arguments": c.Arguments}) ||
			!o.event("response.output_item.done", map[string]any{"output_index": it.index, "item": it.object()}) {
			return false
		}
	}
	return true
}

// objects is the items' JSON.
func (o *responseOutput) objects() []any {
	out := make([]any, len(o.items))
	for i, it := range o.items {
		out[i] = it.object()
	}
	return out
}

// streamResponse streams the answer as the Responses events.
func (s *Server) streamResponse(ctx context.Context, w http.ResponseWriter, p *plan, encrypted bool, st *Stream, resp *responseObject) {
	out := startSSE(w)
	seq := 0
	send := func(typ string, v map[string]any) bool {
		v["type"], v["sequence_number"] = typ, seq
		seq++
		return out.sendEvent(typ, v) == nil
	}
	if !send("response.created", map[string]any{"response": resp}) || !send("response.in_progress", map[string]any{"response": resp}) {
		return
	}
	o := newResponseOutput(p, encrypted, send)
	o.logprob = s.responseLogprob(p)
	finish := ""
	for ev := range st.Events {
		if ev.FinishReason == FinishError || ev.FinishReason == FinishCancelled {
			if ctx.Err() != nil {
				return // the client is gone
			}
			err := ev.Err
			if err == nil {
				err = ErrClosed
			}
			resp.Status, resp.Output = "failed", o.objects()
			resp.Error = &responseError{Code: "server_error", Message: fmt.Sprintf("generation failed: %v", err)}
			send("response.failed", map[string]any{"response": resp})
			return
		}
		if !o.feed(ev) {
			return
		}
		if ev.FinishReason != "" {
			finish = ev.FinishReason
		}
	}
	if ctx.Err() != nil || !o.end(finish) {
		return
	}
	s.finishResponse(resp, o, p.promptTokens, st.CompletionTokens(), finish)
	typ := "response.completed"
	if resp.Status == "incomplete" {
		typ = "response.incomplete"
	}
	send(typ, map[string]any{"response": resp})
}
