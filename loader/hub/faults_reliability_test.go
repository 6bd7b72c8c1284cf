package hub_test

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tputool/tputool/internal/errs"
	"github.com/tputool/tputool/loader/hub"
	"github.com/tputool/tputool/loader/hub/hubtest"
)

// TestNetworkFaultsLeaveCacheValid drives one LFS download through each
// kind of network fault. Every case must end with the right file or a
// clear error of the right kind, within a bounded number of requests, and
// the cache must be valid afterwards (every blob matches its hash, every
// snapshot entry points at one); a failed download may only leave a
// resumable .incomplete file.
func TestNetworkFaultsLeaveCacheValid(t *testing.T) {
	sha := hubtest.File{Data: weights, LFS: true}.SHA256()
	size := len(weights)
	cdnGET := hubtest.OnServer("cdn", "GET")
	hubHEAD := hubtest.OnServer("hub", "HEAD")
	cases := []struct {
		name   string
		faults func(cdnURL string) []*hubtest.Fault
		idle   time.Duration
		// wantErr is the error kind; nil means success.
		wantErr error
		// errHas must appear in the error message.
		errHas string
		// maxRequests bounds the requests of the whole download.
		maxRequests int
		// sleeps, when set, are the retry waits expected.
		sleeps []time.Duration
		// noRetry: the error is final, so nothing may be retried.
		noRetry bool
	}{
		{name: "connection reset mid-body", maxRequests: 5, faults: func(string) []*hubtest.Fault {
			return []*hubtest.Fault{{Match: cdnGET, Times: 2, Drop: true, After: 70_000}}
		}},
		{name: "reset at the first byte every time", wantErr: hub.ErrNetwork, errHas: "at byte 0", maxRequests: 1 + 4, faults: func(string) []*hubtest.Fault {
			return []*hubtest.Fault{{Match: cdnGET, Drop: true, After: 0}}
		}},
		{name: "slow-loris headers", idle: 150 * time.Millisecond, maxRequests: 4, faults: func(string) []*hubtest.Fault {
			return []*hubtest.Fault{{Match: cdnGET, Times: 1, Delay: 30 * time.Second}}
		}},
		{name: "slow-loris body", idle: 150 * time.Millisecond, maxRequests: 4, faults: func(string) []*hubtest.Fault {
			return []*hubtest.Fault{{Match: cdnGET, Times: 2, Stall: 30 * time.Second, After: 1000}}
		}},
		{name: "429 with Retry-After", maxRequests: 4, sleeps: []time.Duration{7 * time.Second}, faults: func(string) []*hubtest.Fault {
			return []*hubtest.Fault{{Match: cdnGET, Times: 1, Status: 429, RetryAfter: "7"}}
		}},
		{name: "503 with an HTTP-date Retry-After", maxRequests: 4, faults: func(string) []*hubtest.Fault {
			return []*hubtest.Fault{{Match: cdnGET, Times: 1, Status: 503, RetryAfter: time.Now().Add(time.Hour).UTC().Format(http.TimeFormat)}}
		}, sleeps: []time.Duration{5 * time.Minute}}, // capped
		{name: "5xx until retries run out", wantErr: hub.ErrHTTP, errHas: "HTTP 502", maxRequests: 1 + 4, faults: func(string) []*hubtest.Fault {
			return []*hubtest.Fault{{Match: cdnGET, Status: 502}}
		}},
		{name: "5xx on the metadata request", maxRequests: 5, faults: func(string) []*hubtest.Fault {
			return []*hubtest.Fault{{Match: hubHEAD, Times: 2, Status: 500}}
		}},
		{name: "Content-Length longer than the body", maxRequests: 4, faults: func(string) []*hubtest.Fault {
			return []*hubtest.Fault{{Match: cdnGET, Times: 1, Header: map[string]string{"Content-Length": strconv.Itoa(size + 5000)}}}
		}},
		{name: "Content-Length shorter than the body", maxRequests: 4, faults: func(string) []*hubtest.Fault {
			return []*hubtest.Fault{{Match: cdnGET, Times: 1, Header: map[string]string{"Content-Length": "1000"}}}
		}},
		{name: "announced size too small", noRetry: true, wantErr: hub.ErrIntegrity, errHas: "more than the announced", maxRequests: 2, faults: func(string) []*hubtest.Fault {
			return []*hubtest.Fault{{Match: hubHEAD, Header: map[string]string{"X-Linked-Size": strconv.Itoa(size - 10)}}}
		}},
		{name: "announced size too large", wantErr: hub.ErrIntegrity, errHas: "the Hub announced", maxRequests: 3, faults: func(string) []*hubtest.Fault {
			return []*hubtest.Fault{{Match: hubHEAD, Header: map[string]string{"X-Linked-Size": strconv.Itoa(size + 10)}}}
		}},
		{name: "wrong sha256", noRetry: true, wantErr: hub.ErrIntegrity, errHas: "sha256", maxRequests: 2, faults: func(string) []*hubtest.Fault {
			return []*hubtest.Fault{{Match: cdnGET, Corrupt: true}}
		}},
		{name: "absolute redirect loop", noRetry: true, wantErr: errs.ErrHub, errHas: "redirect", maxRequests: 1 + 11, faults: func(cdn string) []*hubtest.Fault {
			return []*hubtest.Fault{{Match: cdnGET, Status: 302, Header: map[string]string{"Location": cdn + "/repos/" + sha + "?again"}}}
		}},
		{name: "relative redirect loop on the metadata request", noRetry: true, wantErr: errs.ErrHub, errHas: "redirect", maxRequests: 11, faults: func(string) []*hubtest.Fault {
			return []*hubtest.Fault{{Match: hubHEAD, Status: 307, Header: map[string]string{"Location": "/org/tiny/resolve/main/model.safetensors"}}}
		}},
		{name: "redirect to file://", noRetry: true, wantErr: errs.ErrHub, errHas: `"file"`, maxRequests: 2, faults: func(string) []*hubtest.Fault {
			return []*hubtest.Fault{{Match: cdnGET, Status: 302, Header: map[string]string{"Location": "file:///etc/passwd"}}}
		}},
		{name: "metadata pointing at ftp://", noRetry: true, wantErr: errs.ErrHub, errHas: `"ftp"`, maxRequests: 1, faults: func(string) []*hubtest.Fault {
			return []*hubtest.Fault{{Match: hubHEAD, Header: map[string]string{"Location": "ftp://mirror.example/blob"}}}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			srv := hubtest.New(t)
			srv.AddRepo(tinyRepo())
			c, rec := newClient(t, srv)
			if tc.idle > 0 {
				c.IdleTimeout = tc.idle
			}
			for _, f := range tc.faults(srv.CDN.URL) {
				srv.AddFault(f)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			start := time.Now()
			p, err := c.Download(ctx, "org/tiny", "main", "model.safetensors")
			if ctx.Err() != nil {
				t.Fatalf("the download did not end within 20 s (%d requests): a retry loop?", len(srv.Requests()))
			}
			if d := time.Since(start); d > 10*time.Second {
				t.Errorf("took %s", d)
			}
			if n := len(srv.Requests()); n > tc.maxRequests {
				t.Errorf("%d requests, want at most %d: %+v", n, tc.maxRequests, srv.Requests())
			}
			if tc.noRetry && len(rec.sleeps) > 0 {
				t.Errorf("retried a final error (waits %v)", rec.sleeps)
			}
			if tc.sleeps != nil {
				got := rec.sleeps
				if len(got) != len(tc.sleeps) || got[0] < tc.sleeps[0]-2*time.Second || got[0] > tc.sleeps[0] {
					t.Errorf("retry waits %v, want %v", got, tc.sleeps)
				}
			}
			state := hubtest.CheckCache(t, c.Cache.Dir)
			if tc.wantErr == nil {
				if err != nil {
					t.Fatal(err)
				}
				if b, _ := os.ReadFile(p); !bytes.Equal(b, weights) {
					t.Fatal("downloaded file differs")
				}
				if state.Blobs != 1 || state.Pointers != 1 || state.Incomplete != 0 {
					t.Errorf("cache state %+v, want one blob and one pointer", state)
				}
				return
			}
			if err == nil {
				t.Fatalf("no error, want %v", tc.wantErr)
			}
			if !errors.Is(err, tc.wantErr) || !errors.Is(err, errs.ErrHub) {
				t.Errorf("error %q is not %v", err, tc.wantErr)
			}
			if !strings.Contains(err.Error(), tc.errHas) || !strings.Contains(err.Error(), "model.safetensors") {
				t.Errorf("error %q does not name the file or contain %q", err, tc.errHas)
			}
			if state.Blobs != 0 || state.Pointers != 0 {
				t.Errorf("a failed download left %+v", state)
			}
			if _, err := os.Stat(filepath.Join(c.Cache.RepoDir("org/tiny"), "blobs", sha)); err == nil {
				t.Error("the blob exists after a failure")
			}
			// The next, clean run completes from whatever is left.
			srv.ClearFaults()
			if _, err := c.Download(context.Background(), "org/tiny", "main", "model.safetensors"); err != nil {
				t.Fatalf("clean retry: %v", err)
			}
			if st := hubtest.CheckCache(t, c.Cache.Dir); st.Blobs != 1 || st.Pointers != 1 || st.Incomplete != 0 {
				t.Errorf("after a clean retry: %+v", st)
			}
		})
	}
}

// TestListingFaults: the repository listing (the first request of every
// Hub model) is retried on 5xx/429 and bounded by the metadata timeout.
func TestListingFaults(t *testing.T) {
	srv := hubtest.New(t)
	srv.AddRepo(tinyRepo())
	c, rec := newClient(t, srv)
	api := func(_ string, r *http.Request) bool { return strings.HasPrefix(r.URL.Path, "/api/") }
	srv.AddFault(&hubtest.Fault{Match: api, Times: 1, Status: 429, RetryAfter: "2"})
	srv.AddFault(&hubtest.Fault{Match: api, Times: 1, Status: 503})
	s, err := c.ListFiles(context.Background(), "org/tiny", "main")
	if err != nil {
		t.Fatal(err)
	}
	if len(s.RepoFiles) != 3 || len(rec.sleeps) != 2 || rec.sleeps[0] != 2*time.Second {
		t.Errorf("files %v, sleeps %v", s.RepoFiles, rec.sleeps)
	}

	// A listing body that stalls is cut by the metadata timeout.
	srv.ClearFaults()
	c.EtagTimeout = 200 * time.Millisecond
	c.Retries = 1
	srv.AddFault(&hubtest.Fault{Match: api, Stall: 30 * time.Second, After: 10})
	start := time.Now()
	_, err = c.ListFiles(context.Background(), "org/tiny", "main")
	if !errors.Is(err, hub.ErrNetwork) || time.Since(start) > 10*time.Second {
		t.Fatalf("stalled listing: %v after %s", err, time.Since(start))
	}
}

// TestRetriesZero: Retries 0 makes exactly one attempt.
func TestRetriesZero(t *testing.T) {
	srv := hubtest.New(t)
	srv.AddRepo(tinyRepo())
	c, rec := newClient(t, srv)
	c.Retries = 0
	srv.AddFault(&hubtest.Fault{Match: hubtest.OnServer("cdn", "GET"), Status: 503})
	_, err := c.Download(context.Background(), "org/tiny", "main", "model.safetensors")
	if !errors.Is(err, hub.ErrHTTP) {
		t.Fatalf("got %v", err)
	}
	if n := srv.Count(isCDN); n != 1 || len(rec.sleeps) != 0 {
		t.Errorf("%d CDN requests, sleeps %v; want 1 and none", n, rec.sleeps)
	}
	hubtest.CheckCache(t, c.Cache.Dir)
}
