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
// after the response began.
func (e *sse) fail(err error) {
	ae := &apiError{Message: fmt.Sprintf("generation failed: %v", err), Type: "server_error"}
	e.send(errorBody(ae))
}
