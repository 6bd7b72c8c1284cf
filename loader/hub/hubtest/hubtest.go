// Package hubtest is an in-process fake Hugging Face Hub for tests: it
// serves /resolve/ HEAD and GET with the Hub's headers (X-Repo-Commit,
// X-Linked-Etag, X-Linked-Size, ETag, X-Error-Code), redirects LFS files to
// a second "CDN" server with signed-looking URLs, answers Range requests
// with Content-Range, lists repositories at /api/models/{repo}/revision/
// {rev}, and lets a test inject faults (status codes, dropped connections,
// stalls, corrupted bytes) and count requests.
//
//	srv := hubtest.New(t)
//	srv.AddRepo(hubtest.Repo{ID: "org/tiny", Files: []hubtest.File{
//		{Path: "config.json", Data: cfg},
//		{Path: "model.safetensors", Data: weights, LFS: true},
//	}})
//	client := &hub.Client{Endpoint: srv.URL(), Cache: hub.Cache{Dir: t.TempDir()}}
package hubtest

import (
	"bytes"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// File is one file of a fake repository.
type File struct {
	Path string
	Data []byte
	// LFS files are named by their sha256 and served from the CDN server
	// after a 302; other files are named by their git blob sha1 and served
	// by the Hub itself.
	LFS bool
}

// SHA256 returns the hex sha256 of the data (an LFS file's ETag).
func (f File) SHA256() string { s := sha256.Sum256(f.Data); return hex.EncodeToString(s[:]) }

// GitSHA1 returns the git blob id of the data (a regular file's ETag).
func (f File) GitSHA1() string {
	h := sha1.New()
	fmt.Fprintf(h, "blob %d\x00", len(f.Data))
	h.Write(f.Data)
	return hex.EncodeToString(h.Sum(nil))
}

// ETag is the ETag the Hub reports for the file.
func (f File) ETag() string {
	if f.LFS {
		return f.SHA256()
	}
	return f.GitSHA1()
}

// Repo is a fake model repository with one or more commits.
type Repo struct {
	ID string
	// Files at the head commit.
	Files []File
	// Commit is the head commit; derived from the contents when empty.
	Commit string
	// Refs maps branches and tags to commits; "main" defaults to Commit.
	Refs map[string]string
	// Older holds files of other commits (commit -> files).
	Older map[string][]File
	// Private repos answer 401 RepoNotFound without the server's token;
	// Gated ones answer 401/403 GatedRepo.
	Private, Gated bool
	// RenamedFrom lists old ids that redirect here with a relative 307.
	RenamedFrom []string
}

// Request is one request the servers received.
type Request struct {
	// Server is "hub" or "cdn".
	Server string
	Method string
	Path   string
	Range  string
	// Auth is the Authorization header as received ("" when absent).
	Auth string
}

// Fault changes the answer to matching requests.
type Fault struct {
	// Match selects requests; nil matches all. See OnPath, OnServer.
	Match func(server string, r *http.Request) bool
	// Times is how often the fault fires; 0 means every time.
	Times int
	// Status, when set, replaces the answer with this status and no body.
	Status int
	// RetryAfter is sent with Status.
	RetryAfter string
	// After is how many body bytes are sent before Drop or Stall act.
	After int64
	// Drop cuts the connection after After bytes of the body.
	Drop bool
	// Stall stops sending for this long after After bytes (until the
	// client gives up, if shorter).
	Stall time.Duration
	// Corrupt flips one byte of the body (the headers still announce the
	// true ETag, as a lying mirror would).
	Corrupt bool
	// Delay holds the answer back this long (a slow metadata server).
	Delay time.Duration
	// IgnoreRange answers a Range request with the whole file and 200, as
	// some proxies do.
	IgnoreRange bool
	// Header sets (or, with an empty value, removes) answer headers after
	// the normal ones: a Location with Status 302 makes a redirect loop or
	// a redirect to another scheme, a Content-Length or X-Linked-Size
	// makes a lying server.
	Header map[string]string

	fired int
}

// Server is the fake Hub plus its CDN.
type Server struct {
	Hub, CDN *httptest.Server
	// Token is the token private and gated repos require.
	Token string

	mu       sync.Mutex
	repos    map[string]*Repo
	renamed  map[string]string
	blobs    map[string][]byte // sha256 -> data for the CDN
	requests []Request
	faults   []*Fault
	signed   int // CDN URLs handed out
}

// New starts the two servers; they stop when the test ends.
func New(t testing.TB) *Server {
	s := &Server{Token: "hf_test_secret_token", repos: map[string]*Repo{}, renamed: map[string]string{}, blobs: map[string][]byte{}}
	s.Hub = httptest.NewServer(http.HandlerFunc(s.serveHub))
	s.CDN = httptest.NewServer(http.HandlerFunc(s.serveCDN))
	t.Cleanup(func() {
		s.Hub.Close()
		s.CDN.Close()
	})
	return s
}

// URL is the endpoint to give the client (HF_ENDPOINT).
func (s *Server) URL() string { return s.Hub.URL }

// AddRepo adds or replaces a repository and returns its head commit.
func (s *Server) AddRepo(r Repo) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if r.Commit == "" {
		r.Commit = contentCommit(r.ID, r.Files)
	}
	if r.Refs == nil {
		r.Refs = map[string]string{}
	}
	if _, ok := r.Refs["main"]; !ok {
		r.Refs["main"] = r.Commit
	}
	for _, f := range r.Files {
		if f.LFS {
			s.blobs[f.SHA256()] = f.Data
		}
	}
	for _, files := range r.Older {
		for _, f := range files {
			if f.LFS {
				s.blobs[f.SHA256()] = f.Data
			}
		}
	}
	for _, old := range r.RenamedFrom {
		s.renamed[old] = r.ID
	}
	rc := r
	s.repos[r.ID] = &rc
	return r.Commit
}

