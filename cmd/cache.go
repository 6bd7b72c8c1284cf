package cmd

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/tputool/tputool/internal/errs"
	"github.com/tputool/tputool/internal/humanize"
	"github.com/tputool/tputool/internal/ui"
	"github.com/tputool/tputool/loader/hub"
)

// CacheOptions holds the inputs of `tputool cache ls` and `cache rm`.
type CacheOptions struct {
	IO *ui.IOStreams
	// Cache is the Hugging Face cache (--cache-dir, HF_HUB_CACHE, ...).
	Cache func() hub.Cache
	// Warn reports problems with single cache entries.
	Warn func(format string, args ...any)
	Now  func() time.Time
	// Progress starts a byte task on stderr (verify's hashing).
	Progress func(name string, total int64) *ui.Task
	// HubClient is for verify --remote, the only network use here.
	HubClient func() *hub.Client

	// Repo is the ORG/NAME argument, Revision its "@rev" (rm, verify).
	Repo     string
	Revision string
	Yes      bool
	JSON     bool
	// Remote: verify against the Hub's listing (verify --remote).
	Remote bool
}

// NewCmdCache builds `tputool cache` with its ls, rm and verify
// subcommands.
func NewCmdCache(f *Factory, runF func(context.Context, string, *CacheOptions) error) *cobra.Command {
	c := &cobra.Command{
		Use:   "cache",
		Short: "List, verify or remove models in the Hugging Face cache",
		Long: `List, verify or remove models in the Hugging Face cache (--cache-dir,
HF_HUB_CACHE, HF_HOME/hub or ~/.cache/huggingface/hub), the cache transformers
and diffusers share. Only model repositories are shown; datasets and spaces are
left alone. These commands never use the network (except verify --remote);
naming a model that is not in the cache exits 1.`,
		Args: cobra.NoArgs,
	}
	newOpts := func() *CacheOptions {
		return &CacheOptions{
			IO:    f.IOStreams,
			Now:   f.Now,
			Cache: func() hub.Cache { return hub.Cache{Dir: f.cacheDir(hub.EnvFrom(f.LookupEnv))} },
			Warn:  func(format string, args ...any) { f.Reporter().Warnf(format, args...) },
			Progress: func(name string, total int64) *ui.Task {
				return f.Reporter().Start(name, total, ui.UnitBytes)
			},
			HubClient: f.HubClient,
		}
	}
	run := func(c *cobra.Command, name string, opts *CacheOptions) error {
		opts.JSON = f.Global.JSON
		if runF != nil {
			return runF(c.Context(), name, opts)
		}
		switch name {
		case "ls":
			return cacheLsRun(c.Context(), opts)
		case "verify":
			return cacheVerifyRun(c.Context(), opts)
		}
		return cacheRmRun(c.Context(), opts)
	}

	lsOpts := newOpts()
	ls := &cobra.Command{
		Use:   "ls [ORG/NAME]",
		Short: "List cached models with their sizes and revisions",
		Example: `  tputool cache ls
  tputool cache ls Qwen/Qwen3-0.6B
  tputool cache ls --json`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			if len(args) == 1 {
				if err := hub.ValidateRepoID(args[0]); err != nil {
					return errs.Usagef("%v", err)
				}
				lsOpts.Repo = args[0]
			}
			return run(c, "ls", lsOpts)
		},
	}

	rmOpts := newOpts()
	rm := &cobra.Command{
		Use:   "rm ORG/NAME[@REVISION]",
		Short: "Remove a cached model, or one revision of it",
		Long: `Remove a cached model, or with @REVISION (a commit, a commit prefix of at
least 7 characters, or a branch/tag name) one snapshot: its refs, its .no_exist
markers and the files no other cached revision shares. Removing the last
revision removes the model. Without --yes, rm asks on a terminal and refuses
otherwise.`,
		Example: `  tputool cache rm Qwen/Qwen3-0.6B
  tputool cache rm Qwen/Qwen3-0.6B@c1899de --yes`,
		Args: cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			id, rev, hasRev := strings.Cut(args[0], "@")
			if err := hub.ValidateRepoID(id); err != nil {
				return errs.Usagef("%v", err)
			}
			if hasRev && rev == "" {
				return errs.Usagef("%s: empty revision after @", args[0])
			}
			rmOpts.Repo, rmOpts.Revision = id, rev
			if !rmOpts.Yes && !(f.IOStreams.IsStdinTTY() && f.IOStreams.IsStderrTTY()) {
				return errs.Usagef("cache rm %s: pass --yes to remove without a terminal to confirm on", args[0])
			}
			return run(c, "rm", rmOpts)
		},
	}
	rm.Flags().BoolVarP(&rmOpts.Yes, "yes", "y", false, "remove without asking")

	verifyOpts := newOpts()
	verify := &cobra.Command{
		Use:   "verify [ORG/NAME[@REVISION]]",
		Short: "Rehash cached files and compare them with their ETags",
		Long: `Rehash every file of the cached snapshots of a model (or of every cached
model) and compare it with the ETag its blob is named by, as "hf cache verify"
compares with the Hub's: the sha256 of LFS files (weights), the git blob sha1
of the others. With @REVISION (a commit, a commit prefix of at least 7
characters, or a branch/tag name) only that snapshot is checked. No network,
unless --remote: then each file is checked against the ETag the Hub lists for
its commit (one listing request per snapshot), which also catches a blob
renamed to match corrupt content, and files the commit does not have fail;
files listed but never downloaded are counted, not failed.

Each file is ok, mismatch (corrupt or truncated content, or a link out of the
cache), missing (the blob is gone) or unverified (a copy or an ETag that is no
hash: nothing to compare with). Only mismatches and problems are listed; --json
gives every file. A mismatch or a missing file exits 1: delete the blob named
and run "tputool download" again, or "tputool cache rm" the model.`,
		Example: `  tputool cache verify Qwen/Qwen3-0.6B
  tputool cache verify Qwen/Qwen3-0.6B@main --json
  tputool cache verify Qwen/Qwen3-0.6B --remote
  tputool cache verify`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			if len(args) == 1 {
				id, rev, hasRev := strings.Cut(args[0], "@")
				if err := hub.ValidateRepoID(id); err != nil {
					return errs.Usagef("%v", err)
				}
				if hasRev && rev == "" {
					return errs.Usagef("%s: empty revision after @", args[0])
				}
				verifyOpts.Repo, verifyOpts.Revision = id, rev
			}
			if verifyOpts.Remote && f.Global.Offline {
				return errs.Usagef("cache verify: --remote asks the Hub and cannot be combined with --offline")
			}
			return run(c, "verify", verifyOpts)
		},
	}
	verify.Flags().BoolVar(&verifyOpts.Remote, "remote", false, "check against the ETags the Hub lists (network), not the blob names")

	c.AddCommand(ls, rm, verify)
	return c
}

