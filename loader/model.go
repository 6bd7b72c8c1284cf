// Package loader turns a --model reference into a local directory that
// holds what a command needs, downloading from the Hugging Face Hub when
// the reference is a Hub id. Every command (generate, diffuse, bench,
// inspect, download) resolves models through ParseRef and ResolveRef, so caching, offline mode,
// revisions and errors behave the same everywhere.
package loader

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/tputool/tputool/internal/errs"
	"github.com/tputool/tputool/loader/config"
	"github.com/tputool/tputool/loader/hub"
	"github.com/tputool/tputool/loader/safetensors"
)

// ---------------------------------------------------------------- references

// Ref is a parsed --model value: a local directory or a Hub id.
type Ref struct {
	// Raw is the value as given.
	Raw string `json:"raw"`
	// Local is set for directories; Path is then absolute.
	Local bool   `json:"local"`
	Path  string `json:"path,omitempty"`
	// RepoID and Revision are set for Hub ids ("org/name@rev"); Revision
	// is "" when none was given.
	RepoID   string `json:"repo_id,omitempty"`
	Revision string `json:"revision,omitempty"`
}

// String renders the reference as the user would write it.
func (r Ref) String() string {
	if r.Local {
		return r.Path
	}
	if r.Revision != "" {
		return r.RepoID + "@" + r.Revision
	}
	return r.RepoID
}

// ParseRef parses a --model value. It is a local directory when it starts
// with "./", "../", "/" or "~/", or when a path of that name exists;
// otherwise a Hub id "ORG/NAME" with an optional "@revision" (a branch,
// tag or commit). Errors wrap errs.ErrUsage.
func ParseRef(s string) (Ref, error) {
	if strings.TrimSpace(s) == "" {
		return Ref{}, &errs.OptionError{Option: "Ref", Value: strconv.Quote(s), Reason: "empty: give a Hub id (ORG/NAME[@revision]) or a local directory"}
	}
	explicit := s == "." || s == ".." || s == "~" || strings.HasPrefix(s, "./") || strings.HasPrefix(s, "../") ||
		strings.HasPrefix(s, "/") || strings.HasPrefix(s, "~/") || filepath.IsAbs(s)
	p := hub.ExpandUser(s)
	st, statErr := os.Stat(p)
	if explicit || statErr == nil {
		if statErr != nil {
			return Ref{}, refError(s, "no such directory", nil)
		}
		if !st.IsDir() {
			return Ref{}, refError(s, "not a directory (give the folder that holds config.json or model_index.json)", nil)
		}
		abs, err := filepath.Abs(p)
		if err != nil {
			return Ref{}, refError(s, "", err)
		}
		return Ref{Raw: s, Local: true, Path: abs}, nil
	}
	id, rev, hasRev := strings.Cut(s, "@")
	if err := hub.ValidateRepoID(id); err != nil {
		return Ref{}, refError(s, "not an existing directory nor a Hub id", err)
	}
	if hasRev {
		if err := hub.CheckRevision(rev); err != nil {
			return Ref{}, refError(s, "", err)
		}
	}
	return Ref{Raw: s, RepoID: id, Revision: rev}, nil
}

// CheckLinks refuses a model folder holding symbolic links that lead out
// of it: a checkpoint must not make tputool read (and print parts of, in
// error messages) files elsewhere on the machine. The one layout allowed
// to point outside is a Hugging Face cache snapshot,
// models--ORG--NAME/snapshots/<commit>/, whose files are relative links
// into ../../blobs/ of the same repository folder. Links inside the
// folder are fine; dangling links are ignored (nothing reads them), as are
// hidden folders (.git, .cache), which ListDir skips too.
func CheckLinks(dir string) error {
	root, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return err
	}
	allowed := []string{root}
	if snaps := filepath.Dir(root); filepath.Base(snaps) == "snapshots" &&
		strings.HasPrefix(filepath.Base(filepath.Dir(snaps)), "models--") {
		if blobs, err := filepath.EvalSymlinks(filepath.Join(filepath.Dir(snaps), "blobs")); err == nil {
			allowed = append(allowed, blobs)
		}
	}
	link, _, err := hub.LinkOutside(root, allowed, true)
	if err != nil || link == "" {
		return err
	}
	rel, _ := filepath.Rel(root, link)
	target, _ := os.Readlink(link)
	return fmt.Errorf("%s is a symbolic link to %s, outside the model folder; refusing to read it (copy the file into the folder instead)", filepath.ToSlash(rel), target)
}

