package main

// Process-level reliability tests: tputool is built once per test binary
// and run as a subprocess against the fake Hub, so that signals, exit
// codes, inter-process locks and what is left on disk are those of a real
// process. They are skipped when no go toolchain is available.

import (
	"bytes"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tputool/tputool/loader/hub/hubtest"
)

// canary is a token the subprocesses get through HF_TOKEN; it must never
// appear in their output.
const canary = "hf_SubprocessCanaryToken0123456789"

var (
	buildOnce sync.Once
	buildDir  string
	binPath   string
	buildErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if buildDir != "" {
		os.RemoveAll(buildDir)
	}
	os.Exit(code)
}

// tputool builds the binary once per test binary (skipping the test when
// there is no go toolchain) and returns its path.
func tputool(t *testing.T) string {
	t.Helper()
	if runtime.GOOS == "windows" {
		t.Skip("the subprocess tests send SIGINT, which Windows has not")
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go toolchain in PATH to build tputool:", err)
	}
	buildOnce.Do(func() {
		buildDir, buildErr = os.MkdirTemp("", "tputool-reliability-")
		if buildErr != nil {
			return
		}
		binPath = filepath.Join(buildDir, "tputool")
		cmd := exec.Command(goBin, "build", "-o", binPath, ".")
		out, err := cmd.CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binPath
}

// proc is a running tputool.
type proc struct {
	cmd            *exec.Cmd
	stdout, stderr *syncBuffer
	done           chan struct{}
	err            error
}

// syncBuffer is a bytes.Buffer safe for a writer goroutine and a reader.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func start(t *testing.T, env []string, args ...string) *proc {
	t.Helper()
	p := &proc{cmd: exec.Command(tputool(t), args...), stdout: &syncBuffer{}, stderr: &syncBuffer{}, done: make(chan struct{})}
	p.cmd.Env = env
	p.cmd.Stdout, p.cmd.Stderr = p.stdout, p.stderr
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			p.cmd.Process.Kill()
			<-p.done
		}
	})
	return p
}

// wait returns the exit code, failing the test after a generous limit.
func (p *proc) wait(t *testing.T, limit time.Duration) int {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(limit):
		p.cmd.Process.Kill()
		<-p.done
		t.Fatalf("%v did not exit within %s\nstdout:\n%s\nstderr:\n%s", p.cmd.Args, limit, p.stdout, p.stderr)
	}
	var ee *exec.ExitError
	if errors.As(p.err, &ee) {
		return ee.ExitCode()
	}
	if p.err != nil {
		t.Fatal(p.err)
	}
	return 0
}

// noCanary fails if the token leaked into a process's output.
func (p *proc) noCanary(t *testing.T) {
	t.Helper()
	if out := p.stdout.String() + p.stderr.String(); strings.Contains(out, canary) {
		t.Fatalf("%v printed the token:\n%s", p.cmd.Args, out)
	}
}

// waitFor polls cond (an event on disk or in a process's output) until it
// holds, failing after limit.
func waitFor(t *testing.T, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", limit, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func hubEnv(srv *hubtest.Server, cache string, extra ...string) []string {
	return append([]string{
		"PATH=" + os.Getenv("PATH"), "HOME=" + filepath.Dir(cache), "NO_COLOR=1",
		"HF_ENDPOINT=" + srv.URL(), "HF_HUB_CACHE=" + cache, "HF_TOKEN=" + canary,
	}, extra...)
}

func randomBytes(t *testing.T, n int) []byte {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return b
}

// bigRepo is a repository whose weights take a while to transfer.
func bigRepo(t *testing.T) (hubtest.Repo, hubtest.File) {
	w := hubtest.File{Path: "model.safetensors", Data: randomBytes(t, 2<<20), LFS: true}
	return hubtest.Repo{ID: "org/big", Files: []hubtest.File{
		{Path: "config.json", Data: []byte(`{"architectures":["LlamaForCausalLM"],"model_type":"llama"}`)},
		w,
	}}, w
}

// partialSize is the size of the largest partial download of blob sha in
// blobs (a download writes <sha>.<8 hex>.incomplete of its own; an
// interrupted one leaves <sha>.incomplete for the next to resume), -1
// when there is none.
func partialSize(blobs, sha string) int64 {
	matches, _ := filepath.Glob(filepath.Join(blobs, sha+"*.incomplete"))
	size := int64(-1)
	for _, m := range matches {
		size = max(size, fileSize(m))
	}
	return size
}

