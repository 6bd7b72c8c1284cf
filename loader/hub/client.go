package hub

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Defaults for Client fields left at zero by New.
const (
	DefaultRetries  = 5
	DefaultParallel = 8
	maxRedirects    = 10
	maxRetryAfter   = 5 * time.Minute
)

// Logger receives warnings (a fallback to the cache, a retry) and debug
// lines. Messages never contain the token. Implementations must be safe
// for concurrent use.
type Logger interface {
	Warn(msg string)
	Debug(msg string)
}

// ProgressEvent says what a Progress report is about.
type ProgressEvent int

const (
	// FileStart: a download begins (Bytes > 0 when it resumes).
	FileStart ProgressEvent = iota
	// FileAdvance: Bytes of Total have been written.
	FileAdvance
	// FileDone: the file is verified and in the cache.
	FileDone
	// FileCached: the file was already in the cache; nothing downloaded.
	// Bytes and Total are its size.
	FileCached
	// BatchStart: DownloadFiles begins Files files of Total bytes (the sum
	// of the sizes the listing gave; cached files included).
	BatchStart
	// BatchDone: DownloadFiles returned.
	BatchDone
)

// Progress is one download progress report.
type Progress struct {
	Event ProgressEvent
	Repo  string
	File  string
	// Bytes is how much of the file is on disk, Total its size (for
	// batches: the batch's size).
	Bytes, Total int64
	// Files is the number of files of a batch.
	Files int
}

// ProgressFunc receives progress reports. The client serialises calls, so
// it need not be safe for concurrent use, but it must return quickly.
type ProgressFunc func(Progress)

// Client downloads from the Hub into a Cache. Set its fields before first
// use; New fills them from an Env.
type Client struct {
	// Endpoint is the Hub URL (HF_ENDPOINT); the token is only sent to this
	// scheme, host and port. Credentials in it (http://user:token@host) are
	// sent as HTTP basic auth, as requests does, and never printed: logs
	// and errors show it through RedactURL.
	Endpoint string
	// Token authenticates requests to Endpoint; empty for anonymous.
	Token Token
	// Cache is where files go.
	Cache Cache
	// Offline forbids every network call: files come from the cache or the
	// call fails with ErrNotCached.
	Offline bool
	// HTTPClient sends the requests; nil means a client with the default
	// transport. Its CheckRedirect is not used: redirects are handled here.
	HTTPClient *http.Client
	// EtagTimeout bounds a metadata call (HEAD, repo listing); after it the
	// client falls back to the cache when it can.
	EtagTimeout time.Duration
	// IdleTimeout is the longest a download may wait for the next byte
	// (response headers included); it is not a limit on the whole transfer.
	IdleTimeout time.Duration
	// Retries is how many times a request is repeated after a connection
	// error, a timeout, 5xx, 408 or 429.
	Retries int
	// Backoff returns the wait before retry number attempt (1, 2, ...); nil
	// means exponential backoff from 1 s to 8 s with jitter. A 429/503
	// Retry-After header takes precedence.
	Backoff func(attempt int) time.Duration
	// Sleep waits between retries; nil means a timer that ctx can cancel.
	// Tests replace it to run instantly.
	Sleep func(ctx context.Context, d time.Duration) error
	// Parallel bounds how many files download at once.
	Parallel int
	// Logger gets warnings and debug lines; nil discards them.
	Logger Logger
	// Progress gets download progress; nil discards it.
	Progress ProgressFunc
	// UserAgent is sent with every request.
	UserAgent string
	// FreeSpace returns the bytes that may still be written in a folder;
	// nil means statfs (GetDiskFreeSpaceEx on Windows). An error skips the
	// check. It must be safe for concurrent use. Tests replace it to
	// simulate a full disk.
	FreeSpace func(dir string) (int64, error)

	progressMu sync.Mutex
	softOnce   sync.Once
	sizesMu    sync.Mutex
	sizes      map[string]map[string]int64  // repo@commit -> file -> size
	lfsETags   map[string]map[string]string // repo@commit -> file -> sha256 of LFS files
}

// New returns a client configured from env with the default retry count,
// parallelism and timeouts.
func New(env Env) *Client {
	return &Client{
		Endpoint:    env.Endpoint,
		Token:       env.Token,
		Cache:       Cache{Dir: env.CacheDir},
		Offline:     env.Offline,
		EtagTimeout: env.EtagTimeout,
		IdleTimeout: env.DownloadTimeout,
		Retries:     DefaultRetries,
		Parallel:    DefaultParallel,
	}
}

func (c *Client) endpoint() string {
	if c.Endpoint == "" {
		return DefaultEndpoint
	}
	return strings.TrimRight(c.Endpoint, "/")
}

func (c *Client) etagTimeout() time.Duration {
	if c.EtagTimeout <= 0 {
		return DefaultEtagTimeout
	}
	return c.EtagTimeout
}

