package cmd

import (
	"sync"

	"github.com/tputool/tputool/internal/humanize"
	"github.com/tputool/tputool/internal/ui"
	"github.com/tputool/tputool/loader/hub"
)

// HubClient returns a Hugging Face Hub client configured from the
// environment (HF_ENDPOINT, HF_HUB_CACHE/HF_HOME, HF_TOKEN or the token
// file, HF_HUB_OFFLINE, HF_HUB_ETAG_TIMEOUT, HF_HUB_DOWNLOAD_TIMEOUT) and the
// global flags, which win: --cache-dir, --offline, --token. Warnings and
// debug lines go to the reporter; download progress shows as one byte bar
// per download batch (a bar on a TTY, throttled lines otherwise, NDJSON
// under --json, nothing under --quiet). It must be called inside RunE.
//
// Commands hand it to resolveCheckpoint (lazily, through retryingHubClient),
// which passes it to loader.ResolveRef for Hub ids.
func (f *Factory) HubClient() *hub.Client {
	env := hub.EnvFrom(f.LookupEnv)
	c := hub.New(env)
	g := f.Global
	c.Cache.Dir = f.cacheDir(env)
	if g.Offline {
		c.Offline = true
	}
	src := env.TokenSource
	if g.Token != "" {
		c.Token, src = hub.Token(g.Token), "--token"
	}
	r := f.Reporter()
	c.Logger = reporterLogger{r}
	c.Progress = newHubProgress(r).report
	if c.Token.IsSet() {
		r.Debugf("hub: %s, cache %s, token from %s", hub.RedactURL(c.Endpoint), c.Cache.Dir, src)
	} else {
		r.Debugf("hub: %s, cache %s, no token", hub.RedactURL(c.Endpoint), c.Cache.Dir)
	}
	return c
}

// cacheDir is --cache-dir, else the cache the environment names.
func (f *Factory) cacheDir(env hub.Env) string {
	if f.Global.CacheDir != "" {
		return hub.ExpandUser(f.Global.CacheDir)
	}
	return env.CacheDir
}

// reporterLogger sends the hub client's warnings and debug lines to stderr.
type reporterLogger struct{ r *ui.Reporter }

func (l reporterLogger) Warn(msg string)  { l.r.Warnf("%s", msg) }
func (l reporterLogger) Debug(msg string) { l.r.Debugf("%s", msg) }

// hubProgress turns per-file download events into one byte task per batch,
// started only once a byte actually has to be downloaded, so a cached model
// shows nothing.
type hubProgress struct {
	r     *ui.Reporter
	mu    sync.Mutex
	task  *ui.Task
	repo  string
	total int64
	files map[string]int64 // bytes on disk per file of the batch
	sum   int64
}

func newHubProgress(r *ui.Reporter) *hubProgress { return &hubProgress{r: r} }

func (p *hubProgress) report(ev hub.Progress) {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch ev.Event {
	case hub.BatchStart:
		p.repo, p.total, p.files, p.sum, p.task = ev.Repo, ev.Total, map[string]int64{}, 0, nil
	case hub.FileCached, hub.FileStart, hub.FileAdvance, hub.FileDone:
		if p.files == nil { // a lone Download outside a batch
			p.files, p.repo = map[string]int64{}, ev.Repo
		}
		p.sum += ev.Bytes - p.files[ev.File]
		p.files[ev.File] = ev.Bytes
		if ev.Event == hub.FileStart && p.task == nil {
			total := p.total
			if total < p.sum {
				total = 0 // the listing had no sizes: unknown total
			}
			p.task = p.r.Start("Downloading "+p.repo, total, ui.UnitBytes)
		}
		if p.task != nil {
			p.task.Set(p.sum)
		}
		if ev.Event == hub.FileDone {
			p.r.Debugf("downloaded %s (%s)", ev.File, humanize.Bytes(ev.Total))
		}
	case hub.BatchDone:
		if p.task != nil {
			p.task.Done()
		}
		p.task, p.files = nil, nil
	}
}
