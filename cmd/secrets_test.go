package cmd

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tputool/tputool/loader/hub"
	"github.com/tputool/tputool/loader/hub/hubtest"
)

// canaryToken is recognisable in any output: it must never appear.
const canaryToken = "hf_CanaryTokenDoNotPrint0123456789abcdef"

// TestTokenNeverPrinted gives tputool a recognisable token through each
// source (--token, HF_TOKEN, HF_HOME/token), drives every kind of Hub
// failure through download, inspect and generate in text, --verbose and
// --json modes, and scans stdout and stderr (errors, logs, warnings,
// progress, JSON documents) for the token. The fake Hub accepts the token,
// so the gated repository also succeeds through each source.
func TestTokenNeverPrinted(t *testing.T) {
	newHub := func(t *testing.T) *hubtest.Server {
		srv := hubtest.New(t)
		srv.Token = canaryToken
		gated := storiesRepo(t, "org/gated")
		gated.Gated = true
		srv.AddRepo(gated)
		private := storiesRepo(t, "org/private")
		private.Private = true
		srv.AddRepo(private)
		srv.AddRepo(storiesRepo(t, "org/public"))
		return srv
	}
	sha := hubtest.File{Data: mustRead(t, filepath.Join(storiesDir, "model.safetensors")), LFS: true}.SHA256()
	cdnGET := hubtest.OnServer("cdn", "GET")
	type failure struct {
		name   string
		model  string
		faults func(srv *hubtest.Server) []*hubtest.Fault
		env    map[string]string
		args   []string
	}
	fault := func(f hubtest.Fault) func(*hubtest.Server) []*hubtest.Fault {
		return func(*hubtest.Server) []*hubtest.Fault { return []*hubtest.Fault{&f} }
	}
	failures := []failure{
		{name: "ok gated", model: "org/gated"},
		{name: "repo not found", model: "org/missing"},
		{name: "revision not found", model: "org/public@nope"},
		{name: "entry not found", model: "org/public", args: []string{"--include", "nothing.json", "--include", "config.json"}},
		{name: "unauthorized", model: "org/private", faults: fault(hubtest.Fault{Match: hubtest.OnServer("hub", ""), Status: 401})},
		{name: "forbidden", model: "org/gated", faults: fault(hubtest.Fault{Match: hubtest.OnServer("hub", ""), Status: 403})},
		{name: "5xx", model: "org/public", faults: fault(hubtest.Fault{Status: 503, RetryAfter: "0"})},
		{name: "429", model: "org/public", faults: fault(hubtest.Fault{Match: cdnGET, Status: 429})},
		{name: "reset mid-body", model: "org/public", faults: fault(hubtest.Fault{Match: cdnGET, Drop: true, After: 1000})},
		{name: "stalled body", model: "org/public", env: map[string]string{"HF_HUB_DOWNLOAD_TIMEOUT": "0.1"},
			faults: fault(hubtest.Fault{Match: cdnGET, Stall: 20e9, After: 1000})},
		{name: "slow metadata", model: "org/public", env: map[string]string{"HF_HUB_ETAG_TIMEOUT": "0.1"},
			faults: fault(hubtest.Fault{Match: hubtest.OnServer("hub", ""), Delay: 20e9})},
		{name: "wrong sha256", model: "org/public", faults: fault(hubtest.Fault{Match: cdnGET, Corrupt: true})},
		{name: "wrong size", model: "org/public", faults: fault(hubtest.Fault{Match: hubtest.OnServer("hub", "HEAD"), Header: map[string]string{"X-Linked-Size": "7"}})},
		{name: "redirect loop", model: "org/public", faults: func(srv *hubtest.Server) []*hubtest.Fault {
			return []*hubtest.Fault{{Match: cdnGET, Status: 302, Header: map[string]string{"Location": srv.CDN.URL + "/repos/" + sha + "?x"}}}
		}},
		{name: "redirect to file", model: "org/public", faults: fault(hubtest.Fault{Match: cdnGET, Status: 302, Header: map[string]string{"Location": "file:///etc/passwd"}})},
		{name: "not a hub", model: "org/public", faults: fault(hubtest.Fault{Match: hubtest.OnServer("hub", "HEAD"), Header: map[string]string{"X-Repo-Commit": ""}})},
		{name: "bad listing", model: "org/public", faults: fault(hubtest.Fault{Match: hubtest.OnPath("/revision/main"), Header: map[string]string{"Content-Length": "5"}})},
		{name: "offline", model: "org/uncached", args: []string{"--offline"}},
		{name: "endpoint down", model: "org/public", env: map[string]string{"HF_ENDPOINT": "http://127.0.0.1:1"}},
	}
	sources := map[string]func(t *testing.T, env map[string]string) []string{
		"--token": func(t *testing.T, env map[string]string) []string { return []string{"--token", canaryToken} },
		"HF_TOKEN": func(t *testing.T, env map[string]string) []string {
			env["HF_TOKEN"] = canaryToken
			return nil
		},
		"HF_HOME/token": func(t *testing.T, env map[string]string) []string {
			home := t.TempDir()
			require.NoError(t, os.WriteFile(filepath.Join(home, "token"), []byte(canaryToken+"\n"), 0o600))
			env["HF_HOME"] = home
			return nil
		},
	}
	commands := [][]string{
		{"download", "--retries", "0"},
		{"-v", "download", "--retries", "0"},
		{"-v", "--json", "download", "--retries", "0"},
		{"-v", "--json", "inspect", "--retries", "0"},
		{"-v", "generate", "--retries", "0", "-p", "Once", "-n", "2"},
		{"--json", "generate", "--retries", "0", "-p", "Once", "-n", "2"},
	}
	var mu sync.Mutex
	seenCodes := map[ExitCode]bool{}
	t.Run("matrix", func(t *testing.T) {
		for srcName, source := range sources {
			for _, fl := range failures {
				t.Run(srcName+"/"+fl.name, func(t *testing.T) {
					t.Parallel()
					srv := newHub(t)
					if fl.faults != nil {
						for _, f := range fl.faults(srv) {
							srv.AddFault(f)
						}
					}
					cmds := commands
					if srcName != "--token" {
						cmds = commands[1:4] // the other sources: -v and --json once each
					}
					for _, command := range cmds {
						if command[0] != "download" && command[1] != "download" && fl.args != nil && fl.args[0] == "--include" {
							continue // --include is download's
						}
						env := hubEnv(t, srv)
						for k, v := range fl.env {
							env[k] = v
						}
						extra := source(t, env)
						e := newTestFactory(t, env)
						withFakeMachine(t, e, nil)
						args := append(append(append(append([]string{}, extra...), command...), "--model", fl.model), fl.args...)
						code := e.run(args...)
						mu.Lock()
						seenCodes[code] = true
						mu.Unlock()
						out := e.out.String() + e.errOut.String()
						if strings.Contains(out, canaryToken) || strings.Contains(out, canaryToken[3:]) {
							t.Fatalf("%v: the token appears in the output:\n%s", args, out)
						}
					}
				})
			}
		}
	})
	assert.True(t, seenCodes[ExitOK] && seenCodes[ExitHub], "both successes and Hub failures were exercised: %v", seenCodes)

	// The client itself never formats its token, whatever the verb.
	c := hub.New(hub.Env{Token: canaryToken})
	for _, verb := range []string{"%v", "%+v", "%#v", "%s", "%q", "%x"} {
		s := fmt.Sprintf(verb, c)
		assert.NotContains(t, s, canaryToken, verb)
		assert.NotContains(t, s, fmt.Sprintf("%x", canaryToken), verb)
	}
	func() {
		defer func() {
			r := recover()
			assert.NotContains(t, fmt.Sprint(r), canaryToken, "panic value")
		}()
		panic(fmt.Sprintf("client %+v failed", c))
	}()
}

func mustRead(t *testing.T, p string) []byte {
	t.Helper()
	b, err := os.ReadFile(p)
	require.NoError(t, err)
	return b
}