// CacheListing is the --json document of `cache ls`.
type CacheListing struct {
	Dir   string           `json:"dir"`
	Repos []hub.CachedRepo `json:"repos"`
	// SizeOnDisk sums the repositories.
	SizeOnDisk int64 `json:"size_on_disk"`
}

func cacheLsRun(_ context.Context, opts *CacheOptions) error {
	cache := opts.Cache()
	var (
		repos    []hub.CachedRepo
		warnings []string
		err      error
	)
	if opts.Repo != "" {
		r, w, ok := cache.ScanRepo(opts.Repo)
		if !ok {
			return fmt.Errorf("cache ls %s: %w %s", opts.Repo, hub.ErrAbsent, cache.Dir)
		}
		repos, warnings = []hub.CachedRepo{r}, w
	} else if repos, warnings, err = cache.Scan(); err != nil {
		return err
	}
	for _, w := range warnings {
		opts.Warn("%s", w)
	}
	res := CacheListing{Dir: cache.Dir, Repos: repos}
	if res.Repos == nil {
		res.Repos = []hub.CachedRepo{}
	}
	for _, r := range repos {
		res.SizeOnDisk += r.SizeOnDisk
	}
	if opts.JSON {
		return opts.IO.WriteJSON(res)
	}
	out := opts.IO.Out
	if opts.Repo != "" {
		r := repos[0]
		fmt.Fprintf(out, "%s: %s in %d file(s), %s\n", r.ID, humanize.Bytes(r.SizeOnDisk), r.Blobs, r.Dir)
		if r.IncompleteFiles > 0 {
			fmt.Fprintf(out, "%s of partial downloads in %d file(s) (%s): a download resumes them, `tputool cache rm %s` removes them\n",
				humanize.Bytes(r.IncompleteBytes), r.IncompleteFiles, filepath.Join(r.Dir, "blobs", "*.incomplete"), r.ID)
		}
		tbl := opts.IO.NewTable("REVISION", "REFS", "FILES", "SIZE", "MODIFIED")
		for _, rv := range r.Revisions {
			tbl.Append(rv.Commit, strings.Join(rv.Refs, ", "), fmt.Sprint(rv.Files), humanize.Bytes(rv.Size), age(opts, rv.LastModified))
		}
		return tbl.Render()
	}
	if len(repos) == 0 {
		fmt.Fprintf(out, "No models in %s\n", cache.Dir)
		return nil
	}
	tbl := opts.IO.NewTable("MODEL", "SIZE", "REVISIONS", "REFS", "MODIFIED")
	for _, r := range repos {
		var refs []string
		for _, rv := range r.Revisions {
			refs = append(refs, rv.Refs...)
		}
		tbl.Append(r.ID, humanize.Bytes(r.SizeOnDisk), fmt.Sprint(len(r.Revisions)), strings.Join(refs, ", "), age(opts, r.LastModified))
	}
	if err := tbl.Render(); err != nil {
		return err
	}
	if opts.IO.IsStdoutTTY() {
		fmt.Fprintf(out, "%d model(s), %s in %s\n", len(repos), humanize.Bytes(res.SizeOnDisk), cache.Dir)
	}
	return nil
}

