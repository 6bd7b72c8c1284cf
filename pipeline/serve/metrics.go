package serve

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Metrics collects the server's measurements and writes them in the
// Prometheus text exposition format (0.0.4) for GET /metrics: the
// scheduler's (it is the scheduler's Observer), the HTTP requests answered
// (Server records them), and the executables compiled (a callback). It is
// written by hand rather than with client_golang: a few counters, gauges
// and histograms do not justify that dependency tree. Safe for concurrent
// use.
type Metrics struct {
	compiles func() (compiles, recompiles int)

	mu           sync.Mutex
	requests     map[[2]string]int64 // {endpoint, status}
	promptTokens int64
	reusedTokens int64
	draftTokens  int64
	draftKept    int64
	draftErrors  int64
	genTokens    int64
	finished     map[string]int64
	rejected     map[string]int64
	waiting      int
	running      int
	slots        int
	occupancy    *histogram
	ttft         *histogram
	itl          *histogram
	step         *histogram
	prefill      *histogram
}

// Histogram bucket bounds, in seconds except occupancy (a fraction).
var (
	occupancyBuckets = []float64{0.125, 0.25, 0.375, 0.5, 0.625, 0.75, 0.875, 1}
	ttftBuckets      = []float64{0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}
	stepBuckets      = []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5}
	prefillBuckets   = []float64{0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}
)

// NewMetrics returns empty metrics; compiles, when not nil, reports the
// executables compiled and recompiled so far (compile.Runner's counts), read
// at each WriteTo.
func NewMetrics(compiles func() (compiles, recompiles int)) *Metrics {
	return &Metrics{
		compiles:  compiles,
		requests:  map[[2]string]int64{},
		finished:  map[string]int64{},
		rejected:  map[string]int64{},
		occupancy: newHistogram(occupancyBuckets),
		ttft:      newHistogram(ttftBuckets),
		itl:       newHistogram(stepBuckets),
		step:      newHistogram(stepBuckets),
		prefill:   newHistogram(prefillBuckets),
	}
}

// Queue implements Observer.
func (m *Metrics) Queue(waiting, running int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.waiting, m.running = waiting, running
}

// Step implements Observer: the batch occupancy (running of slots) and the
// step's duration.
func (m *Metrics) Step(running, slots int, d time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.running, m.slots = running, slots
	if slots > 0 {
		m.occupancy.observe(float64(running) / float64(slots))
	}
	m.step.observe(d.Seconds())
}

// Prefill implements Observer.
func (m *Metrics) Prefill(d time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.prefill.observe(d.Seconds())
}

// FirstToken implements Observer.
func (m *Metrics) FirstToken(d time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.ttft.observe(d.Seconds())
}

// NextToken implements Observer.
func (m *Metrics) NextToken(d time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.itl.observe(d.Seconds())
}

// Finished implements Observer.
func (m *Metrics) Finished(reason string, prompt, completion int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.finished[reason]++
	m.promptTokens += int64(prompt)
	m.genTokens += int64(completion)
}

// PrefixReused implements Observer.
func (m *Metrics) PrefixReused(tokens int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.reusedTokens += int64(tokens)
}

// Drafted implements Observer.
func (m *Metrics) Drafted(proposed, accepted int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.draftTokens += int64(proposed)
	m.draftKept += int64(accepted)
}

// DraftFailed implements Observer.
func (m *Metrics) DraftFailed(error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.draftErrors++
}