// contentCommit derives a stable fake commit hash from the contents.
func contentCommit(id string, files []File) string {
	h := sha1.New()
	fmt.Fprintf(h, "repo %s\n", id)
	for _, f := range files {
		fmt.Fprintf(h, "%s %s\n", f.Path, f.ETag())
	}
	return hex.EncodeToString(h.Sum(nil))
}

// AddFault installs a fault; the first matching fault with firings left
// wins.
func (s *Server) AddFault(f *Fault) *Fault {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults = append(s.faults, f)
	return f
}

// ClearFaults removes every fault.
func (s *Server) ClearFaults() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults = nil
}

// Fired reports how often f has fired.
func (s *Server) Fired(f *Fault) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return f.fired
}

// OnPath matches requests (on either server) whose path ends with suffix.
func OnPath(suffix string) func(string, *http.Request) bool {
	return func(_ string, r *http.Request) bool { return strings.HasSuffix(r.URL.Path, suffix) }
}

// OnServer matches requests to "hub" or "cdn" with the given method ("" for any).
func OnServer(server, method string) func(string, *http.Request) bool {
	return func(srv string, r *http.Request) bool {
		return srv == server && (method == "" || r.Method == method)
	}
}

// OnSignature matches CDN requests made with the n-th signed URL the Hub
// handed out (1 for the first HEAD's Location): with Status 403 it makes
// that URL expire, as a CDN's signed URLs do after an hour or so.
func OnSignature(n int) func(string, *http.Request) bool {
	return func(srv string, r *http.Request) bool {
		return srv == "cdn" && r.URL.Query().Get("X-Amz-Signature") == "fake"+strconv.Itoa(n)
	}
}

// Requests returns a copy of the request log.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Request(nil), s.requests...)
}

// Count returns how many logged requests satisfy keep (all when nil).
func (s *Server) Count(keep func(Request) bool) int {
	n := 0
	for _, r := range s.Requests() {
		if keep == nil || keep(r) {
			n++
		}
	}
	return n
}

// ResetLog forgets the logged requests.
func (s *Server) ResetLog() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.requests = nil
}

func (s *Server) record(server string, r *http.Request) *Fault {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.requests = append(s.requests, Request{Server: server, Method: r.Method, Path: r.URL.Path,
		Range: r.Header.Get("Range"), Auth: r.Header.Get("Authorization")})
	for _, f := range s.faults {
		if f.Times > 0 && f.fired >= f.Times {
			continue
		}
		if f.Match == nil || f.Match(server, r) {
			f.fired++
			return f
		}
	}
	return nil
}

