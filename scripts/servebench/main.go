// Command servebench is a load generator for `tputool serve` (or any
// OpenAI-compatible server): for each concurrency level it runs that many
// streams at once, each streaming completions of fixed prompts with a fixed
// length (greedy, ignore_eos; with -mixed, lengths from a quarter of it to
// all of it, so that the streams fall out of step), and reports the
// aggregate decode rate, the per-stream rate, the time to first token and
// the compiles the server made during the measured phase (from GET
// /metrics).
//
//	go run ./scripts/servebench -url http://127.0.0.1:8000 -c 1,8,32
//	go run ./scripts/servebench -c 8 -max-tokens 128 -requests 4 -json
//
// Each level first runs one warm-up round (one request per stream, not
// measured), then reads /metrics, runs -requests requests per stream,
// and reads /metrics again. Rates:
//
//   - agg tok/s: every completion token of the measured phase over its wall
//     time (prefills included: what the server delivers);
//   - stream tok/s: per request, the tokens after the first over the time
//     after the first (the decode rate one client sees), median;
//   - TTFT: from sending the request to its first token, p50 and p99.
//
// Stdlib only; scripts/bench-serve.sh starts a server and runs it.
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"
)

// prompts are the fixed prompts; stream i, request k uses prompt (i+k) mod
// len.
var prompts = []string{
	"Once upon a time, there was a little girl named Lily. She loved to play outside",
	"The little dog ran to the park because",
	"One day, a boy named Tom found a big red ball in the garden.",
	"The sun was shining and the birds were singing. Mom said",
	"In a small house by the sea lived an old fisherman who",
	"Sam and his friend wanted to build a tall tower with blocks, but",
	"The cat sat on the mat and looked at the bird in the tree.",
	"It was a cold winter night and the snow was falling. The children",
}

type config struct {
	url, model, apiKey string
	levels             []int
	maxTokens          int
	mixed              bool
	requests           int
	warmup             bool
	metrics            bool
	timeout            time.Duration
}

// result is one concurrency level's measurements (the -json output).
type result struct {
	Streams          int     `json:"streams"`
	Requests         int     `json:"requests"`
	Errors           int     `json:"errors"`
	FirstError       string  `json:"first_error,omitempty"`
	CompletionTokens int     `json:"completion_tokens"`
	WallSeconds      float64 `json:"wall_s"`
	AggTokPerSec     float64 `json:"agg_tok_s"`
	StreamTokPerSec  float64 `json:"stream_tok_s_p50"`
	TTFTp50ms        float64 `json:"ttft_p50_ms"`
	TTFTp99ms        float64 `json:"ttft_p99_ms"`
	// Scaling is AggTokPerSec over the first level's.
	Scaling    float64 `json:"scaling"`
	Compiles   int     `json:"compiles"`
	Recompiles int     `json:"recompiles"`
}

// sample is one request's timing.
type sample struct {
	tokens     int
	ttft       time.Duration
	afterFirst time.Duration
	err        error
}

func main() {
	var cfg config
	var levels string
	var asJSON bool
	flag.StringVar(&cfg.url, "url", "http://127.0.0.1:8000", "server base URL")
	flag.StringVar(&cfg.model, "model", "", "model name (default: the first of GET /v1/models)")
	flag.StringVar(&cfg.apiKey, "api-key", os.Getenv("TPUTOOL_API_KEY"), "Bearer key (default: env TPUTOOL_API_KEY)")
	flag.StringVar(&levels, "c", "1,8,32", "concurrent streams, a comma-separated list of levels")
	flag.IntVar(&cfg.maxTokens, "max-tokens", 64, "tokens per completion (ignore_eos, so exactly this many)")
	flag.BoolVar(&cfg.mixed, "mixed", false, "vary the completions' lengths between a quarter of -max-tokens and all of it (a fixed sequence), so that streams fall out of step as a real server's do")
	flag.IntVar(&cfg.requests, "requests", 2, "measured requests per stream, one after another")
	flag.BoolVar(&cfg.warmup, "warmup", true, "run one unmeasured round per level first")
	flag.BoolVar(&cfg.metrics, "metrics", true, "read the compile counts from GET /metrics (false for servers without it, such as ollama: they report 0)")
	flag.DurationVar(&cfg.timeout, "timeout", 10*time.Minute, "limit per request")
	flag.BoolVar(&asJSON, "json", false, "print the results as a JSON array instead of a table")
	flag.Parse()
	for _, f := range strings.Split(levels, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			fatalf("-c %q: want positive stream counts separated by commas", levels)
		}
		cfg.levels = append(cfg.levels, n)
	}
	if cfg.maxTokens < 2 || cfg.requests < 1 {
		fatalf("-max-tokens must be at least 2 and -requests at least 1")
	}
	cfg.url = strings.TrimRight(cfg.url, "/")
	if cfg.model == "" {
		m, err := firstModel(cfg)
		if err != nil {
			fatalf("GET /v1/models: %v", err)
		}
		cfg.model = m
	}
	fmt.Fprintf(os.Stderr, "servebench: %s, model %q, %d tokens per completion, %d requests per stream\n", cfg.url, cfg.model, cfg.maxTokens, cfg.requests)

	var results []result
	for _, c := range cfg.levels {
		r, err := runLevel(cfg, c)
		if err != nil {
			fatalf("%d streams: %v", c, err)
		}
		if len(results) > 0 && results[0].AggTokPerSec > 0 {
			r.Scaling = r.AggTokPerSec / results[0].AggTokPerSec
		} else {
			r.Scaling = 1
		}
		results = append(results, r)
		fmt.Fprintf(os.Stderr, "servebench: %d streams: %.1f tok/s\n", c, r.AggTokPerSec)
	}
	if asJSON {
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		enc.Encode(results)
	} else {
		printTable(results)
	}
	for _, r := range results {
		if r.Errors > 0 {
			os.Exit(1)
		}
	}
}