// ---------------------------------------------------------------- models

// Kind is the library layout of a checkpoint.
type Kind string

const (
	// Transformers: config.json and model*.safetensors at the root.
	Transformers Kind = "transformers"
	// Diffusers: model_index.json and one folder per component.
	Diffusers Kind = "diffusers"
)

// Options controls Resolve.
type Options struct {
	// Client is the Hub client; required for Hub ids.
	Client *hub.Client
	// Revision overrides the "@rev" of the reference (--revision).
	Revision string
	// MetadataOnly downloads only configs and weight indexes: no
	// tokenizer files, no weights (inspect reads headers remotely).
	MetadataOnly bool
	// Variant selects weight files such as *.fp16.safetensors; a component
	// without that variant uses its plain files.
	Variant string
	// Include adds fnmatch patterns of extra files to download.
	Include []string
}

// Checkpoint is a resolved model reference: the folder that holds a
// model's files (config, weights, tokenizer) and where they came from. It
// is the first of the --model route's three stages: a Checkpoint, its
// Model (pipeline/lm: the architecture loaded from it), the Runner
// (compile: the Model compiled for a backend).
type Checkpoint struct {
	Ref Ref `json:"ref"`
	// Dir is the local directory: the given folder, or the cache snapshot.
	Dir  string `json:"dir"`
	Kind Kind   `json:"kind"`
	// RepoID, Revision and Commit describe a Hub model ("" for local ones).
	RepoID   string `json:"repo_id,omitempty"`
	Revision string `json:"revision,omitempty"`
	Commit   string `json:"commit,omitempty"`
	// Files lists every file of the model (slash paths relative to Dir):
	// the Hub's listing, or what is on disk for local and cached models.
	// Weight files in it need not be downloaded (see MetadataOnly).
	Files []string `json:"files"`
	// FromCache is set when the Hub was not asked (offline, a cached
	// commit) or could not be reached.
	FromCache bool `json:"from_cache"`
	// Variant is the weight variant asked for.
	Variant string `json:"variant,omitempty"`

	// Config is config.json of a transformers model.
	Config *config.File `json:"-"`
	// Index is model_index.json of a diffusers pipeline.
	Index *config.ModelIndex `json:"-"`

	client  *hub.Client
	weights []Weights // AllWeights, memoised
}

// Local reports whether the model is a local directory (not from the Hub).
func (m *Checkpoint) Local() bool { return m.Ref.Local }

// Path returns the local path of a model file (rel uses "/").
func (m *Checkpoint) Path(rel string) string { return filepath.Join(m.Dir, filepath.FromSlash(rel)) }

// HasFile reports whether the model has the file (on disk or on the Hub).
func (m *Checkpoint) HasFile(rel string) bool {
	_, ok := slices.BinarySearch(m.Files, rel)
	return ok
}

// Name is what messages call the model: the Hub id or the directory.
func (m *Checkpoint) Name() string { return m.Ref.String() }

// ResolveRef turns a parsed --model value (ParseRef) into a Model. For a
// Hub id it resolves the revision (one listing request, none offline or for a cached commit) and
// downloads what is missing from the cache: config.json,
// generation_config.json, tokenizer files and the safetensors weights
// (index and shards) of a transformers model, or model_index.json and the
// components' configs, tokenizer files and weights of a diffusers
// pipeline. Checkpoints with only pickle weights fail with
// errs.ErrUnsupported.
func ResolveRef(ctx context.Context, r Ref, opts Options) (*Checkpoint, error) {
	if r.Local {
		if err := checkModelFolder(r); err != nil {
			return nil, err
		}
		files, err := hub.ListDir(r.Path)
		if err != nil {
			return nil, refError(r.Raw, "", err)
		}
		if err := CheckLinks(r.Path); err != nil {
			return nil, refError(r.Raw, "", err)
		}
		m := &Checkpoint{Ref: r, Dir: r.Path, Files: files, Variant: opts.Variant}
		if err := m.load(); err != nil {
			return nil, err
		}
		return m, nil
	}
	c := opts.Client
	if c == nil {
		return nil, errors.New("loader.Resolve: a Hub id needs Options.Client")
	}
	rev := r.Revision
	if opts.Revision != "" {
		if err := hub.CheckRevision(opts.Revision); err != nil {
			return nil, &errs.OptionError{Owner: "Options", Option: "Revision", Value: opts.Revision, Cause: err}
		}
		rev = opts.Revision
	}
	if rev == "" {
		rev = hub.DefaultRevision
	}
	// A cached commit needs no request when everything is on disk.
	if hub.IsCommitHash(rev) {
		if m, err := resolveCached(r, rev, c, opts); err == nil {
			return m, nil
		}
	}
	snap, err := c.ListFiles(ctx, r.RepoID, rev)
	if err != nil {
		return nil, err
	}
	m := &Checkpoint{Ref: r, Dir: snap.Dir, RepoID: r.RepoID, Revision: rev, Commit: snap.Commit,
		Files: snap.RepoFiles, FromCache: snap.FromCache, Variant: opts.Variant, client: c}
	if err := m.detectKind(); err != nil {
		return nil, err
	}
	// Stage 1: configs, tokenizer files, weight indexes.
	small := m.smallFiles(opts)
	if !snap.FromCache {
		if err := c.DownloadFiles(ctx, r.RepoID, snap.Commit, small); err != nil {
			return nil, err
		}
	}
	if err := m.load(); err != nil {
		return nil, err
	}
	if opts.MetadataOnly {
		return m, nil
	}
	// Stage 2: the weights the indexes name.
	weights, err := m.AllWeightFiles()
	if err != nil {
		return nil, err
	}
	if snap.FromCache {
		if missing := m.missing(weights); len(missing) > 0 {
			return nil, m.notCached(strings.Join(missing, ", "))
		}
		return m, nil
	}
	if err := c.DownloadFiles(ctx, r.RepoID, snap.Commit, weights); err != nil {
		return nil, err
	}
	return m, nil
}

