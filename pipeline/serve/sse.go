package serve

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
)

// Server-sent events, as OpenAI's streamed answers use them.

// sse writes a stream of server-sent events.
type sse struct {
	w  http.ResponseWriter
	rc *http.ResponseController
}

// startSSE answers 200 with an event stream.
func startSSE(w http.ResponseWriter) *sse {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	e := &sse{w: w, rc: http.NewResponseController(w)}
	e.rc.Flush()
	return e
}

// send writes one `data: {json}` event and flushes it.
func (e *sse) send(v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return err
	}
	if _, err := fmt.Fprintf(e.w, "data: %s\n\n", data); err != nil {
		return err
	}
	return e.rc.Flush()
}

// sendEvent writes one named event (`event: NAME` then `data: {json}`),
// as Anthropic's streams do, and flushes it.
func (e *sse) sendEvent(name string, v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return err
	}
	if _, err := fmt.Fprintf(e.w, "event: %s\ndata: %s\n\n", name, data); err != nil {
		return err
	}
	return e.rc.Flush()
}

// done ends the stream with OpenAI's `data: [DONE]`.
func (e *sse) done() {
	io.WriteString(e.w, "data: [DONE]\n\n")
	e.rc.Flush()
}

// fail ends the stream with an error event, for a sequence that failed
// after the response began, then `data: [DONE]` (as vLLM ends it).
func (e *sse) fail(err error) {
	ae := &apiError{Message: fmt.Sprintf("generation failed: %v", err), Type: "server_error"}
	if e.send(errorBody(ae)) == nil {
		e.done()
	}
}

// streamUsage is what a stream's chunks say of the usage
// (stream_options): nothing (neither is set); with include, a last chunk
// of usage and "usage": null in the others (OpenAI's); with continuous
// too, the usage so far in every chunk (vLLM's continuous_usage_stats).
type streamUsage struct {
	include, continuous bool
}

// streamUsageOf reads stream_options.
func (p *samplingParams) streamUsageOf() streamUsage {
	o := p.StreamOptions
	if o == nil || !o.IncludeUsage {
		return streamUsage{}
	}
	return streamUsage{include: true, continuous: o.ContinuousUsageStats}
}

// chunk is the usage of a chunk other than the last, after completion
// tokens of the request's prompt tokens.
func (m streamUsage) chunk(prompt, completion int) chunkUsage {
	switch {
	case m.continuous:
		return chunkUsage{set: true, u: newUsage(prompt, completion)}
	case m.include:
		return chunkUsage{set: true}
	}
	return chunkUsage{}
}

// chunkUsage is a chunk's usage field: absent (the zero value), null, or
// the counts.
type chunkUsage struct {
	set bool
	u   *usage
}

// IsZero leaves the field out (omitzero) unless it is set.
func (c chunkUsage) IsZero() bool { return !c.set }

func (c chunkUsage) MarshalJSON() ([]byte, error) { return json.Marshal(c.u) }