func fileSize(p string) int64 {
	st, err := os.Stat(p)
	if err != nil {
		return -1
	}
	return st.Size()
}

// TestSubprocessDownloadInterruptResumes: SIGINT during a download exits
// 130 and leaves the partial blob as <sha>.incomplete (never in blobs/
// under its final name, never linked into a snapshot); the next run
// resumes it with a Range request and completes a valid cache.
func TestSubprocessDownloadInterruptResumes(t *testing.T) {
	srv := hubtest.New(t)
	repo, w := bigRepo(t)
	srv.AddRepo(repo)
	const sent = 300_000
	srv.AddFault(&hubtest.Fault{Match: hubtest.OnServer("cdn", "GET"), Times: 1, Stall: time.Minute, After: sent})
	cache := filepath.Join(t.TempDir(), "hub")
	env := hubEnv(srv, cache, "HF_HUB_DOWNLOAD_TIMEOUT=120")
	blobs := filepath.Join(cache, "models--org--big", "blobs")
	inc := filepath.Join(blobs, w.SHA256()+".incomplete")

	p := start(t, env, "download", "--model", "org/big")
	waitFor(t, time.Minute, "the partial download", func() bool { return partialSize(blobs, w.SHA256()) >= sent })
	if err := p.cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(t, 30*time.Second); code != 130 {
		t.Fatalf("exit %d, want 130\nstderr:\n%s", code, p.stderr)
	}
	p.noCanary(t)
	if p.stdout.String() != "" {
		t.Errorf("an interrupted download printed a result: %q", p.stdout)
	}
	if !strings.Contains(p.stderr.String(), "interrupt") && !strings.Contains(p.stderr.String(), "cancel") {
		t.Errorf("stderr does not say it was interrupted:\n%s", p.stderr)
	}
	if n := fileSize(inc); n != sent {
		t.Fatalf(".incomplete holds %d bytes, want %d", n, sent)
	}
	st := hubtest.CheckCache(t, cache)
	if st.Incomplete != 1 || st.Pointers != 1 { // config.json is complete
		t.Errorf("cache after the interrupt: %+v", st)
	}

	srv.ResetLog()
	p = start(t, env, "download", "--model", "org/big")
	if code := p.wait(t, time.Minute); code != 0 {
		t.Fatalf("second run: exit %d\n%s", code, p.stderr)
	}
	p.noCanary(t)
	resumed := srv.Count(func(r hubtest.Request) bool {
		return r.Server == "cdn" && r.Range == fmt.Sprintf("bytes=%d-", sent)
	})
	if resumed != 1 || srv.Count(func(r hubtest.Request) bool { return r.Server == "cdn" }) != 1 {
		t.Errorf("the second run did not resume with one Range request: %+v", srv.Requests())
	}
	dir := strings.TrimSpace(p.stdout.String())
	if b, err := os.ReadFile(filepath.Join(dir, "model.safetensors")); err != nil || !bytes.Equal(b, w.Data) {
		t.Fatalf("resumed file differs (%v)", err)
	}
	if st := hubtest.CheckCache(t, cache); st.Incomplete != 0 || st.Blobs != 2 || st.Pointers != 2 {
		t.Errorf("cache after the resume: %+v", st)
	}
}