// ErrNotModelFolder marks a local --model directory with neither
// config.json nor model_index.json (a usage error, exit 2).
var ErrNotModelFolder = errors.New("not a model folder: no config.json or model_index.json")

// checkModelFolder refuses a local directory that is not a model before
// anything walks it (a directory such as /etc would otherwise fail on
// whatever its tree holds).
func checkModelFolder(r Ref) error {
	st, err := os.Stat(r.Path)
	if err != nil || !st.IsDir() {
		return nil // ListDir reports it
	}
	for _, name := range []string{"config.json", "model_index.json"} {
		if _, err := os.Stat(filepath.Join(r.Path, name)); err == nil {
			return nil
		}
	}
	return refError(r.Raw, "", ErrNotModelFolder)
}

// refError is a usage error about the model reference s (the value of
// --model: cmd names the flag): reason, then cause's message (either may
// be empty or nil).
func refError(s, reason string, cause error) error {
	return &errs.OptionError{Option: "Ref", Value: s, Reason: reason, Cause: cause}
}

// resolveCached resolves a commit from the cache alone; it fails unless
// the snapshot has the configs and every weight file.
func resolveCached(r Ref, commit string, c *hub.Client, opts Options) (*Checkpoint, error) {
	dir := c.Cache.SnapshotDir(r.RepoID, commit)
	files, err := hub.ListDir(dir)
	if err != nil {
		return nil, err
	}
	if err := c.Cache.CheckSnapshotLinks(r.RepoID, commit); err != nil {
		return nil, err
	}
	m := &Checkpoint{Ref: r, Dir: dir, RepoID: r.RepoID, Revision: commit, Commit: commit, Files: files,
		FromCache: true, Variant: opts.Variant, client: c}
	if err := m.load(); err != nil {
		return nil, err
	}
	if opts.MetadataOnly {
		return m, nil
	}
	weights, err := m.AllWeightFiles()
	if err != nil {
		return nil, err
	}
	if missing := m.missing(weights); len(missing) > 0 {
		return nil, fmt.Errorf("snapshot %s lacks %v", commit, missing)
	}
	return m, nil
}

func (m *Checkpoint) missing(files []string) []string {
	var out []string
	for _, f := range files {
		if st, err := os.Stat(m.Path(f)); err != nil || !st.Mode().IsRegular() {
			out = append(out, f)
		}
	}
	return out
}

func (m *Checkpoint) detectKind() error {
	switch {
	case m.HasFile("model_index.json"):
		m.Kind = Diffusers
	case m.HasFile("config.json"):
		m.Kind = Transformers
	case m.FromCache && m.RepoID != "":
		// A cached snapshot without either file is incomplete, not an
		// unsupported checkpoint: the Hub listing was not consulted.
		return m.notCached("config.json (transformers) or model_index.json (diffusers)")
	default:
		return errs.Unsupportedf("%s: neither config.json (transformers) nor model_index.json (diffusers) found", m.Name())
	}
	return nil
}