func fatalf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "servebench: "+format+"\n", args...)
	os.Exit(2)
}

func printTable(results []result) {
	w := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(w, "streams\trequests\ttokens\twall s\tagg tok/s\tscaling\tstream tok/s p50\tTTFT p50 ms\tTTFT p99 ms\tcompiles\trecompiles\terrors\t")
	for _, r := range results {
		fmt.Fprintf(w, "%d\t%d\t%d\t%.2f\t%.1f\t%.2fx\t%.1f\t%.0f\t%.0f\t%d\t%d\t%d\t\n",
			r.Streams, r.Requests, r.CompletionTokens, r.WallSeconds, r.AggTokPerSec, r.Scaling,
			r.StreamTokPerSec, r.TTFTp50ms, r.TTFTp99ms, r.Compiles, r.Recompiles, r.Errors)
	}
	w.Flush()
	for _, r := range results {
		if r.FirstError != "" {
			fmt.Fprintf(os.Stderr, "servebench: %d streams, first error: %s\n", r.Streams, r.FirstError)
		}
	}
}

// runLevel runs one concurrency level: a warm-up round, then the measured
// phase between two reads of /metrics.
func runLevel(cfg config, streams int) (result, error) {
	if cfg.warmup {
		round(cfg, streams, 1)
	}
	before, err := compileCounts(cfg)
	if err != nil {
		return result{}, err
	}
	start := time.Now()
	samples := round(cfg, streams, cfg.requests)
	wall := time.Since(start)
	after, err := compileCounts(cfg)
	if err != nil {
		return result{}, err
	}
	r := result{Streams: streams, Requests: len(samples), WallSeconds: wall.Seconds(),
		Compiles: after[0] - before[0], Recompiles: after[1] - before[1]}
	var ttfts, rates []float64
	for _, s := range samples {
		if s.err != nil {
			r.Errors++
			if r.FirstError == "" {
				r.FirstError = s.err.Error()
			}
			continue
		}
		r.CompletionTokens += s.tokens
		ttfts = append(ttfts, float64(s.ttft)/float64(time.Millisecond))
		if s.tokens > 1 && s.afterFirst > 0 {
			rates = append(rates, float64(s.tokens-1)/s.afterFirst.Seconds())
		}
	}
	if wall > 0 {
		r.AggTokPerSec = float64(r.CompletionTokens) / wall.Seconds()
	}
	r.TTFTp50ms = percentile(ttfts, 50)
	r.TTFTp99ms = percentile(ttfts, 99)
	r.StreamTokPerSec = percentile(rates, 50)
	return r, nil
}