func (c *Client) idleTimeout() time.Duration {
	if c.IdleTimeout <= 0 {
		return DefaultDownloadTimeout
	}
	return c.IdleTimeout
}

func (c *Client) parallel() int {
	if c.Parallel <= 0 {
		return DefaultParallel
	}
	return c.Parallel
}

func (c *Client) warnf(format string, args ...any) {
	if c.Logger != nil {
		c.Logger.Warn(fmt.Sprintf(format, args...))
	}
}

func (c *Client) debugf(format string, args ...any) {
	if c.Logger != nil {
		c.Logger.Debug(fmt.Sprintf(format, args...))
	}
}

// warnSoftLockOnce warns, once per client, that locks fall back to soft
// locks; the reason is the same for every blob of a cache.
func (c *Client) warnSoftLockOnce(format string, args ...any) {
	c.softOnce.Do(func() { c.warnf(format, args...) })
}

func (c *Client) report(p Progress) {
	if c.Progress == nil {
		return
	}
	c.progressMu.Lock()
	defer c.progressMu.Unlock()
	c.Progress(p)
}

func (c *Client) backoff(attempt int) time.Duration {
	if c.Backoff != nil {
		return c.Backoff(attempt)
	}
	return DefaultBackoff(attempt)
}

// DefaultBackoff waits 1 s, 2 s, 4 s, then 8 s per retry, each scaled by a
// random factor in [0.5, 1) ("equal jitter") so that clients retrying
// together spread out.
func DefaultBackoff(attempt int) time.Duration {
	if attempt < 1 {
		attempt = 1
	}
	d := time.Second << min(attempt-1, 3)
	return d/2 + time.Duration(rand.Int64N(int64(d/2)))
}

func (c *Client) sleep(ctx context.Context, d time.Duration) error {
	if c.Sleep != nil {
		return c.Sleep(ctx, d)
	}
	return pause(ctx, d)
}

// retryAfter continues a request whose first attempt failed with err: it
// waits (backoff, or the server's Retry-After) and repeats fn, as withRetry
// does, so the first attempt counts against Retries like any other.
func (c *Client) retryAfter(ctx context.Context, what string, err error, fn func() error) error {
	first := true
	return c.withRetry(ctx, what, func() error {
		if first {
			first = false
			return err
		}
		return fn()
	})
}

// withRetry runs fn until it succeeds, fails with an error that retrying
// cannot fix, or retries are spent.
func (c *Client) withRetry(ctx context.Context, what string, fn func() error) error {
	for attempt := 1; ; attempt++ {
		err := fn()
		down := err != nil && unreachable(err)
		if err == nil || ctx.Err() != nil || !retryable(err) || attempt > c.Retries || (down && attempt > 1) {
			if err != nil && ctx.Err() != nil {
				return ctx.Err()
			}
			var he *Error
			if down && errors.As(err, &he) && !strings.Contains(he.Detail, hintUnreachable) {
				if he.Detail != "" {
					he.Detail += "; "
				}
				he.Detail += hintUnreachable
			}
			return err
		}
		d := c.backoff(attempt)
		var he *Error
		if errors.As(err, &he) && he.retryAfter > 0 {
			d = he.retryAfter
		}
		c.warnf("%s: %v; retry %d/%d in %s", what, err, attempt, c.Retries, d.Round(time.Millisecond))
		if err := c.sleep(ctx, d); err != nil {
			return err
		}
	}
}

func (c *Client) httpClient() *http.Client {
	base := c.HTTPClient
	if base == nil {
		base = http.DefaultClient
	}
	hc := *base
	hc.Timeout = 0 // per-request idle timers instead
	hc.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return &hc
}

// sameOrigin reports whether u is on the configured endpoint (scheme, host
// and port), the only place the token may go.
func (c *Client) sameOrigin(u *url.URL) bool {
	ep, err := url.Parse(c.endpoint())
	if err != nil {
		return false
	}
	return strings.EqualFold(u.Scheme, ep.Scheme) && strings.EqualFold(u.Host, ep.Host)
}

var errIdle = errors.New("no data received")

// response is an HTTP response whose body is guarded by an idle timer.
type response struct {
	*http.Response
	URL    *url.URL // the URL that answered, after redirects
	cancel context.CancelCauseFunc
	timer  *time.Timer
}

func (r *response) close() {
	r.timer.Stop()
	if r.Body != nil {
		r.Body.Close()
	}
	r.cancel(nil)
}

