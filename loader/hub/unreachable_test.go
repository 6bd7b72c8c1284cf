package hub_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/tputool/tputool/internal/errs"
	"github.com/tputool/tputool/loader/hub"
)

// TestUnreachableHubFailsFast: connection refused (nothing listens) is
// retried at most once, whatever Retries
// says, and the error says to use --offline or a local path.
func TestUnreachableHubFailsFast(t *testing.T) {
	// A port that was just free: nothing listens there.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refused := "http://" + l.Addr().String()
	l.Close()
	// (A name that does not resolve takes the same path, *net.DNSError, but
	// resolving one would leave the machine.)
	for _, endpoint := range []string{refused} {
		rec := &recorder{}
		c := &hub.Client{
			Endpoint: endpoint, Cache: hub.Cache{Dir: t.TempDir()}, Retries: 5,
			Backoff: func(int) time.Duration { return time.Millisecond }, Sleep: rec.sleep, Logger: rec,
			EtagTimeout: 2 * time.Second, IdleTimeout: 2 * time.Second,
		}
		_, err := c.ListFiles(context.Background(), "org/model", "main")
		if !errors.Is(err, errs.ErrHub) {
			t.Fatalf("%s: err %v, want a Hub error", endpoint, err)
		}
		if !strings.Contains(err.Error(), "HF_HUB_OFFLINE=1, Client.Offline") || !strings.Contains(err.Error(), "local path") {
			t.Errorf("%s: the error does not suggest offline mode or a local path: %v", endpoint, err)
		}
		if n := len(rec.sleeps); n > 1 {
			t.Errorf("%s: %d retries, want at most 1 (%v)", endpoint, n, rec.all())
		}
	}
}
