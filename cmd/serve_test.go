package cmd

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tputool/tputool/compile"
	"github.com/tputool/tputool/internal/errs"
	"github.com/tputool/tputool/loader"
	"github.com/tputool/tputool/loader/safetensors"
)

// serveOptions parses a serve command line with the environment env and
// returns the options serveRun would get, or the validation error.
func serveOptions(t *testing.T, env map[string]string, args ...string) (*ServeOptions, error) {
	t.Helper()
	e := newTestFactory(t, env)
	var got *ServeOptions
	c := NewCmdServe(e.f, func(_ context.Context, o *ServeOptions) error { got = o; return nil })
	c.SetArgs(args)
	c.SetOut(io.Discard)
	c.SetErr(io.Discard)
	err := c.Execute()
	return got, err
}

func TestServeDefaults(t *testing.T) {
	o, err := serveOptions(t, nil, "--model", "m")
	require.NoError(t, err)
	assert.Equal(t, "127.0.0.1", o.Host)
	assert.Equal(t, 8000, o.Port)
	assert.Equal(t, 8, o.MaxBatch)
	assert.Equal(t, 32, o.MaxQueue, "4 x --max-batch")
	assert.Equal(t, 0, o.MaxContext, "the model's, decided at load")
	assert.Equal(t, 64, o.PrefillChunk)
	assert.True(t, o.Warmup)
	assert.Equal(t, 30*time.Second, o.DrainTimeout)
	assert.Empty(t, o.APIKey)
	assert.False(t, o.AllowInsecure)
	assert.False(t, o.Pprof)

	o, err = serveOptions(t, nil, "--model", "m", "--max-batch", "3", "--warmup=false", "--drain-timeout", "5s", "--served-model-name", "tiny", "--pprof")
	require.NoError(t, err)
	assert.True(t, o.Pprof)
	assert.Equal(t, 12, o.MaxQueue)
	assert.False(t, o.Warmup)
	assert.Equal(t, 5*time.Second, o.DrainTimeout)
	assert.Equal(t, "tiny", o.ServedModelName)
}

// TestServeAPIKeyFromEnv: TPUTOOL_API_KEY is the key unless --api-key is
// given, and the help never shows it.
func TestServeAPIKeyFromEnv(t *testing.T) {
	env := map[string]string{apiKeyEnv: "env-secret-key"}
	o, err := serveOptions(t, env, "--model", "m")
	require.NoError(t, err)
	assert.Equal(t, "env-secret-key", o.APIKey)
	o, err = serveOptions(t, env, "--model", "m", "--api-key", "flag-key")
	require.NoError(t, err)
	assert.Equal(t, "flag-key", o.APIKey, "the flag wins over the environment")

	e := newTestFactory(t, env)
	require.Equal(t, ExitOK, e.run("serve", "--help"))
	assert.Contains(t, e.out.String(), apiKeyEnv)
	assert.NotContains(t, e.out.String()+e.errOut.String(), "env-secret-key")
}

// TestServeRefusesNonLoopbackWithoutKey: a --host reachable from other
// machines needs an API key or --allow-insecure; loopback needs neither.
func TestServeRefusesNonLoopbackWithoutKey(t *testing.T) {
	for _, host := range []string{"0.0.0.0", "::", "[::]", "192.168.1.20", "10.0.0.1", "", "example.com"} {
		e := newTestFactory(t, nil)
		code := e.run("serve", "--model", storiesDir, "--host", host)
		assert.Equal(t, ExitUsage, code, "--host %q", host)
		for _, name := range []string{"--host", apiKeyEnv, "--api-key", "--allow-insecure"} {
			assert.Contains(t, e.errOut.String(), name, "--host %q", host)
		}

		o, err := serveOptions(t, nil, "--model", "m", "--host", host, "--allow-insecure")
		require.NoError(t, err, "--host %q --allow-insecure", host)
		assert.Equal(t, strings.Trim(host, "[]"), o.Host)
		_, err = serveOptions(t, map[string]string{apiKeyEnv: "k"}, "--model", "m", "--host", host)
		require.NoError(t, err, "--host %q with TPUTOOL_API_KEY", host)
		_, err = serveOptions(t, nil, "--model", "m", "--host", host, "--api-key", "k")
		require.NoError(t, err, "--host %q --api-key", host)
	}
	for _, host := range []string{"127.0.0.1", "127.0.0.53", "::1", "[::1]", "localhost", "LOCALHOST"} {
		_, err := serveOptions(t, nil, "--model", "m", "--host", host)
		assert.NoError(t, err, "--host %q is loopback", host)
	}
}

func TestServeBadFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "--model is required"},
		{[]string{"--max-batch", "0"}, "--max-batch 0"},
		{[]string{"--max-batch", "5000"}, "--max-batch 5000"},
		{[]string{"--max-context", "-1"}, "--max-context -1"},
		{[]string{"--max-queue", "-2"}, "--max-queue -2"},
		{[]string{"--prefill-chunk", "0"}, "--prefill-chunk 0"},
		{[]string{"--pooling", "max"}, `--pooling "max"`},
		{[]string{"--cors-origin", "localhost:3000"}, `--cors-origin "localhost:3000"`},
		{[]string{"--cors-origin", "http://example.com/app"}, `--cors-origin "http://example.com/app"`},
		{[]string{"--port", "-1"}, "--port -1"},
		{[]string{"--port", "65536"}, "--port 65536"},
		{[]string{"--drain-timeout", "-1s"}, "--drain-timeout -1s"},
		{[]string{"--api-key", ""}, "--api-key is empty"},
		{[]string{"--served-model-name", " "}, "--served-model-name"},
		{[]string{"--host", "[nope]"}, "--host"},
		{[]string{"--tp", "0"}, "--tp 0"},
		{[]string{"--mode", "fast"}, "fast"},
		{[]string{"--dtype", "f8"}, "--dtype"},
	} {
		args := tc.args
		if tc.want != "--model is required" {
			args = append([]string{"--model", storiesDir}, args...)
		}
		e := newTestFactory(t, nil)
		code := e.run(append([]string{"serve"}, args...)...)
		assert.Equal(t, ExitUsage, code, "%v: %s", args, e.errOut.String())
		assert.Contains(t, e.errOut.String(), tc.want, "%v", args)
	}
	// A flag value of the wrong type is a usage error too.
	e := newTestFactory(t, nil)
	assert.Equal(t, ExitUsage, e.run("serve", "--model", storiesDir, "--max-batch", "many"))
}

func TestServedContext(t *testing.T) {
	for _, tc := range []struct{ flag, positions, want int }{
		{0, 512, 512},
		{0, 32768, 2048},
		{0, 0, 2048},
		{100, 512, 100},
		{512, 512, 512},
	} {
		got, err := servedContext(tc.flag, tc.positions)
		require.NoError(t, err)
		assert.Equal(t, tc.want, got, "flag %d, positions %d", tc.flag, tc.positions)
	}
	_, err := servedContext(1024, 512)
	require.True(t, errors.Is(err, errs.ErrUsage), "%v", err)
	assert.Contains(t, err.Error(), "--max-context 1024")
}

// serveInProcess runs serve on the stories model in this process on a free
// port (through Run, as Main does) and returns its address, what it printed
// on stdout, and a stop func that cancels it as the first signal does and
// returns its exit code.
func serveInProcess(t *testing.T, args ...string) (addr string, out func() string, stop func() ExitCode) {
	t.Helper()
	return serveModelInProcess(t, append([]string{"--model", storiesDir, "--max-batch", "2", "--max-context", "128"}, args...)...)
}