// load detects the layout and parses config.json or model_index.json.
func (m *Checkpoint) load() error {
	if m.Kind == "" {
		if err := m.detectKind(); err != nil {
			return err
		}
	}
	switch m.Kind {
	case Diffusers:
		idx, err := config.ReadModelIndex(m.Path("model_index.json"))
		if err != nil {
			return notCachedOr(m, "model_index.json", err)
		}
		m.Index = idx
	case Transformers:
		cfg, err := config.ReadModel(m.Path("config.json"))
		if err != nil {
			return notCachedOr(m, "config.json", err)
		}
		m.Config = cfg
	}
	return nil
}

func notCachedOr(m *Checkpoint, file string, err error) error {
	if errors.Is(err, fs.ErrNotExist) && m.RepoID != "" {
		return m.notCached(file)
	}
	return err
}

// notCached explains that a cached snapshot lacks files.
func (m *Checkpoint) notCached(what string) error {
	why := ""
	if m.client != nil && m.client.Offline {
		why = "offline mode is on and "
	}
	return &hub.Error{Kind: hub.ErrNotCached, Repo: m.RepoID, Revision: m.Revision,
		Detail: fmt.Sprintf("%sthe cached snapshot lacks %s; download %s with network access first", why, what, m.Ref.Raw)}
}

// smallFile reports whether a file name is a config, tokenizer or index
// file worth fetching before the weights.
func smallFile(name string) bool {
	switch path.Ext(name) {
	case ".json", ".txt", ".model", ".jinja", ".tiktoken":
		return true
	}
	return false
}

// metadataFile reports whether a file is needed by MetadataOnly: configs
// and weight indexes.
func metadataFile(name string) bool {
	base := path.Base(name)
	return base == "config.json" || base == "generation_config.json" || base == "model_index.json" ||
		base == "scheduler_config.json" || strings.HasSuffix(base, ".safetensors.index.json")
}

// smallFiles picks the stage-1 files from the listing: root files for a
// transformers model, the root and component folders for diffusers.
func (m *Checkpoint) smallFiles(opts Options) []string {
	var folders map[string]bool
	if m.Kind == Diffusers {
		folders = map[string]bool{}
		// model_index.json is not parsed yet; take every first-level folder.
		for _, f := range m.Files {
			if dir, _, ok := strings.Cut(f, "/"); ok {
				folders[dir] = true
			}
		}
	}
	var out []string
	for _, f := range m.Files {
		dir, rest, nested := strings.Cut(f, "/")
		if nested && (folders == nil || !folders[dir] || strings.Contains(rest, "/")) && !(m.Kind == Transformers && poolingFile(f)) {
			continue
		}
		if opts.MetadataOnly && !metadataFile(f) {
			continue
		}
		if smallFile(f) {
			out = append(out, f)
		}
	}
	if len(opts.Include) > 0 {
		for _, f := range hub.FilterFiles(m.Files, opts.Include, nil) {
			if !slices.Contains(out, f) {
				out = append(out, f)
			}
		}
	}
	return out
}

// ---------------------------------------------------------------- weights

// Weights describes the safetensors files of one component.
type Weights struct {
	// Component is the folder ("" for a transformers model's root).
	Component string `json:"component"`
	// Index is the .safetensors.index.json, "" for a single file.
	Index string `json:"index,omitempty"`
	// Files are the .safetensors files, relative to the model root.
	Files []string `json:"files"`
	// TotalSize is the index's metadata.total_size (tensor bytes), -1
	// when there is no index or it does not say.
	TotalSize int64 `json:"total_size"`
}

// WeightFiles finds the safetensors files of a component ("" for the
// root): the variant's index or single file if present, else the plain
// ones. A folder with only pickle weights is an errs.ErrUnsupported error;
// a folder with no weights at all returns ok=false.
func (m *Checkpoint) WeightFiles(component string) (w Weights, ok bool, err error) {
	prefix := ""
	if component != "" {
		prefix = component + "/"
	}
	variants := []string{""}
	if m.Variant != "" {
		variants = []string{m.Variant, ""}
	}
	for _, v := range variants {
		for _, name := range safetensors.CandidateFiles(v) {
			name = prefix + name
			if !m.HasFile(name) {
				continue
			}
			if !strings.HasSuffix(name, ".index.json") {
				return Weights{Component: component, Files: []string{name}, TotalSize: -1}, true, nil
			}
			shards, total, err := m.indexShards(name)
			if err != nil {
				return Weights{}, false, err
			}
			return Weights{Component: component, Index: name, Files: shards, TotalSize: total}, true, nil
		}
	}
	for _, f := range m.Files {
		if strings.HasPrefix(f, prefix) && !strings.Contains(f[len(prefix):], "/") {
			if err := safetensors.RejectPickle(f); err != nil {
				return Weights{}, false, errs.Unsupportedf("%s: no safetensors weights%s: %v", m.Name(), inComponent(component), err)
			}
		}
	}
	return Weights{}, false, nil
}