// send performs one request. Relative redirects are always followed (a
// renamed repository), absolute ones only when followAbsolute is set (a
// GET to the CDN); otherwise the 3xx response is returned so the caller
// can read Location. The token goes only to the endpoint's origin. idle
// bounds the wait for headers and then for each body read.
func (c *Client) send(ctx context.Context, method, rawURL string, hdr http.Header, followAbsolute bool, idle time.Duration) (*response, error) {
	if c.Offline {
		return nil, &Error{Kind: ErrNotCached, Detail: "offline mode (HF_HUB_OFFLINE, Client.Offline) forbids " + method + " " + RedactURL(rawURL)}
	}
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, &Error{Kind: ErrNetwork, Detail: "bad URL " + RedactURL(rawURL), Err: unwrapURLError(err)}
	}
	if !httpScheme(u.Scheme) {
		return nil, &Error{Kind: ErrMetadata, Detail: fmt.Sprintf("%s %s: URL scheme %q is not http or https", method, RedactURL(rawURL), u.Scheme)}
	}
	rctx, cancel := context.WithCancelCause(ctx)
	timer := time.AfterFunc(idle, func() { cancel(errIdle) })
	hc := c.httpClient()
	for hop := 0; ; hop++ {
		req, err := http.NewRequestWithContext(rctx, method, u.String(), nil)
		if err != nil {
			timer.Stop()
			cancel(nil)
			return nil, &Error{Kind: ErrNetwork, Detail: "bad URL " + RedactURL(u.String()), Err: unwrapURLError(err)}
		}
		for k, v := range hdr {
			req.Header[k] = v
		}
		req.Header.Set("Accept-Encoding", "identity")
		req.Header.Set("User-Agent", c.userAgent())
		if c.Token.IsSet() && c.sameOrigin(u) {
			req.Header.Set("Authorization", "Bearer "+c.Token.Reveal())
		}
		c.debugf("%s %s", method, RedactURL(u.String()))
		resp, err := hc.Do(req)
		if err != nil {
			timer.Stop()
			cause := context.Cause(rctx)
			cancel(nil)
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			if errors.Is(cause, errIdle) {
				return nil, &Error{Kind: ErrNetwork, Detail: fmt.Sprintf("%s %s: no response within %s", method, RedactURL(u.String()), idle)}
			}
			return nil, &Error{Kind: ErrNetwork, Detail: method + " " + RedactURL(u.String()), Err: unwrapURLError(err)}
		}
		loc := resp.Header.Get("Location")
		if resp.StatusCode >= 300 && resp.StatusCode < 400 && loc != "" {
			if lu, perr := url.Parse(loc); perr == nil {
				target := u.ResolveReference(lu)
				relative := lu.Scheme == "" && lu.Host == ""
				if relative || followAbsolute {
					var rerr *Error
					switch {
					case !httpScheme(target.Scheme):
						rerr = &Error{Kind: ErrMetadata, Status: resp.StatusCode,
							Detail: fmt.Sprintf("%s %s redirects to a %q URL; only http and https are followed", method, RedactURL(u.String()), target.Scheme)}
					case hop >= maxRedirects:
						rerr = &Error{Kind: ErrHTTP, Status: resp.StatusCode,
							Detail: fmt.Sprintf("%s %s: more than %d redirects (a redirect loop?)", method, RedactURL(u.String()), maxRedirects)}
					}
					if rerr != nil {
						resp.Body.Close()
						timer.Stop()
						cancel(nil)
						return nil, rerr
					}
					io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
					resp.Body.Close()
					if relative {
						// As huggingface_hub: keep scheme and host, take the path.
						nu := *u
						nu.Path, nu.RawPath, nu.RawQuery = target.Path, target.RawPath, target.RawQuery
						u = &nu
					} else {
						u = target
					}
					timer.Reset(idle)
					continue
				}
			}
		}
		timer.Reset(idle)
		r := &response{Response: resp, URL: u, cancel: cancel, timer: timer}
		resp.Body = &idleBody{rc: resp.Body, timer: timer, idle: idle, ctx: rctx, parent: ctx, what: method + " " + RedactURL(u.String())}
		return r, nil
	}
}

func httpScheme(s string) bool { return strings.EqualFold(s, "http") || strings.EqualFold(s, "https") }

func (c *Client) userAgent() string {
	if c.UserAgent != "" {
		return c.UserAgent
	}
	return "tputool; go/" + runtime.Version()
}

// idleBody resets the idle timer on every read that returns data, and turns
// a timer-cancelled read into a clear error.
type idleBody struct {
	rc     io.ReadCloser
	timer  *time.Timer
	idle   time.Duration
	ctx    context.Context
	parent context.Context
	what   string
}

func (b *idleBody) Read(p []byte) (int, error) {
	n, err := b.rc.Read(p)
	if n > 0 {
		b.timer.Reset(b.idle)
	}
	if err != nil && err != io.EOF {
		if b.parent.Err() != nil {
			return n, b.parent.Err()
		}
		if errors.Is(context.Cause(b.ctx), errIdle) {
			return n, fmt.Errorf("%s: no data for %s: %w", b.what, b.idle, errIdle)
		}
	}
	return n, err
}