// serveModelInProcess is serveInProcess with serve's arguments args (the
// model's among them) after --json serve --port 0.
func serveModelInProcess(t *testing.T, args ...string) (addr string, out func() string, stop func() ExitCode) {
	t.Helper()
	e := genEnv(t)
	lines := make(chan string, 16)
	var mu sync.Mutex
	var stdout strings.Builder
	e.f.IOStreams.Out = writerFunc(func(p []byte) (int, error) {
		mu.Lock()
		defer mu.Unlock()
		stdout.Write(p)
		for _, l := range strings.Split(strings.TrimSpace(string(p)), "\n") {
			select {
			case lines <- l:
			default:
			}
		}
		return len(p), nil
	})
	e.f.IOStreams.ErrOut = io.Discard
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan ExitCode, 1)
	go func() {
		done <- Run(ctx, e.f, append([]string{"--json", "serve", "--port", "0"}, args...))
	}()
	for addr == "" {
		select {
		case l := <-lines:
			var ev struct{ Type, Address string }
			if json.Unmarshal([]byte(l), &ev) == nil && ev.Type == "listening" {
				addr = ev.Address
			}
		case code := <-done:
			cancel()
			t.Fatalf("serve ended (exit %d) before listening", code)
		case <-time.After(2 * time.Minute):
			cancel()
			t.Fatal("serve did not listen within 2 minutes")
		}
	}
	var code *ExitCode
	stop = func() ExitCode {
		if code != nil {
			return *code
		}
		cancel()
		select {
		case c := <-done:
			code = &c
			return c
		case <-time.After(time.Minute):
			t.Fatal("serve did not stop within a minute")
			return -1
		}
	}
	t.Cleanup(func() { stop() })
	return addr, func() string { mu.Lock(); defer mu.Unlock(); return stdout.String() }, stop
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// TestServeInProcess: the command wires the model, the scheduler and the
// API together: the listening line names the bound port, a completion
// gives generate's greedy text, and cancelling (the first signal) drains
// and returns no error.
func TestServeInProcess(t *testing.T) {
	addr, out, stop := serveInProcess(t, "--served-model-name", "stories")
	url := "http://" + addr
	var listening map[string]any
	require.NoError(t, json.Unmarshal([]byte(strings.SplitN(out(), "\n", 2)[0]), &listening), out())
	assert.Equal(t, "listening", listening["type"])
	assert.Equal(t, addr, listening["address"])
	assert.Equal(t, "stories", listening["model"])
	assert.EqualValues(t, 2, listening["slots"])

	resp, err := http.Get(url + "/v1/models")
	require.NoError(t, err)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode, string(b))
	assert.Contains(t, string(b), `"stories"`)

	// ollama's details: the parameter count and the held dtype.
	resp, err = http.Get(url + "/api/tags")
	require.NoError(t, err)
	var tags struct {
		Models []struct {
			Name    string `json:"name"`
			Details struct {
				ParameterSize     string `json:"parameter_size"`
				QuantizationLevel string `json:"quantization_level"`
			} `json:"details"`
		} `json:"models"`
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&tags))
	resp.Body.Close()
	require.Len(t, tags.Models, 1)
	assert.Equal(t, "stories:latest", tags.Models[0].Name)
	assert.Regexp(t, `^\d+K$`, tags.Models[0].Details.ParameterSize, "stories260K's weights")
	assert.Contains(t, []string{"F32", "BF16"}, tags.Models[0].Details.QuantizationLevel)

	resp, err = http.Post(url+"/v1/completions", "application/json",
		strings.NewReader(`{"model":"stories","prompt":"Once upon a time","max_tokens":8,"temperature":0}`))
	require.NoError(t, err)
	var completion struct {
		Choices []struct {
			Text         string `json:"text"`
			FinishReason string `json:"finish_reason"`
		} `json:"choices"`
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&completion))
	resp.Body.Close()
	require.Len(t, completion.Choices, 1)
	assert.Equal(t, ", there was a little girl", completion.Choices[0].Text, "generate's greedy text (TestGenerateVerboseMetricsOnStderr)")
	assert.Equal(t, "length", completion.Choices[0].FinishReason)

	// Embeddings: the model's hidden size, unit length; dimensions past
	// it are a 400.
	resp, err = http.Post(url+"/v1/embeddings", "application/json", strings.NewReader(`{"model":"stories","input":["Once upon a time","a cat"]}`))
	require.NoError(t, err)
	var emb struct {
		Data []struct {
			Embedding []float64 `json:"embedding"`
		} `json:"data"`
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&emb))
	resp.Body.Close()
	require.Len(t, emb.Data, 2)
	for _, d := range emb.Data {
		require.Len(t, d.Embedding, 64, "stories260K's hidden size")
		var ss float64
		for _, x := range d.Embedding {
			ss += x * x
		}
		assert.InDelta(t, 1, ss, 1e-5)
	}
	assert.NotEqual(t, emb.Data[0].Embedding, emb.Data[1].Embedding)
	resp, err = http.Post(url+"/v1/embeddings", "application/json", strings.NewReader(`{"input":"a","dimensions":65}`))
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusBadRequest, resp.StatusCode)

	require.Equal(t, ExitOK, stop())
	assert.Contains(t, out(), `"type":"stopped"`)
	_, err = http.Get(url + "/health")
	assert.Error(t, err, "the listener is closed")
}