func (s *Server) authorized(r *http.Request) bool {
	return r.Header.Get("Authorization") == "Bearer "+s.Token
}

// serveHub handles /api/models/... and /{repo}/resolve/{rev}/{path}.
func (s *Server) serveHub(w http.ResponseWriter, r *http.Request) {
	fault := s.record("hub", r)
	w = overrideHeaders(w, fault)
	if !delay(r, fault) {
		return
	}
	if fault != nil && fault.Status != 0 {
		writeFaultStatus(w, fault)
		return
	}
	segs, err := splitEscaped(r.URL.EscapedPath())
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	if len(segs) >= 5 && segs[0] == "api" && segs[1] == "models" {
		s.serveAPI(w, r, segs[2:], fault)
		return
	}
	// {org}/{name}/resolve/{rev}/{path...} or {name}/resolve/...
	for i := 1; i <= 2 && i < len(segs); i++ {
		if segs[i] == "resolve" && len(segs) > i+2 {
			s.serveResolve(w, r, strings.Join(segs[:i], "/"), segs[i+1], strings.Join(segs[i+2:], "/"), segs, i, fault)
			return
		}
	}
	http.NotFound(w, r)
}

func splitEscaped(p string) ([]string, error) {
	raw := strings.Split(strings.TrimPrefix(p, "/"), "/")
	out := make([]string, len(raw))
	for i, s := range raw {
		u, err := url.PathUnescape(s)
		if err != nil {
			return nil, err
		}
		out[i] = u
	}
	return out, nil
}

// delay applies a fault's Delay; false means the client went away.
func delay(r *http.Request, f *Fault) bool {
	if f == nil || f.Delay <= 0 {
		return true
	}
	select {
	case <-time.After(f.Delay):
		return true
	case <-r.Context().Done():
		return false
	}
}

// headerWriter applies a fault's Header when the answer's headers are
// written.
type headerWriter struct {
	http.ResponseWriter
	set   map[string]string
	wrote bool
}

func overrideHeaders(w http.ResponseWriter, f *Fault) http.ResponseWriter {
	if f == nil || len(f.Header) == 0 {
		return w
	}
	return &headerWriter{ResponseWriter: w, set: f.Header}
}

func (w *headerWriter) WriteHeader(status int) {
	if w.wrote {
		return
	}
	w.wrote = true
	for k, v := range w.set {
		if v == "" {
			w.Header().Del(k)
		} else {
			w.Header().Set(k, v)
		}
	}
	w.ResponseWriter.WriteHeader(status)
}

func (w *headerWriter) Write(b []byte) (int, error) {
	w.WriteHeader(http.StatusOK)
	return w.ResponseWriter.Write(b)
}

func (w *headerWriter) Flush() {
	if fl, ok := w.ResponseWriter.(http.Flusher); ok {
		fl.Flush()
	}
}

func writeFaultStatus(w http.ResponseWriter, f *Fault) {
	if f.RetryAfter != "" {
		w.Header().Set("Retry-After", f.RetryAfter)
	}
	w.WriteHeader(f.Status)
}

