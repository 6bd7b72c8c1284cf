package hub_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/tputool/tputool/loader/hub"
	"github.com/tputool/tputool/loader/hub/hubtest"
)

// A signed CDN URL that expires mid-download (Xet's and S3's last about an
// hour) answers 403: the client asks the Hub for a fresh URL with another
// HEAD and resumes from it, instead of calling it a token permission error.
func TestExpiredDownloadURLIsRefreshed(t *testing.T) {
	srv := hubtest.New(t)
	srv.AddRepo(tinyRepo())
	c, rec := newClient(t, srv)
	srv.AddFault(&hubtest.Fault{Match: hubtest.OnSignature(1), Times: 1, Drop: true, After: 100_000})
	expired := srv.AddFault(&hubtest.Fault{Match: hubtest.OnSignature(1), Status: 403})
	p, err := c.Download(context.Background(), "org/tiny", "main", "model.safetensors")
	if err != nil {
		t.Fatalf("download across an expired URL: %v", err)
	}
	if b, _ := os.ReadFile(p); !bytes.Equal(b, weights) {
		t.Fatal("file differs")
	}
	heads := srv.Count(func(r hubtest.Request) bool { return r.Server == "hub" && r.Method == "HEAD" })
	resumed := srv.Count(func(r hubtest.Request) bool { return isCDN(r) && r.Range == "bytes=100000-" })
	if heads != 2 || resumed != 2 || srv.Fired(expired) != 1 {
		t.Errorf("%d HEADs, %d resumed GETs, expired URL used %d times; want 2, 2 (old URL, fresh URL), 1: %+v",
			heads, resumed, srv.Fired(expired), srv.Requests())
	}
	if !strings.Contains(rec.all(), "fresh download URL") {
		t.Errorf("no warning about the refresh: %s", rec.all())
	}
}

// A storage host that refuses every URL fails after a bounded number of
// fresh URLs, with an error about the URL, not the token; the endpoint's
// own 403 stays ErrForbidden, with no refresh.
func TestRefusedDownloadURLIsBounded(t *testing.T) {
	srv := hubtest.New(t)
	srv.AddRepo(tinyRepo())
	c, _ := newClient(t, srv)
	srv.AddFault(&hubtest.Fault{Match: hubtest.OnServer("cdn", ""), Status: 403})
	_, err := c.Download(context.Background(), "org/tiny", "main", "model.safetensors")
	if err == nil || errors.Is(err, hub.ErrForbidden) || !errors.Is(err, hub.ErrHTTP) ||
		!strings.Contains(err.Error(), "refused the download URL") || !strings.Contains(err.Error(), "HTTP 403") {
		t.Fatalf("err = %v, want an HTTP 403 error about the download URL", err)
	}
	heads := srv.Count(func(r hubtest.Request) bool { return r.Server == "hub" && r.Method == "HEAD" })
	if gets := srv.Count(isCDN); heads != 3 || gets != 3 {
		t.Errorf("%d HEADs and %d CDN GETs, want 3 and 3 (two fresh URLs)", heads, gets)
	}
	hubtest.CheckCache(t, c.Cache.Dir)

	srv.ClearFaults()
	srv.ResetLog()
	srv.AddFault(&hubtest.Fault{Match: hubtest.OnServer("hub", "GET"), Status: 403})
	_, err = c.Download(context.Background(), "org/tiny", "main", "config.json")
	if !errors.Is(err, hub.ErrForbidden) {
		t.Fatalf("403 from the endpoint: %v, want ErrForbidden", err)
	}
	if n := srv.Count(func(r hubtest.Request) bool { return r.Method == "HEAD" }); n != 1 {
		t.Errorf("%d HEADs for the endpoint's own 403, want 1", n)
	}
}

// Remote range reads remember the CDN URL; once it expires they go
// through the Hub again.
func TestRemoteReadsRefreshAnExpiredURL(t *testing.T) {
	srv := hubtest.New(t)
	commit := srv.AddRepo(tinyRepo())
	c, _ := newClient(t, srv)
	r := c.Remote("org/tiny", commit, "model.safetensors")
	ctx := context.Background()
	if b, _, err := r.ReadRange(ctx, 0, 8); err != nil || !bytes.Equal(b, weights[:8]) {
		t.Fatalf("first read: %v", err)
	}
	srv.AddFault(&hubtest.Fault{Match: hubtest.OnSignature(1), Status: 403})
	b, total, err := r.ReadRange(ctx, 100, 8)
	if err != nil || !bytes.Equal(b, weights[100:108]) || total != int64(len(weights)) {
		t.Fatalf("read after the URL expired: %v", err)
	}
}
