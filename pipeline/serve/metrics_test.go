package serve

import (
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// sampleLine is a Prometheus sample: a name, optional labels, a value.
var sampleLine = regexp.MustCompile(`^([a-z_]+)(\{[a-z_]+="(?:[^"\\]|\\.)*"(?:,[a-z_]+="(?:[^"\\]|\\.)*")*\})? (\S+)$`)

// checkExposition checks the text format: every family has HELP and TYPE
// before its samples, every sample parses, histogram buckets are
// cumulative and end with +Inf equal to _count.
func checkExposition(t *testing.T, text string) {
	t.Helper()
	typed := map[string]string{}
	var lastBucket float64
	for _, line := range strings.Split(strings.TrimSuffix(text, "\n"), "\n") {
		if rest, ok := strings.CutPrefix(line, "# TYPE "); ok {
			f := strings.Fields(rest)
			require.Len(t, f, 2, line)
			typed[f[0]] = f[1]
			lastBucket = 0
			continue
		}
		if strings.HasPrefix(line, "# HELP ") {
			continue
		}
		m := sampleLine.FindStringSubmatch(line)
		require.NotNil(t, m, "sample line %q", line)
		v, err := strconv.ParseFloat(m[3], 64)
		require.NoError(t, err, line)
		family := m[1]
		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
			if base, ok := strings.CutSuffix(family, suffix); ok && typed[base] == "histogram" {
				family = base
				if suffix == "_bucket" {
					assert.GreaterOrEqual(t, v, lastBucket, "buckets are cumulative: %s", line)
					lastBucket = v
				}
				if suffix == "_count" {
					assert.Equal(t, lastBucket, v, "+Inf bucket equals _count: %s", line)
				}
			}
		}
		assert.NotEmpty(t, typed[family], "sample before its TYPE: %s", line)
	}
}

func TestMetricsWriteTo(t *testing.T) {
	m := NewMetrics(nil)
	m.setSlots(4)
	m.Step(1, 4, 2*time.Millisecond)
	m.Step(4, 4, 30*time.Millisecond)
	m.Step(2, 4, 3*time.Second)
	m.Queue(3, 4)
	m.FirstToken(80 * time.Millisecond)
	m.NextToken(5 * time.Millisecond)
	m.Prefill(40 * time.Millisecond)
	m.Finished("length", 10, 7)
	m.Finished("stop", 5, 2)
	m.Finished("cancelled", 4, 0)
	m.Rejected(ErrQueueFull)
	m.Rejected(ErrClosed)
	m.request("/v1/chat/completions", 200)
	m.request("/v1/chat/completions", 200)
	m.request("/v1/models/{id}", 404)
	var b strings.Builder
	n, err := m.WriteTo(&b)
	require.NoError(t, err)
	text := b.String()
	assert.EqualValues(t, len(text), n)
	checkExposition(t, text)
	for _, want := range []string{
		"# HELP tputool_requests_total ",
		"# TYPE tputool_requests_total counter\n" +
			`tputool_requests_total{endpoint="/v1/chat/completions",status="200"} 2` + "\n" +
			`tputool_requests_total{endpoint="/v1/models/{id}",status="404"} 1` + "\n",
		"tputool_prompt_tokens_total 19\n",
		"tputool_generation_tokens_total 9\n",
		`tputool_requests_finished_total{reason="cancelled"} 1` + "\n" +
			`tputool_requests_finished_total{reason="length"} 1` + "\n" +
			`tputool_requests_finished_total{reason="stop"} 1` + "\n",
		`tputool_requests_rejected_total{reason="closed"} 1` + "\n" +
			`tputool_requests_rejected_total{reason="queue_full"} 1` + "\n",
		"# TYPE tputool_queue_waiting gauge\ntputool_queue_waiting 3\n",
		"tputool_sequences_running 4\n",
		"tputool_batch_slots 4\n",
		// Occupancy 0.25, 1, 0.5: le is inclusive.
		`tputool_batch_occupancy_bucket{le="0.125"} 0` + "\n" + `tputool_batch_occupancy_bucket{le="0.25"} 1` + "\n",
		`tputool_batch_occupancy_bucket{le="0.5"} 2` + "\n",
		`tputool_batch_occupancy_bucket{le="0.875"} 2` + "\n" + `tputool_batch_occupancy_bucket{le="1"} 3` + "\n" +
			`tputool_batch_occupancy_bucket{le="+Inf"} 3` + "\n" + "tputool_batch_occupancy_sum 1.75\ntputool_batch_occupancy_count 3\n",
		// Steps of 2 ms, 30 ms and 3 s: the last one is above every bound.
		`tputool_decode_step_seconds_bucket{le="0.0025"} 1` + "\n",
		`tputool_decode_step_seconds_bucket{le="2.5"} 2` + "\n" + `tputool_decode_step_seconds_bucket{le="+Inf"} 3` + "\n" +
			"tputool_decode_step_seconds_sum 3.032\ntputool_decode_step_seconds_count 3\n",
		`tputool_time_to_first_token_seconds_bucket{le="0.1"} 1` + "\n",
		"tputool_inter_token_latency_seconds_count 1\n",
		"tputool_prefill_piece_seconds_sum 0.04\n",
		"tputool_compiles_total 0\n",
		"tputool_recompiles_total 0\n",
	} {
		assert.Contains(t, text, want)
	}
	assert.True(t, strings.HasSuffix(text, "\n"))
}

func TestMetricsLabelEscaping(t *testing.T) {
	assert.Equal(t, `"a\\b\"c\nd"`, quote("a\\b\"c\nd"))
}

// TestMetricsConcurrent: observations and writes from many goroutines
// (run with -race) lose nothing.
func TestMetricsConcurrent(t *testing.T) {
	m := NewMetrics(func() (int, int) { return 1, 0 })
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 100 {
				m.NextToken(time.Millisecond)
				m.Finished("length", 1, 2)
				m.request("/health", 200)
				m.WriteTo(&strings.Builder{})
			}
		})
	}
	wg.Wait()
	var b strings.Builder
	m.WriteTo(&b)
	assert.Contains(t, b.String(), "tputool_inter_token_latency_seconds_count 800\n")
	assert.Contains(t, b.String(), "tputool_generation_tokens_total 1600\n")
	assert.Contains(t, b.String(), `tputool_requests_total{endpoint="/health",status="200"} 800`)
}
