package cmd

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/tputool/tputool/internal/errs"
	"github.com/tputool/tputool/internal/ui"
	"github.com/tputool/tputool/loader"
	"github.com/tputool/tputool/loader/hub"
)

// DownloadOptions holds `tputool download`'s inputs.
type DownloadOptions struct {
	IO        *ui.IOStreams
	HubClient func() *hub.Client

	Model    string
	Revision string
	Variant  string
	Include  []string
	Exclude  []string
	Retries  int
	Parallel int
	JSON     bool
}

// DownloadResult is the --json document.
type DownloadResult struct {
	Model    string   `json:"model"`
	RepoID   string   `json:"repo_id"`
	Revision string   `json:"revision"`
	Commit   string   `json:"commit"`
	Dir      string   `json:"dir"`
	Kind     string   `json:"kind,omitempty"`
	Files    []string `json:"files"`
	// Bytes is the size of the files in the snapshot.
	Bytes     int64 `json:"bytes"`
	FromCache bool  `json:"from_cache"`
}

// NewCmdDownload builds `tputool download`.
func NewCmdDownload(f *Factory, runF func(context.Context, *DownloadOptions) error) *cobra.Command {
	opts := &DownloadOptions{IO: f.IOStreams}
	c := &cobra.Command{
		Use:   "download --model ORG/NAME[@REVISION]",
		Short: "Download a model into the Hugging Face cache",
		Long: `Download what tputool needs to run a Hub model into the Hugging Face cache
(the same cache transformers and diffusers use): config files, tokenizer files
and the safetensors weights, or for a diffusers pipeline model_index.json and
each component's configs and weights. Pickle (.bin) weights are never
downloaded. Afterwards the model runs with --offline.

With --include/--exclude, the files matching the patterns are downloaded
instead (fnmatch patterns as huggingface-cli uses them: "*" also matches "/",
a trailing "/" selects a folder).

Downloads resume after interruptions, are verified against their sha256 (git
sha1 for small files) before entering the cache, and run in parallel. The
snapshot directory is printed on stdout.`,
		Example: `  tputool download --model Qwen/Qwen3-0.6B
  tputool download --model stabilityai/sd-turbo --variant fp16
  tputool download --model Qwen/Qwen3-0.6B --include "*.json"
  tputool download --model Qwen/Qwen3-0.6B@refs/pr/12 --json`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, args []string) error {
			if opts.Model == "" {
				return errs.Usagef("--model is required (a Hub id ORG/NAME[@revision])")
			}
			if err := checkRetries(opts.Retries); err != nil {
				return err
			}
			if opts.Parallel < 1 {
				return errs.Usagef("--parallel %d: must be at least 1", opts.Parallel)
			}
			if opts.Variant != "" && (len(opts.Include) > 0 || len(opts.Exclude) > 0) {
				return errs.Usagef("--variant cannot be combined with --include/--exclude")
			}
			opts.JSON = f.Global.JSON
			opts.HubClient = func() *hub.Client {
				hc := f.HubClient()
				hc.Retries, hc.Parallel = opts.Retries, opts.Parallel
				return hc
			}
			if runF != nil {
				return runF(c.Context(), opts)
			}
			return downloadRun(c.Context(), opts)
		},
	}
	fl := c.Flags()
	fl.StringVarP(&opts.Model, "model", "m", "", "Hub id ORG/NAME[@revision]")
	fl.StringVar(&opts.Revision, "revision", "", "branch, tag or commit (default main)")
	fl.StringVar(&opts.Variant, "variant", "", "weight variant, e.g. fp16 for *.fp16.safetensors (diffusers)")
	fl.StringArrayVar(&opts.Include, "include", nil, "download only files matching this pattern (repeatable)")
	fl.StringArrayVar(&opts.Exclude, "exclude", nil, "skip files matching this pattern (repeatable)")
	addRetriesFlag(c, &opts.Retries)
	fl.IntVar(&opts.Parallel, "parallel", hub.DefaultParallel, "files downloaded at once")
	return c
}

func downloadRun(ctx context.Context, opts *DownloadOptions) error {
	ref, err := loader.ParseRef(opts.Model)
	if err != nil {
		return err
	}
	if ref.Local {
		return errs.Usagef("--model %s is a local directory; download takes a Hub id (ORG/NAME[@revision])", opts.Model)
	}
	if err := checkRevisions(ref, opts.Revision); err != nil {
		return err
	}
	c := opts.HubClient()
	res := DownloadResult{Model: ref.String(), RepoID: ref.RepoID}
	if len(opts.Include) > 0 || len(opts.Exclude) > 0 {
		rev := ref.Revision
		if opts.Revision != "" {
			rev = opts.Revision
		}
		s, err := c.Snapshot(ctx, ref.RepoID, hub.SnapshotOptions{Revision: rev, Allow: opts.Include, Ignore: opts.Exclude})
		if err != nil {
			return err
		}
		res.Revision, res.Commit, res.Dir, res.Files, res.FromCache = s.Revision, s.Commit, s.Dir, s.Files, s.FromCache
	} else {
		m, err := loader.ResolveRef(ctx, ref, loader.Options{Client: c, Revision: opts.Revision, Variant: opts.Variant})
		if err != nil {
			return err
		}
		res.Revision, res.Commit, res.Dir, res.Kind, res.FromCache = m.Revision, m.Commit, m.Dir, string(m.Kind), m.FromCache
		res.Files, err = hub.ListDir(m.Dir)
		if err != nil {
			return err
		}
	}
	if res.FromCache && c.Logger != nil {
		c.Logger.Warn(fmt.Sprintf("%s: the Hub was not reached; the cached snapshot %s was used as it is", res.Model, res.Commit))
	}
	for _, f := range res.Files {
		if st, err := statFollow(res.Dir, f); err == nil {
			res.Bytes += st
		}
	}
	if opts.JSON {
		return opts.IO.WriteJSON(res)
	}
	_, err = fmt.Fprintln(opts.IO.Out, res.Dir)
	return err
}