// TestServeLoadTimeErrors: what only the model or the socket can tell is
// still named: a --max-context beyond the model's positions (exit 2), a
// port already taken (exit 1).
func TestServeLoadTimeErrors(t *testing.T) {
	e := genEnv(t)
	assert.Equal(t, ExitUsage, e.run("serve", "--model", storiesDir, "--max-context", "1024", "--warmup=false"), e.errOut.String())
	assert.Contains(t, e.errOut.String(), "--max-context 1024: the model has 512 positions")

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	port := fmt.Sprint(ln.Addr().(*net.TCPAddr).Port)
	e = genEnv(t)
	assert.Equal(t, ExitError, e.run("serve", "--model", storiesDir, "--port", port, "--max-batch", "1", "--max-context", "64", "--warmup=false"), e.errOut.String())
	assert.Contains(t, e.errOut.String(), "--port "+port)
	assert.Contains(t, e.errOut.String(), "address already in use")
}

// ---- subprocess: signals

// serveProcess is this test binary running `tputool serve`, with stdout
// and stderr read line by line.
type serveProcess struct {
	cmd    *exec.Cmd
	mu     sync.Mutex
	stderr strings.Builder
	stdout chan string
}

func startServe(t *testing.T, args ...string) *serveProcess {
	t.Helper()
	p := &serveProcess{stdout: make(chan string, 100)}
	p.cmd = exec.Command(os.Args[0], append([]string{"--json", "serve", "--port", "0", "--served-model-name", "m"}, args...)...)
	p.cmd.Env = append(os.Environ(), "TPUTOOL_TEST_MAIN=1", "HF_HUB_OFFLINE=1", "TPUTOOL_DEVICE=cpu:go")
	stdout, err := p.cmd.StdoutPipe()
	require.NoError(t, err)
	stderr, err := p.cmd.StderrPipe()
	require.NoError(t, err)
	require.NoError(t, p.cmd.Start())
	t.Cleanup(func() { p.cmd.Process.Kill() })
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			p.stdout <- sc.Text()
		}
		close(p.stdout)
	}()
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			p.mu.Lock()
			p.stderr.WriteString(sc.Text() + "\n")
			p.mu.Unlock()
		}
	}()
	return p
}

func (p *serveProcess) errText() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stderr.String()
}

// address waits for the listening line and returns the bound address.
func (p *serveProcess) address(t *testing.T, limit time.Duration) string {
	t.Helper()
	deadline := time.After(limit)
	for {
		select {
		case line, ok := <-p.stdout:
			if !ok {
				t.Fatalf("serve ended before listening; stderr:\n%s", p.errText())
			}
			var ev struct{ Type, Address string }
			if json.Unmarshal([]byte(line), &ev) == nil && ev.Type == "listening" {
				return ev.Address
			}
		case <-deadline:
			t.Fatalf("serve did not listen within %s; stderr:\n%s", limit, p.errText())
		}
	}
}