func (b *idleBody) Close() error { return b.rc.Close() }

func unwrapURLError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

// RedactURL is raw fit to print: credentials in it (HF_ENDPOINT as
// http://user:token@host) become "***" and the query string (CDN URLs
// carry signatures) becomes "?…". An unparsable URL prints as
// "<invalid URL>", since it may hold credentials too.
func RedactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "<invalid URL>"
	}
	masked := u.User != nil
	u.User = nil
	query := u.RawQuery != "" || u.ForceQuery
	u.RawQuery, u.ForceQuery = "", false
	out := u.String()
	if masked {
		out = strings.Replace(out, "//", "//***@", 1)
	}
	if query {
		out += "?…"
	}
	return out
}

// statusError maps an error response to an *Error, reading the Hub's
// X-Error-Code and X-Error-Message headers (or a JSON {"error": ...} body).
func statusError(resp *http.Response, repo, rev, file string) *Error {
	e := &Error{Repo: repo, Revision: rev, File: file, Status: resp.StatusCode}
	msg := resp.Header.Get("X-Error-Message")
	if msg == "" && resp.Body != nil {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
		var body struct {
			Error string `json:"error"`
		}
		if json.Unmarshal(b, &body) == nil {
			msg = body.Error
		}
	}
	msg = strings.TrimSpace(msg)
	if len(msg) > 300 {
		msg = msg[:300] + "…"
	}
	code := resp.Header.Get("X-Error-Code")
	switch {
	case code == "GatedRepo":
		e.Kind, e.Detail = ErrGatedRepo, join(msg, hintGated)
	case code == "RepoNotFound":
		e.Kind, e.Detail = ErrRepoNotFound, join(msg, "check the id; if the repository is private or gated, "+hintAuth)
	case code == "RevisionNotFound":
		e.Kind, e.Detail = ErrRevisionNotFound, msg
	case code == "EntryNotFound":
		e.Kind, e.Detail = ErrEntryNotFound, msg
	case resp.StatusCode == http.StatusUnauthorized:
		e.Kind, e.Detail = ErrUnauthorized, join(msg, "the repository may be private or gated, or the token invalid; "+hintAuth)
	case resp.StatusCode == http.StatusForbidden:
		e.Kind, e.Detail = ErrForbidden, join(msg, "the token lacks a permission for this repository")
	default:
		e.Kind, e.Detail = ErrHTTP, msg
		if resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode == http.StatusServiceUnavailable {
			e.retryAfter = parseRetryAfter(resp.Header.Get("Retry-After"), time.Now())
		}
	}
	return e
}

// downloadStatusError is statusError for a download (GET) answer. A 401,
// 403 or 410 from a host other than the endpoint is no verdict on the
// token, which never goes there: it is the storage host refusing a signed
// URL, usually because it expired (Xet's and S3's last an hour or so), and
// is marked so that the caller asks the Hub for a fresh one. Only the
// endpoint's own 401/403 are ErrUnauthorized/ErrForbidden.
func (c *Client) downloadStatusError(resp *response, repo, rev, file string) *Error {
	switch resp.StatusCode {
	case http.StatusUnauthorized, http.StatusForbidden, http.StatusGone:
		if !c.sameOrigin(resp.URL) {
			return &Error{Kind: ErrHTTP, Repo: repo, Revision: rev, File: file, Status: resp.StatusCode, refused: true,
				Detail: fmt.Sprintf("the storage host %s refused the download URL (a signed URL that expired?)", resp.URL.Host)}
		}
	}
	return statusError(resp.Response, repo, rev, file)
}

func join(a, b string) string {
	if a == "" {
		return b
	}
	if b == "" {
		return a
	}
	return a + "; " + b
}

// parseRetryAfter reads delay-seconds or an HTTP date, capped at 5 minutes.
func parseRetryAfter(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	var d time.Duration
	if s, err := strconv.Atoi(v); err == nil {
		d = time.Duration(s) * time.Second
	} else if t, err := http.ParseTime(v); err == nil {
		d = t.Sub(now)
	}
	if d < 0 {
		return 0
	}
	return min(d, maxRetryAfter)
}

// ResolveURL is the /resolve/ URL of a file, escaped as huggingface_hub's
// hf_hub_url does: the revision fully ("refs/pr/1" -> "refs%2Fpr%2F1"),
// the file name segment by segment.
func (c *Client) ResolveURL(repo, rev, file string) string {
	segs := strings.Split(file, "/")
	for i, s := range segs {
		segs[i] = url.PathEscape(s)
	}
	return c.endpoint() + "/" + repo + "/resolve/" + url.PathEscape(rev) + "/" + strings.Join(segs, "/")
}
