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

	// Repo is the ORG/NAME argument, Revision its "@rev" (rm only).
	Repo     string
	Revision string
	Yes      bool
	JSON     bool
}

// NewCmdCache builds `tputool cache` with its ls and rm subcommands.
func NewCmdCache(f *Factory, runF func(context.Context, string, *CacheOptions) error) *cobra.Command {
	c := &cobra.Command{
		Use:   "cache",
		Short: "List or remove models in the Hugging Face cache",
		Long: `List or remove models in the Hugging Face cache (--cache-dir, HF_HUB_CACHE,
HF_HOME/hub or ~/.cache/huggingface/hub), the cache transformers and diffusers
share. Only model repositories are shown; datasets and spaces are left alone.`,
		Args: cobra.NoArgs,
	}
	newOpts := func() *CacheOptions {
		return &CacheOptions{
			IO:    f.IOStreams,
			Now:   f.Now,
			Cache: func() hub.Cache { return hub.Cache{Dir: f.cacheDir(hub.EnvFrom(f.LookupEnv))} },
			Warn:  func(format string, args ...any) { f.Reporter().Warnf(format, args...) },
		}
	}
	run := func(c *cobra.Command, name string, opts *CacheOptions) error {
		opts.JSON = f.Global.JSON
		if runF != nil {
			return runF(c.Context(), name, opts)
		}
		if name == "ls" {
			return cacheLsRun(c.Context(), opts)
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

	c.AddCommand(ls, rm)
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
			return &hub.Error{Kind: hub.ErrNotCached, Repo: opts.Repo, Detail: "not in " + cache.Dir}
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
		return &hub.Error{Kind: hub.ErrNotCached, Repo: opts.Repo, Detail: "nothing to remove in " + cache.Dir}
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

// statFollow returns the size of dir/rel, following the snapshot symlink.
func statFollow(dir, rel string) (int64, error) {
	st, err := os.Stat(filepath.Join(dir, filepath.FromSlash(rel)))
	if err != nil {
		return 0, err
	}
	return st.Size(), nil
}