// Rejected implements Observer: the reason label is "queue_full",
// "closed" or "other".
func (m *Metrics) Rejected(err error) {
	reason := "other"
	switch {
	case errors.Is(err, ErrQueueFull):
		reason = "queue_full"
	case errors.Is(err, ErrClosed):
		reason = "closed"
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.rejected[reason]++
}

// setSlots records the engine's slots before the first decode step.
func (m *Metrics) setSlots(n int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.slots = n
}

// request counts an HTTP request answered: its endpoint (the route, not
// the raw path, so the label set stays small) and status.
func (m *Metrics) request(endpoint string, status int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.requests[[2]string{endpoint, strconv.Itoa(status)}]++
}

// WriteTo writes every metric in the Prometheus text format, series in a
// fixed order (labels sorted), so the output is stable.
func (m *Metrics) WriteTo(w io.Writer) (int64, error) {
	compiles, recompiles := 0, 0
	if m.compiles != nil {
		compiles, recompiles = m.compiles()
	}
	var b bytes.Buffer
	m.mu.Lock()
	header(&b, "tputool_requests_total", "counter", "HTTP requests answered, by endpoint and status.")
	keys := sortedKeys2(m.requests)
	for _, k := range keys {
		fmt.Fprintf(&b, "tputool_requests_total{endpoint=%s,status=%s} %d\n", quote(k[0]), quote(k[1]), m.requests[k])
	}
	counter(&b, "tputool_prompt_tokens_total", "Prompt tokens of the sequences finished.", m.promptTokens)
	counter(&b, "tputool_generation_tokens_total", "Tokens generated by the sequences finished.", m.genTokens)
	counter(&b, "tputool_prefix_reused_tokens_total", "Prompt tokens taken from the prefix cache instead of computed.", m.reusedTokens)
	counter(&b, "tputool_draft_tokens_total", "Tokens speculative decoding proposed (serve --speculate).", m.draftTokens)
	counter(&b, "tputool_draft_tokens_accepted_total", "Proposed tokens the model confirmed.", m.draftKept)
	counter(&b, "tputool_draft_errors_total", "Steps whose draft model failed (serve --draft-model); each decoded one token.", m.draftErrors)
	labelled(&b, "tputool_requests_finished_total", "Sequences finished, by finish reason.", "reason", m.finished)
	labelled(&b, "tputool_requests_rejected_total", "Requests refused by the scheduler, by reason.", "reason", m.rejected)
	gauge(&b, "tputool_queue_waiting", "Requests waiting for a sequence slot.", m.waiting)
	gauge(&b, "tputool_sequences_running", "Sequences prefilling or decoding.", m.running)
	gauge(&b, "tputool_batch_slots", "Sequences the engine decodes at once.", m.slots)
	m.occupancy.write(&b, "tputool_batch_occupancy", "Running sequences over slots, per decode step.")
	m.ttft.write(&b, "tputool_time_to_first_token_seconds", "Time from a request's arrival to its first token.")
	m.itl.write(&b, "tputool_inter_token_latency_seconds", "Time between two tokens of a sequence.")
	m.step.write(&b, "tputool_decode_step_seconds", "Duration of a decode step (every running sequence).")
	m.prefill.write(&b, "tputool_prefill_piece_seconds", "Duration of a prefill piece.")
	m.mu.Unlock()
	counter(&b, "tputool_compiles_total", "Executables compiled.", int64(compiles))
	counter(&b, "tputool_recompiles_total", "Executables compiled after the server started listening (none after a warm-up).", int64(recompiles))
	n, err := w.Write(b.Bytes())
	return int64(n), err
}

func header(b *bytes.Buffer, name, typ, help string) {
	fmt.Fprintf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, typ)
}

func counter(b *bytes.Buffer, name, help string, v int64) {
	header(b, name, "counter", help)
	fmt.Fprintf(b, "%s %d\n", name, v)
}

func gauge(b *bytes.Buffer, name, help string, v int) {
	header(b, name, "gauge", help)
	fmt.Fprintf(b, "%s %d\n", name, v)
}

// labelled writes a counter with one label, a series per value.
func labelled(b *bytes.Buffer, name, help, label string, vs map[string]int64) {
	header(b, name, "counter", help)
	keys := make([]string, 0, len(vs))
	for k := range vs {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		fmt.Fprintf(b, "%s{%s=%s} %d\n", name, label, quote(k), vs[k])
	}
}

func sortedKeys2(m map[[2]string]int64) [][2]string {
	keys := make([][2]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b [2]string) int {
		if c := strings.Compare(a[0], b[0]); c != 0 {
			return c
		}
		return strings.Compare(a[1], b[1])
	})
	return keys
}

// quote writes a label value: in double quotes, with backslash, quote and
// newline escaped.
func quote(s string) string {
	return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`).Replace(s) + `"`
}

// histogram counts observations per bucket (non-cumulative; write makes
// them cumulative).
type histogram struct {
	bounds []float64
	counts []uint64 // len(bounds)+1, the last one above every bound
	sum    float64
	count  uint64
}

func newHistogram(bounds []float64) *histogram {
	return &histogram{bounds: bounds, counts: make([]uint64, len(bounds)+1)}
}

func (h *histogram) observe(v float64) {
	i, _ := slices.BinarySearch(h.bounds, v) // the first bound >= v: le is inclusive
	h.counts[i]++
	h.sum += v
	h.count++
}

func (h *histogram) write(b *bytes.Buffer, name, help string) {
	header(b, name, "histogram", help)
	var cum uint64
	for i, le := range h.bounds {
		cum += h.counts[i]
		fmt.Fprintf(b, "%s_bucket{le=\"%s\"} %d\n", name, formatFloat(le), cum)
	}
	fmt.Fprintf(b, "%s_bucket{le=\"+Inf\"} %d\n", name, h.count)
	fmt.Fprintf(b, "%s_sum %s\n", name, formatFloat(h.sum))
	fmt.Fprintf(b, "%s_count %d\n", name, h.count)
}

func formatFloat(v float64) string {
	switch {
	case math.IsInf(v, 1):
		return "+Inf"
	case math.IsInf(v, -1):
		return "-Inf"
	}
	return strconv.FormatFloat(v, 'g', -1, 64)
}