// exitCode waits for the process to exit, at most limit.
func (p *serveProcess) exitCode(t *testing.T, limit time.Duration) int {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- p.cmd.Wait() }()
	select {
	case err := <-done:
		var ee *exec.ExitError
		if err != nil && !errors.As(err, &ee) {
			t.Fatal(err)
		}
		return p.cmd.ProcessState.ExitCode()
	case <-time.After(limit):
		p.cmd.Process.Kill()
		t.Fatalf("serve did not exit within %s; stderr:\n%s", limit, p.errText())
	}
	return -1
}

// sseStream is a streaming completion being read.
type sseStream struct {
	body   io.ReadCloser
	sc     *bufio.Scanner
	tokens int    // chunks with text
	finish string // the finish_reason seen
	done   bool   // data: [DONE] seen
}

// startStream posts a streaming completion of maxTokens tokens (EOS
// ignored, so it runs to the end) and reads up to its first token.
func startStream(t *testing.T, addr string, maxTokens int) *sseStream {
	t.Helper()
	body := fmt.Sprintf(`{"model":"m","prompt":"Once upon a time","max_tokens":%d,"temperature":0,"ignore_eos":true,"stream":true}`, maxTokens)
	resp, err := http.Post("http://"+addr+"/v1/completions", "application/json", strings.NewReader(body))
	require.NoError(t, err)
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("status %d: %s", resp.StatusCode, b)
	}
	s := &sseStream{body: resp.Body, sc: bufio.NewScanner(resp.Body)}
	t.Cleanup(func() { resp.Body.Close() })
	for s.tokens == 0 && s.next(t) {
	}
	require.Positive(t, s.tokens, "no token before the stream ended")
	return s
}

// next reads one event; false at the end of the stream.
func (s *sseStream) next(t *testing.T) bool {
	for s.sc.Scan() {
		line, ok := strings.CutPrefix(s.sc.Text(), "data: ")
		if !ok {
			continue
		}
		if line == "[DONE]" {
			s.done = true
			return false
		}
		var chunk struct {
			Choices []struct {
				Text         string  `json:"text"`
				FinishReason *string `json:"finish_reason"`
			} `json:"choices"`
		}
		require.NoError(t, json.Unmarshal([]byte(line), &chunk), line)
		for _, c := range chunk.Choices {
			if c.Text != "" {
				s.tokens++
			}
			if c.FinishReason != nil {
				s.finish = *c.FinishReason
			}
		}
		return true
	}
	return false
}

// TestServeSIGTERMDrains is a deployment's stop: SIGTERM in the middle of
// a stream closes the listener at once (new connections are refused), lets
// the stream run to its last token and [DONE], and the process exits 0.
// The model is slowModel on GoMLX's go backend, so the stream lasts
// seconds.
func TestServeSIGTERMDrains(t *testing.T) {
	if testing.Short() {
		t.Skip("serves a 27M-parameter model in a subprocess")
	}
	dir := slowModel(t)
	p := startServe(t, "--model", dir, "--max-batch", "2", "--max-context", "256", "--warmup=false")
	addr := p.address(t, 5*time.Minute)
	const maxTokens = 120
	s := startStream(t, addr, maxTokens)
	before := s.tokens
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))

	// The listener closes while the stream still runs.
	refused := false
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		conn, err := net.DialTimeout("tcp", addr, time.Second)
		if err != nil {
			refused = true
			break
		}
		conn.Close()
	}
	assert.True(t, refused, "new connections are still accepted after SIGTERM")

	for s.next(t) {
	}
	t.Logf("%d token(s) before SIGTERM, %d in all", before, s.tokens)
	assert.Less(t, before, maxTokens, "the stream had ended before the signal: the test proves nothing")
	assert.Equal(t, maxTokens, s.tokens, "the stream was cut off")
	assert.Equal(t, "length", s.finish)
	assert.True(t, s.done, "no data: [DONE]")
	assert.Equal(t, 0, p.exitCode(t, time.Minute), p.errText())
	assert.Contains(t, p.errText(), "draining")
}

