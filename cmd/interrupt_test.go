package cmd

import (
	"bufio"
	"bytes"
	"errors"
	"io"
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

	"github.com/tputool/tputool/pipeline/testkit/lmckpt"
)

// TestMain lets a test re-run this binary as tputool itself (subprocess
// tests send it real signals): with TPUTOOL_TEST_MAIN=1 it runs Main on
// its arguments.
func TestMain(m *testing.M) {
	if os.Getenv("TPUTOOL_TEST_MAIN") == "1" {
		os.Exit(Main())
	}
	os.Exit(m.Run())
}

// slowModel writes a Llama checkpoint big enough that prefilling a few
// hundred tokens takes seconds on GoMLX's go backend (27M parameters), with
// the stories tokenizer. The tests pin that backend (--device cpu:go): on
// tputool's own the prefill would end before the signal arrives.
func slowModel(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	require.NoError(t, lmckpt.LlamaShape(512, 8, 8, 1536, 512).Write(dir))
	for _, name := range []string{"tokenizer.json", "tokenizer_config.json"} {
		b, err := os.ReadFile(filepath.Join(storiesDir, name))
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), b, 0o644))
	}
	return dir
}

// tputoolProcess starts this test binary as tputool with args, stderr
// watched line by line.
type tputoolProcess struct {
	cmd    *exec.Cmd
	out    bytes.Buffer
	mu     sync.Mutex
	errBuf strings.Builder
	lines  chan string
}

func startTputool(t *testing.T, args ...string) *tputoolProcess {
	t.Helper()
	p := &tputoolProcess{lines: make(chan string, 1000)}
	p.cmd = exec.Command(os.Args[0], args...)
	// GoMLX's go backend: the slower CPU engine, so a prefill of a few
	// hundred tokens takes seconds (tputool's own cpu backend takes well
	// under one).
	p.cmd.Env = append(os.Environ(), "TPUTOOL_TEST_MAIN=1", "HF_HUB_OFFLINE=1", "TPUTOOL_DEVICE=cpu:go")
	p.cmd.Stdout = &p.out
	stderr, err := p.cmd.StderrPipe()
	require.NoError(t, err)
	require.NoError(t, p.cmd.Start())
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			p.mu.Lock()
			p.errBuf.WriteString(sc.Text() + "\n")
			p.mu.Unlock()
			p.lines <- sc.Text()
		}
		io.Copy(io.Discard, stderr)
		close(p.lines)
	}()
	t.Cleanup(func() { p.cmd.Process.Kill() })
	return p
}

// waitLine waits for a stderr line containing s.
func (p *tputoolProcess) waitLine(t *testing.T, s string, limit time.Duration) {
	t.Helper()
	deadline := time.After(limit)
	for {
		select {
		case line, ok := <-p.lines:
			if !ok {
				t.Fatalf("tputool ended before printing %q; stderr:\n%s", s, p.stderr())
			}
			if strings.Contains(line, s) {
				return
			}
		case <-deadline:
			t.Fatalf("no %q on stderr within %s; stderr:\n%s", s, limit, p.stderr())
		}
	}
}

func (p *tputoolProcess) stderr() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.errBuf.String()
}

// wait waits for the process to exit, at most limit, and returns its exit
// code and how long it took.
func (p *tputoolProcess) wait(t *testing.T, limit time.Duration) (int, time.Duration) {
	t.Helper()
	start := time.Now()
	done := make(chan error, 1)
	go func() { done <- p.cmd.Wait() }()
	select {
	case err := <-done:
		var ee *exec.ExitError
		if err != nil && !errors.As(err, &ee) {
			t.Fatal(err)
		}
		return p.cmd.ProcessState.ExitCode(), time.Since(start)
	case <-time.After(limit):
		p.cmd.Process.Kill()
		t.Fatalf("tputool did not exit within %s of the signal; stderr:\n%s", limit, p.stderr())
	}
	return 0, 0
}

// longPrompt is about 600 tokens of the stories vocabulary.
var longPrompt = strings.Repeat("Once upon a time there was a little girl named Lily. She loved to play outside in the park. ", 25)

// TestInterruptDuringPrefill is the Ctrl-C of a user at a long prompt: the
// prefill (seconds of work) is interrupted between pieces, tputool says it
// is stopping, prints the (empty) text so far and exits 130 well before
// the prefill would have ended.
func TestInterruptDuringPrefill(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a 27M-parameter prefill in a subprocess")
	}
	dir := slowModel(t)
	p := startTputool(t, "--device", "cpu:go", "generate", "-v", "--model", dir, "-p", longPrompt, "-n", "4", "--temperature", "0")
	// Progress shows once the prefill has run for a second.
	p.waitLine(t, "prefill:", 5*time.Minute)
	require.NoError(t, p.cmd.Process.Signal(os.Interrupt))
	code, took := p.wait(t, 10*time.Second)
	t.Logf("exit %d %s after SIGINT during prefill", code, took)
	assert.Equal(t, int(ExitInterrupted), code, p.stderr())
	assert.Contains(t, p.stderr(), "stopping…")
	assert.Contains(t, p.stderr(), "interrupted")
	assert.NotRegexp(t, `prefill: \d+ tokens in`, p.stderr(), "the prefill ran to its end")
}

// TestSecondInterruptExitsAtOnce: a second Ctrl-C does not wait for the
// work to stop.
func TestSecondInterruptExitsAtOnce(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a 27M-parameter prefill in a subprocess")
	}
	dir := slowModel(t)
	p := startTputool(t, "--device", "cpu:go", "generate", "-v", "--model", dir, "-p", longPrompt, "-n", "4", "--prefill-chunk", "-1")
	p.waitLine(t, "model ", 5*time.Minute)
	time.Sleep(500 * time.Millisecond) // into the one-piece prefill
	require.NoError(t, p.cmd.Process.Signal(os.Interrupt))
	p.waitLine(t, "stopping…", 10*time.Second)
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGINT))
	code, took := p.wait(t, 10*time.Second)
	t.Logf("exit %d %s after the second SIGINT", code, took)
	assert.Equal(t, int(ExitInterrupted), code, p.stderr())
	assert.Contains(t, p.stderr(), "interrupted")
}

// TestInterruptBenchDuringPrefill: bench's prefill runs in pieces too, so
// Ctrl-C stops a benchmark at a long prompt.
func TestInterruptBenchDuringPrefill(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a 27M-parameter prefill in a subprocess")
	}
	dir := slowModel(t)
	p := startTputool(t, "--device", "cpu:go", "bench", "-v", "--model", dir, "--mode", "compiled", "--batch", "1", "--prompt-len", "900", "--gen-len", "2", "-r", "1", "--warmup", "0")
	p.waitLine(t, "model ", 5*time.Minute)
	time.Sleep(2 * time.Second) // into the prefill
	require.NoError(t, p.cmd.Process.Signal(os.Interrupt))
	code, took := p.wait(t, 10*time.Second)
	t.Logf("bench exit %d %s after SIGINT", code, took)
	assert.Equal(t, int(ExitInterrupted), code, p.stderr())
	assert.Contains(t, p.stderr(), "stopping…")
}