// age is a relative time on a terminal, an RFC 3339 date otherwise (as
// cli/cli drops relative times for scripts).
func age(opts *CacheOptions, t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	if !opts.IO.IsStdoutTTY() {
		return t.UTC().Format(time.RFC3339)
	}
	d := opts.Now().Sub(t)
	switch {
	case d < time.Minute:
		return "just now"
	case d < time.Hour:
		return fmt.Sprintf("%d minutes ago", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%d hours ago", int(d.Hours()))
	}
	return fmt.Sprintf("%d days ago", int(d.Hours()/24))
}

// CacheRemoval is the --json document of `cache rm`.
type CacheRemoval struct {
	Repo     string `json:"repo"`
	Revision string `json:"revision,omitempty"`
	Freed    int64  `json:"freed_bytes"`
}

func cacheRmRun(_ context.Context, opts *CacheOptions) error {
	cache := opts.Cache()
	r, _, ok := cache.ScanRepo(opts.Repo)
	if !ok {
		return fmt.Errorf("cache rm %s: %w %s; nothing removed", opts.Repo, hub.ErrAbsent, cache.Dir)
	}
	what := fmt.Sprintf("%s (%s, %d revision(s))", opts.Repo, humanize.Bytes(r.SizeOnDisk), len(r.Revisions))
	if opts.Revision != "" {
		what = opts.Repo + "@" + opts.Revision
	}
	if !opts.Yes {
		fmt.Fprintf(opts.IO.ErrOut, "Remove %s from %s? [y/N] ", what, cache.Dir)
		answer, _ := bufio.NewReader(opts.IO.In).ReadString('\n')
		if a := strings.ToLower(strings.TrimSpace(answer)); a != "y" && a != "yes" {
			return fmt.Errorf("cache rm %s: not confirmed; nothing removed", what)
		}
	}
	var freed int64
	var err error
	if opts.Revision != "" {
		freed, err = cache.DeleteRevision(opts.Repo, opts.Revision)
	} else {
		freed, err = cache.DeleteRepo(opts.Repo)
	}
	if err != nil {
		return err
	}
	if opts.JSON {
		return opts.IO.WriteJSON(CacheRemoval{Repo: opts.Repo, Revision: opts.Revision, Freed: freed})
	}
	_, err = fmt.Fprintf(opts.IO.Out, "Removed %s, freed %s\n", what, humanize.Bytes(freed))
	return err
}

// CacheVerification is the --json document of `cache verify`.
type CacheVerification struct {
	Dir   string              `json:"dir"`
	Repos []*hub.Verification `json:"repos"`
	// The totals over Repos (NotDownloaded, the files the Hub lists that
	// the snapshots lack under --remote, is no failure).
	hub.VerifyCounts
}

func cacheVerifyRun(ctx context.Context, opts *CacheOptions) error {
	cache := opts.Cache()
	ids := []string{opts.Repo}
	if opts.Repo == "" {
		repos, warnings, err := cache.Scan()
		if err != nil {
			return err
		}
		for _, w := range warnings {
			opts.Warn("%s", w)
		}
		ids = ids[:0]
		for _, r := range repos {
			ids = append(ids, r.ID)
		}
	}
	res := CacheVerification{Dir: cache.Dir, Repos: []*hub.Verification{}}
	var hc *hub.Client
	if opts.Remote {
		hc = opts.HubClient()
	}
	for _, id := range ids {
		var task *ui.Task
		vo := hub.VerifyOptions{Revision: opts.Revision}
		if hc != nil {
			vo.Remote = func(ctx context.Context, commit string) (map[string]string, error) {
				return hc.RemoteETags(ctx, id, commit)
			}
		}
		if opts.Progress != nil {
			vo.Progress = func(done, total int64) {
				if task == nil {
					task = opts.Progress("Verifying "+id, total)
				}
				task.Set(done)
			}
		}
		v, err := cache.Verify(ctx, id, vo)
		if task != nil {
			task.Done()
		}
		if err != nil {
			return err
		}
		res.Repos = append(res.Repos, v)
		res.Add(v.VerifyCounts)
	}
	if opts.JSON {
		if err := opts.IO.WriteJSON(res); err != nil {
			return err
		}
	} else if err := printVerification(opts, res); err != nil {
		return err
	}
	if bad := res.Mismatches + res.Missing; bad > 0 {
		var names []string
		for _, v := range res.Repos {
			if v.Failed() {
				names = append(names, v.Repo)
			}
		}
		fix := "delete the blobs listed and run `tputool download --model " + names[0] + "` to fetch them again, or `tputool cache rm " + names[0] + "`"
		return fmt.Errorf("cache verify: %d of %d file(s) failed (%d mismatch, %d missing) in %s; %s",
			bad, res.Checked, res.Mismatches, res.Missing, strings.Join(names, ", "), fix)
	}
	return nil
}

func printVerification(opts *CacheOptions, res CacheVerification) error {
	out := opts.IO.Out
	if len(res.Repos) == 0 {
		_, err := fmt.Fprintf(out, "No models in %s\n", res.Dir)
		return err
	}
	for _, v := range res.Repos {
		for _, rv := range v.Revisions {
			name := v.Repo + "@" + rv.Commit
			if len(rv.Refs) > 0 {
				name += " (" + strings.Join(rv.Refs, ", ") + ")"
			}
			var ok, bad int
			for _, f := range rv.Files {
				switch f.Status {
				case hub.VerifyOK:
					ok++
				case hub.VerifyMismatch, hub.VerifyMissing:
					bad++
				}
			}
			if bad == 0 {
				fmt.Fprintf(out, "%s: %d file(s) ok", name, ok)
			} else {
				fmt.Fprintf(out, "%s: %d of %d file(s) failed", name, bad, len(rv.Files))
			}
			if n := len(rv.Files) - ok - bad; n > 0 {
				fmt.Fprintf(out, ", %d unverified", n)
			}
			if n := len(rv.NotDownloaded); n > 0 {
				fmt.Fprintf(out, ", %d listed by the Hub but not downloaded", n)
			}
			fmt.Fprintln(out)
			for _, f := range rv.Files {
				if f.Status == hub.VerifyOK {
					continue
				}
				line := fmt.Sprintf("  %-10s %s", f.Status, f.File)
				if f.Detail != "" {
					line += ": " + f.Detail
				}
				if f.Blob != "" && f.Status == hub.VerifyMismatch {
					line += " (" + f.Blob + ")"
				}
				fmt.Fprintln(out, line)
			}
		}
	}
	if opts.IO.IsStdoutTTY() {
		fmt.Fprintf(out, "%d file(s) checked, %s hashed: %d ok, %d mismatch, %d missing, %d unverified\n",
			res.Checked, humanize.Bytes(res.Bytes), res.OK, res.Mismatches, res.Missing, res.Unverified)
	}
	return nil
}

// statFollow returns the size of dir/rel, following the snapshot symlink.
func statFollow(dir, rel string) (int64, error) {
	st, err := os.Stat(filepath.Join(dir, filepath.FromSlash(rel)))
	if err != nil {
		return 0, err
	}
	return st.Size(), nil
}