// TestSubprocessTwoProcessesOneFile: two tputool processes download the
// same file at once. The first stalls with the blob's lock held; the
// second starts then and waits on the lock. Both succeed with the same
// snapshot, the blob is transferred once (the first process's request and
// its resume), and the cache is valid.
func TestSubprocessTwoProcessesOneFile(t *testing.T) {
	srv := hubtest.New(t)
	repo, w := bigRepo(t)
	srv.AddRepo(repo)
	const sent = 100_000
	srv.AddFault(&hubtest.Fault{Match: hubtest.OnServer("cdn", "GET"), Times: 1, Stall: time.Minute, After: sent})
	cache := filepath.Join(t.TempDir(), "hub")
	// The stalled transfer is cut by the idle timeout after 2 s and resumed.
	env := hubEnv(srv, cache, "HF_HUB_DOWNLOAD_TIMEOUT=2")
	blobs := filepath.Join(cache, "models--org--big", "blobs")

	a := start(t, env, "--json", "download", "--model", "org/big")
	waitFor(t, time.Minute, "the first process's partial download", func() bool { return partialSize(blobs, w.SHA256()) >= sent })
	b := start(t, env, "--json", "download", "--model", "org/big")
	codeA, codeB := a.wait(t, 2*time.Minute), b.wait(t, 2*time.Minute)
	if codeA != 0 || codeB != 0 {
		t.Fatalf("exit codes %d and %d\nA:\n%s\nB:\n%s", codeA, codeB, a.stderr, b.stderr)
	}
	a.noCanary(t)
	b.noCanary(t)
	var ra, rb struct {
		Dir   string `json:"dir"`
		Bytes int64  `json:"bytes"`
	}
	if err := json.Unmarshal([]byte(a.stdout.String()), &ra); err != nil {
		t.Fatal(err, a.stdout)
	}
	if err := json.Unmarshal([]byte(b.stdout.String()), &rb); err != nil {
		t.Fatal(err, b.stdout)
	}
	if ra != rb {
		t.Errorf("results differ: %+v vs %+v", ra, rb)
	}
	gets := srv.Count(func(r hubtest.Request) bool { return r.Server == "cdn" && r.Method == "GET" })
	fresh := srv.Count(func(r hubtest.Request) bool { return r.Server == "cdn" && r.Method == "GET" && r.Range == "" })
	if gets != 2 || fresh != 1 {
		t.Errorf("%d blob requests (%d from byte 0), want the stalled one and its resume: %+v", gets, fresh, srv.Requests())
	}
	if got, err := os.ReadFile(filepath.Join(ra.Dir, "model.safetensors")); err != nil || !bytes.Equal(got, w.Data) {
		t.Fatalf("file differs (%v)", err)
	}
	if st := hubtest.CheckCache(t, cache); st.Incomplete != 0 || st.Blobs != 2 || st.Pointers != 2 {
		t.Errorf("cache: %+v", st)
	}
}

// storiesCopy copies testdata/stories260K-hf and edits its configs so that
// generation cannot end by itself soon: the end-of-sequence id is outside
// the vocabulary and the context holds 16384 positions.
func storiesCopy(t *testing.T) string {
	dir := filepath.Join(t.TempDir(), "stories")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	src := filepath.Join("testdata", "stories260K-hf")
	entries, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		switch e.Name() {
		case "config.json", "generation_config.json":
			var m map[string]any
			if err := json.Unmarshal(b, &m); err != nil {
				t.Fatal(err)
			}
			m["eos_token_id"] = 100000
			if e.Name() == "config.json" {
				m["max_position_embeddings"] = 16384
			}
			b, _ = json.Marshal(m)
		}
		if err := os.WriteFile(filepath.Join(dir, e.Name()), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// TestSubprocessGenerateInterrupt: SIGINT while tokens stream prints the
// text generated so far, the metrics under --verbose, and exits 130.
func TestSubprocessGenerateInterrupt(t *testing.T) {
	dir := storiesCopy(t)
	env := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir(), "NO_COLOR=1", "HF_TOKEN=" + canary}
	p := start(t, env, "--device", "cpu", "-v", "generate", "--model", dir, "-p", "Once upon a time", "-n", "16000", "--temperature", "0")
	waitFor(t, 2*time.Minute, "streamed text", func() bool { return len(p.stdout.String()) >= 40 })
	if err := p.cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(t, time.Minute); code != 130 {
		t.Fatalf("exit %d, want 130\nstderr:\n%s", code, p.stderr)
	}
	p.noCanary(t)
	out, errOut := p.stdout.String(), p.stderr.String()
	if !strings.HasPrefix(out, ", there was a little girl") {
		t.Errorf("stdout does not hold the text so far: %q", out)
	}
	for _, want := range []string{"eval count:", "eval rate:", "time to first token:"} {
		if !strings.Contains(errOut, want) {
			t.Errorf("stderr lacks the metrics line %q:\n%s", want, errOut)
		}
	}
	if !strings.Contains(errOut, "interrupt") && !strings.Contains(errOut, "cancel") {
		t.Errorf("stderr does not say it was interrupted:\n%s", errOut)
	}
}