// round runs streams goroutines, each sending n requests one after another.
func round(cfg config, streams, n int) []sample {
	var mu sync.Mutex
	var out []sample
	var wg sync.WaitGroup
	for i := range streams {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := range n {
				tokens := cfg.maxTokens
				if cfg.mixed {
					tokens = mixedTokens(cfg.maxTokens, i, k)
				}
				s := complete(cfg, prompts[(i+k)%len(prompts)], tokens)
				mu.Lock()
				out = append(out, s)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return out
}

// mixedTokens is request k of stream i's length under -mixed: one of 16
// steps from n/4 to n, in an order that differs between streams.
func mixedTokens(n, i, k int) int {
	lo := n / 4
	return lo + (i*7+k*13+3)%16*(n-lo)/15
}

// complete streams one completion of maxTokens tokens and times it.
func complete(cfg config, prompt string, maxTokens int) sample {
	body, _ := json.Marshal(map[string]any{
		"model": cfg.model, "prompt": prompt, "max_tokens": maxTokens,
		"temperature": 0, "ignore_eos": true, "stream": true,
		"stream_options": map[string]any{"include_usage": true},
	})
	ctx, cancel := context.WithTimeout(context.Background(), cfg.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, cfg.url+"/v1/completions", bytes.NewReader(body))
	if err != nil {
		return sample{err: err}
	}
	req.Header.Set("Content-Type", "application/json")
	if cfg.apiKey != "" {
		req.Header.Set("Authorization", "Bearer "+cfg.apiKey)
	}
	start := time.Now()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return sample{err: err}
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<10))
		return sample{err: fmt.Errorf("status %d: %s", resp.StatusCode, bytes.TrimSpace(b))}
	}
	var s sample
	var first time.Time
	chunks, usage := 0, -1
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		if data == "[DONE]" {
			break
		}
		var chunk struct {
			Choices []struct {
				Text string `json:"text"`
			} `json:"choices"`
			Usage *struct {
				CompletionTokens int `json:"completion_tokens"`
			} `json:"usage"`
			Error *struct {
				Message string `json:"message"`
			} `json:"error"`
		}
		if err := json.Unmarshal([]byte(data), &chunk); err != nil {
			return sample{err: fmt.Errorf("bad event %q: %v", data, err)}
		}
		if chunk.Error != nil {
			return sample{err: errors.New(chunk.Error.Message)}
		}
		if chunk.Usage != nil {
			usage = chunk.Usage.CompletionTokens
		}
		for _, c := range chunk.Choices {
			if c.Text == "" {
				continue
			}
			if chunks == 0 {
				first = time.Now()
			}
			chunks++
		}
	}
	if err := sc.Err(); err != nil {
		return sample{err: err}
	}
	end := time.Now()
	if chunks == 0 {
		return sample{err: errors.New("no token in the stream")}
	}
	s.tokens = chunks
	if usage >= 0 {
		s.tokens = usage // chunks undercount tokens that end mid-character
	}
	s.ttft = first.Sub(start)
	s.afterFirst = end.Sub(first)
	return s
}

// firstModel returns the first model GET /v1/models lists.
func firstModel(cfg config) (string, error) {
	b, err := get(cfg, "/v1/models")
	if err != nil {
		return "", err
	}
	var list struct {
		Data []struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	if err := json.Unmarshal(b, &list); err != nil {
		return "", err
	}
	if len(list.Data) == 0 {
		return "", errors.New("no model listed")
	}
	return list.Data[0].ID, nil
}

// compileCounts reads tputool_compiles_total and tputool_recompiles_total
// from /metrics (zeros when the server has no such series, or with
// -metrics=false).
func compileCounts(cfg config) ([2]int, error) {
	if !cfg.metrics {
		return [2]int{}, nil
	}
	b, err := get(cfg, "/metrics")
	if err != nil {
		return [2]int{}, fmt.Errorf("GET /metrics: %w", err)
	}
	var out [2]int
	for _, line := range strings.Split(string(b), "\n") {
		name, value, ok := strings.Cut(line, " ")
		if !ok {
			continue
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(value), 64)
		if err != nil {
			continue
		}
		switch name {
		case "tputool_compiles_total":
			out[0] = int(v)
		case "tputool_recompiles_total":
			out[1] = int(v)
		}
	}
	return out, nil
}

func get(cfg config, path string) ([]byte, error) {
	req, err := http.NewRequest(http.MethodGet, cfg.url+path, nil)
	if err != nil {
		return nil, err
	}
	if cfg.apiKey != "" {
		req.Header.Set("Authorization", "Bearer "+cfg.apiKey)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("status %d: %s", resp.StatusCode, bytes.TrimSpace(b))
	}
	return b, nil
}

// percentile is the p-th percentile of xs (nearest rank), 0 when empty.
func percentile(xs []float64, p float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	i := int(math.Ceil(p/100*float64(len(s)))) - 1
	return s[max(0, min(i, len(s)-1))]
}