func inComponent(c string) string {
	if c == "" {
		return ""
	}
	return " in " + c + "/"
}

func (m *Checkpoint) indexShards(idx string) ([]string, int64, error) {
	ix, err := safetensors.ReadIndex(m.Path(idx))
	if err != nil {
		return nil, 0, notCachedOr(m, idx, err)
	}
	total := int64(-1)
	if v, ok := ix.Metadata["total_size"].(float64); ok {
		total = int64(v)
	}
	dir := path.Dir(idx)
	var out []string
	for _, s := range ix.Shards() {
		if dir != "." {
			s = dir + "/" + s
		}
		if !m.HasFile(s) {
			if m.FromCache {
				return nil, 0, m.notCached(s)
			}
			return nil, 0, fmt.Errorf("%s: %s names shard %s, which the model does not have", m.Name(), idx, s)
		}
		out = append(out, s)
	}
	return out, total, nil
}

// Components lists the folders whose weights a model uses: "" for a
// transformers model, the model_index.json components for diffusers.
func (m *Checkpoint) Components() []string {
	if m.Kind != Diffusers || m.Index == nil {
		return []string{""}
	}
	var out []string
	for _, c := range m.Index.Components {
		out = append(out, c.Name)
	}
	return out
}

// AllWeights returns the weights of every component that has some. The
// result is computed once per Model.
func (m *Checkpoint) AllWeights() ([]Weights, error) {
	if m.weights != nil {
		return m.weights, nil
	}
	var out []Weights
	for _, comp := range m.Components() {
		w, ok, err := m.WeightFiles(comp)
		if err != nil {
			return nil, err
		}
		if ok {
			out = append(out, w)
		}
	}
	if m.Kind == Transformers && len(out) == 0 {
		if m.FromCache {
			return nil, m.notCached(strings.Join(safetensors.CandidateFiles(m.Variant), " or "))
		}
		return nil, errs.Unsupportedf("%s: no safetensors weights (looked for %s)", m.Name(), strings.Join(safetensors.CandidateFiles(m.Variant), ", "))
	}
	m.weights = out
	return out, nil
}

// AllWeightFiles lists every weight file of AllWeights.
func (m *Checkpoint) AllWeightFiles() ([]string, error) {
	ws, err := m.AllWeights()
	if err != nil {
		return nil, err
	}
	var out []string
	for _, w := range ws {
		out = append(out, w.Files...)
	}
	return out, nil
}

// ReadHeader reads a safetensors header: from disk when the file is there,
// else from the Hub with two Range requests (nothing else is downloaded).
// It returns the header and the file size.
func (m *Checkpoint) ReadHeader(ctx context.Context, rel string) (*safetensors.Header, int64, error) {
	p := m.Path(rel)
	if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() {
		return safetensors.ReadHeaderFile(p)
	}
	if m.client == nil || m.RepoID == "" {
		return nil, 0, fmt.Errorf("%s: %w", p, fs.ErrNotExist)
	}
	return safetensors.ReadHeaderRange(ctx, m.client.Remote(m.RepoID, m.Commit, rel), rel)
}

// OpenCheckpoint memory-maps the weights of a component ("" for the root).
// The weights must be on disk (Resolve without MetadataOnly).
func (m *Checkpoint) OpenCheckpoint(component string) (*safetensors.Checkpoint, error) {
	w, ok, err := m.WeightFiles(component)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, errs.Unsupportedf("%s: no safetensors weights%s", m.Name(), inComponent(component))
	}
	if w.Index != "" {
		return safetensors.OpenIndex(m.Path(w.Index))
	}
	return safetensors.Open(m.Path(w.Files[0]))
}

// Generation reads generation_config.json; nil (no error) when the model
// has none.
func (m *Checkpoint) Generation() (*config.Generation, error) {
	if m.Kind != Transformers || !m.HasFile("generation_config.json") {
		return nil, nil
	}
	return config.ReadGeneration(m.Path("generation_config.json"))
}