func hubError(w http.ResponseWriter, status int, code, msg, commit string) {
	if code != "" {
		w.Header().Set("X-Error-Code", code)
	}
	w.Header().Set("X-Error-Message", msg)
	if commit != "" {
		w.Header().Set("X-Repo-Commit", commit)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(map[string]string{"error": msg})
}

// lookup finds a repo (following renames) and checks access; it writes the
// error answer and returns nil when the request cannot proceed.
func (s *Server) lookup(w http.ResponseWriter, r *http.Request, id string) (*Repo, string) {
	s.mu.Lock()
	repo, ok := s.repos[id]
	newID, renamed := s.renamed[id]
	s.mu.Unlock()
	if !ok && renamed {
		return nil, newID
	}
	if !ok || (repo.Private && !s.authorized(r)) {
		hubError(w, http.StatusUnauthorized, "RepoNotFound", "Repository not found", "")
		return nil, ""
	}
	if repo.Gated && !s.authorized(r) {
		status := http.StatusUnauthorized
		if r.Header.Get("Authorization") != "" {
			status = http.StatusForbidden
		}
		hubError(w, status, "GatedRepo", "Access to model "+id+" is restricted. You must have access to it and be authenticated to access it. Please log in.", "")
		return nil, ""
	}
	return repo, ""
}

func (repo *Repo) resolve(rev string) (string, []File, bool) {
	commit, ok := repo.Refs[rev]
	if !ok {
		commit = rev
	}
	if commit == repo.Commit {
		return commit, repo.Files, true
	}
	if files, ok := repo.Older[commit]; ok {
		return commit, files, true
	}
	return "", nil, false
}

func (s *Server) serveResolve(w http.ResponseWriter, r *http.Request, id, rev, path string, segs []string, idx int, fault *Fault) {
	repo, newID := s.lookup(w, r, id)
	if newID != "" {
		// Relative redirect to the renamed repository, as the Hub does.
		rest := make([]string, len(segs)-idx)
		for i, seg := range segs[idx:] {
			rest[i] = url.PathEscape(seg)
		}
		w.Header().Set("Location", "/"+newID+"/"+strings.Join(rest, "/"))
		w.WriteHeader(http.StatusTemporaryRedirect)
		return
	}
	if repo == nil {
		return
	}
	commit, files, ok := repo.resolve(rev)
	if !ok {
		hubError(w, http.StatusNotFound, "RevisionNotFound", "Invalid rev id: "+rev, "")
		return
	}
	var file *File
	for i := range files {
		if files[i].Path == path {
			file = &files[i]
		}
	}
	if file == nil {
		hubError(w, http.StatusNotFound, "EntryNotFound", path+" does not exist on \""+rev+"\"", commit)
		return
	}
	h := w.Header()
	h.Set("X-Repo-Commit", commit)
	h.Set("Accept-Ranges", "bytes")
	if file.LFS {
		h.Set("X-Linked-Etag", `"`+file.SHA256()+`"`)
		h.Set("X-Linked-Size", strconv.Itoa(len(file.Data)))
		// The Hub's own ETag for the pointer file differs from the blob's.
		h.Set("ETag", `"`+File{Data: []byte("pointer " + file.SHA256())}.GitSHA1()+`"`)
		// Each answer signs anew (fake1, fake2, ...), so a test can let the
		// URLs it handed out expire: see OnSignature.
		s.mu.Lock()
		s.signed++
		sig := "fake" + strconv.Itoa(s.signed)
		s.mu.Unlock()
		h.Set("Location", s.CDN.URL+"/repos/"+file.SHA256()+"?X-Amz-Signature="+sig+"&Expires=9999999999")
		h.Set("Content-Length", "0")
		w.WriteHeader(http.StatusFound)
		return
	}
	h.Set("ETag", `"`+file.GitSHA1()+`"`)
	serveBytes(w, r, file.Data, fault)
}

func (s *Server) serveAPI(w http.ResponseWriter, r *http.Request, segs []string, fault *Fault) {
	// segs: org, name, "revision", rev  |  name, "revision", rev
	ri := -1
	for i, seg := range segs {
		if seg == "revision" {
			ri = i
			break
		}
	}
	if ri < 1 || ri+1 >= len(segs) {
		http.NotFound(w, r)
		return
	}
	id := strings.Join(segs[:ri], "/")
	rev := strings.Join(segs[ri+1:], "/")
	repo, newID := s.lookup(w, r, id)
	if newID != "" {
		s.mu.Lock()
		repo = s.repos[newID]
		s.mu.Unlock()
	}
	if repo == nil {
		return
	}
	commit, files, ok := repo.resolve(rev)
	if !ok {
		hubError(w, http.StatusNotFound, "RevisionNotFound", "Invalid rev id: "+rev, "")
		return
	}
	type lfs struct {
		SHA256 string `json:"sha256"`
		Size   int    `json:"size"`
	}
	type sibling struct {
		RFilename string `json:"rfilename"`
		Size      *int   `json:"size,omitempty"`
		BlobID    string `json:"blobId,omitempty"`
		LFS       *lfs   `json:"lfs,omitempty"`
	}
	blobs := r.URL.Query().Get("blobs") == "true"
	sib := make([]sibling, 0, len(files))
	for _, f := range files {
		s := sibling{RFilename: f.Path}
		if blobs {
			n := len(f.Data)
			s.BlobID = f.GitSHA1()
			if f.LFS {
				pointer := 130 // a git-lfs pointer file is about this big
				s.Size, s.LFS = &pointer, &lfs{SHA256: f.SHA256(), Size: n}
			} else {
				s.Size = &n
			}
		}
		sib = append(sib, s)
	}
	sort.Slice(sib, func(i, j int) bool { return sib[i].RFilename < sib[j].RFilename })
	body, _ := json.Marshal(map[string]any{
		"_id": "fake" + commit[:8], "id": repo.ID, "modelId": repo.ID, "sha": commit,
		"private": repo.Private, "gated": repo.Gated, "disabled": false,
		"lastModified": "2025-01-01T00:00:00.000Z", "siblings": sib,
	})
	w.Header().Set("Content-Type", "application/json")
	serveBytes(w, r, body, fault)
}

func (s *Server) serveCDN(w http.ResponseWriter, r *http.Request) {
	fault := s.record("cdn", r)
	w = overrideHeaders(w, fault)
	if !delay(r, fault) {
		return
	}
	if fault != nil && fault.Status != 0 {
		writeFaultStatus(w, fault)
		return
	}
	sha, ok := strings.CutPrefix(r.URL.Path, "/repos/")
	s.mu.Lock()
	data, found := s.blobs[sha]
	s.mu.Unlock()
	if !ok || !found {
		http.NotFound(w, r)
		return
	}
	w.Header().Set("ETag", `"`+sha+`"`)
	w.Header().Set("Content-Disposition", `attachment; filename="blob"; filename*=UTF-8''blob;`)
	serveBytes(w, r, data, fault)
}

// serveBytes answers HEAD/GET with optional single Range support and
// applies body faults.
func serveBytes(w http.ResponseWriter, r *http.Request, data []byte, fault *Fault) {
	h := w.Header()
	h.Set("Accept-Ranges", "bytes")
	start, end := int64(0), int64(len(data))
	status := http.StatusOK
	if rg := r.Header.Get("Range"); rg != "" && r.Method == http.MethodGet && (fault == nil || !fault.IgnoreRange) {
		a, b, ok := parseRange(rg, int64(len(data)))
		if !ok {
			h.Set("Content-Range", fmt.Sprintf("bytes */%d", len(data)))
			w.WriteHeader(http.StatusRequestedRangeNotSatisfiable)
			return
		}
		start, end, status = a, b, http.StatusPartialContent
		h.Set("Content-Range", fmt.Sprintf("bytes %d-%d/%d", a, b-1, len(data)))
	}
	body := data[start:end]
	h.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(status)
	if r.Method == http.MethodHead {
		return
	}
	if fault != nil && fault.Corrupt && len(body) > 0 {
		body = bytes.Clone(body)
		body[len(body)/2] ^= 0xff
	}
	if fault != nil && (fault.Drop || fault.Stall > 0) && fault.After < int64(len(body)) {
		w.Write(body[:fault.After])
		if fl, ok := w.(http.Flusher); ok {
			fl.Flush()
		}
		if fault.Stall > 0 {
			select {
			case <-time.After(fault.Stall):
			case <-r.Context().Done():
				return
			}
			if !fault.Drop {
				w.Write(body[fault.After:])
				return
			}
		}
		panic(http.ErrAbortHandler) // cut the connection mid-body
	}
	w.Write(body)
}

// parseRange handles "bytes=a-", "bytes=a-b" and "bytes=-n".
func parseRange(v string, size int64) (int64, int64, bool) {
	spec, ok := strings.CutPrefix(v, "bytes=")
	if !ok || strings.Contains(spec, ",") {
		return 0, 0, false
	}
	a, b, ok := strings.Cut(spec, "-")
	if !ok {
		return 0, 0, false
	}
	if a == "" {
		n, err := strconv.ParseInt(b, 10, 64)
		if err != nil || n <= 0 {
			return 0, 0, false
		}
		return max(size-n, 0), size, true
	}
	start, err := strconv.ParseInt(a, 10, 64)
	if err != nil || start >= size || start < 0 {
		return 0, 0, false
	}
	end := size
	if b != "" {
		e, err := strconv.ParseInt(b, 10, 64)
		if err != nil || e < start {
			return 0, 0, false
		}
		end = min(e+1, size)
	}
	return start, end, true
}