// TestServeSecondSignalExitsAtOnce: a second signal during the drain does
// not wait for the stream.
func TestServeSecondSignalExitsAtOnce(t *testing.T) {
	if testing.Short() {
		t.Skip("serves a 27M-parameter model in a subprocess")
	}
	dir := slowModel(t)
	p := startServe(t, "--model", dir, "--max-batch", "1", "--max-context", "256", "--warmup=false")
	addr := p.address(t, 5*time.Minute)
	s := startStream(t, addr, 200)
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	for deadline := time.Now().Add(10 * time.Second); !strings.Contains(p.errText(), "draining") && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	start := time.Now()
	code := p.exitCode(t, 10*time.Second)
	t.Logf("exit %d %s after the second signal, %d token(s) streamed", code, time.Since(start), s.tokens)
	assert.Equal(t, int(ExitInterrupted), code, p.errText())
	assert.Contains(t, p.errText(), "interrupted")
}

// TestServePooling: --pooling auto follows the model's
// sentence-transformers Pooling config (last without one), an explicit
// flag overrides it, and a mode tputool does not pool by fails naming
// --pooling.
func TestServePooling(t *testing.T) {
	checkpoint := func(pooling string) *loader.Checkpoint {
		dir := t.TempDir()
		require.NoError(t, os.WriteFile(filepath.Join(dir, "config.json"), []byte(`{"model_type":"llama"}`), 0o644))
		require.NoError(t, safetensors.WriteFile(filepath.Join(dir, "model.safetensors"), nil, nil))
		if pooling != "" {
			require.NoError(t, os.WriteFile(filepath.Join(dir, "modules.json"), []byte(`[{"path":"1_Pooling","type":"sentence_transformers.models.Pooling"}]`), 0o644))
			require.NoError(t, os.MkdirAll(filepath.Join(dir, "1_Pooling"), 0o755))
			require.NoError(t, os.WriteFile(filepath.Join(dir, "1_Pooling", "config.json"), []byte(pooling), 0o644))
		}
		ref, err := loader.ParseRef(dir)
		require.NoError(t, err)
		m, err := loader.ResolveRef(context.Background(), ref, loader.Options{})
		require.NoError(t, err)
		return m
	}
	for _, c := range []struct {
		pooling, flag string
		want          compile.Pooling
	}{
		{"", "auto", compile.PoolLast},
		{`{"pooling_mode_mean_tokens":true}`, "auto", compile.PoolMean},
		{`{"pooling_mode_lasttoken":true,"pooling_mode_mean_tokens":false}`, "auto", compile.PoolLast},
		{`{"pooling_mode_lasttoken":true,"pooling_mode_mean_tokens":false}`, "mean", compile.PoolMean},
		{`{"pooling_mode_cls_token":true,"pooling_mode_mean_tokens":false}`, "last", compile.PoolLast},
		{`{"pooling_mode_cls_token":true,"pooling_mode_mean_tokens":false}`, "auto", compile.PoolCLS},
		{"", "cls", compile.PoolCLS},
	} {
		got, err := resolvePooling(c.flag, checkpoint(c.pooling), false)
		assert.NoError(t, err, c.pooling)
		assert.Equal(t, c.want, got, "%s --pooling %s", c.pooling, c.flag)
	}
	// Without a Pooling config an encoder pools by the mean.
	got, err := resolvePooling("auto", checkpoint(""), true)
	assert.NoError(t, err)
	assert.Equal(t, compile.PoolMean, got)
	_, err = resolvePooling("auto", checkpoint(`{"pooling_mode_max_tokens":true}`), false)
	assert.ErrorIs(t, err, errs.ErrUnsupported)
	assert.ErrorContains(t, err, "--pooling")
}
