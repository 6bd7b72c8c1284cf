package serve

import (
	"fmt"
	"math"
	"net/http"
	"strconv"
	"time"
)

// Ollama's endpoints about the model and the server, which its clients
// read before they generate: GET / (the ollama CLI's heartbeat), GET
// /api/version, GET /api/tags (the model list), POST /api/show (one
// model's details, template and capabilities) and GET /api/ps (the loaded
// models). The one served model is listed with a tag (ollamaModelName).

// OllamaAPIVersion is the ollama release whose API tputool serves:
// /api/version answers it, not tputool's own version (which comes as
// tputool_version), since ollama's clients compare it numerically with
// the versions that introduced what they use (Open WebUI splits it on
// dots into integers).
const OllamaAPIVersion = "0.24.0"

// ollamaDetails is ollama's ModelDetails; every field is always sent
// (Zed lists no model whose parameter_size or quantization_level is
// missing).
type ollamaDetails struct {
	ParentModel       string   `json:"parent_model"`
	Format            string   `json:"format"`
	Family            string   `json:"family"`
	Families          []string `json:"families"`
	ParameterSize     string   `json:"parameter_size"`
	QuantizationLevel string   `json:"quantization_level"`
}

// ollamaDetails describes the served model: its architecture as family,
// its parameter count as ollama writes it ("110.26M", "8.2B"; "" when
// unknown) and the form its weights are held in (ServerOptions).
func (s *Server) ollamaDetails() ollamaDetails {
	d := ollamaDetails{Format: "safetensors", Family: s.o.Family, Families: []string{}, QuantizationLevel: s.o.Quantization}
	if s.o.Family != "" {
		d.Families = []string{s.o.Family}
	}
	if n := s.o.ParameterCount; n > 0 {
		d.ParameterSize = humanCount(n)
	}
	return d
}

// humanCount writes a count as ollama's parameter sizes: billions with
// one decimal, millions with two, thousands rounded; no decimals when
// the count is whole in its unit.
func humanCount(n int64) string {
	unit := func(div float64, decimals int, suffix string) string {
		v := float64(n) / div
		if v == math.Floor(v) {
			decimals = 0
		}
		return strconv.FormatFloat(v, 'f', decimals, 64) + suffix
	}
	switch {
	case n >= 1e9:
		return unit(1e9, 1, "B")
	case n >= 1e6:
		return unit(1e6, 2, "M")
	case n >= 1e3:
		return unit(1e3, 0, "K")
	}
	return strconv.FormatInt(n, 10)
}

// ollamaRoot answers GET / (and HEAD /): ollama's "Ollama is running",
// which its CLI checks before anything else.
func (s *Server) ollamaRoot(w http.ResponseWriter, _ *http.Request, _ *exchange) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(http.StatusOK)
	fmt.Fprint(w, "Ollama is running")
}

// ollamaVersion answers GET /api/version: the ollama API version served
// (OllamaAPIVersion), and tputool's own.
func (s *Server) ollamaVersion(w http.ResponseWriter, _ *http.Request, _ *exchange) {
	v := s.o.Version
	if v == "" {
		v = "unknown"
	}
	writeJSON(w, http.StatusOK, map[string]string{"version": OllamaAPIVersion, "tputool_version": v})
}

// ollamaTags answers GET /api/tags, ollama's model list, which its
// clients (Open WebUI, Zed among them) read first: the one served model.
func (s *Server) ollamaTags(w http.ResponseWriter, _ *http.Request, _ *exchange) {
	type model struct {
		Name       string        `json:"name"`
		Model      string        `json:"model"`
		ModifiedAt string        `json:"modified_at"`
		Size       int64         `json:"size"`
		Digest     string        `json:"digest"`
		Details    ollamaDetails `json:"details"`
	}
	name := s.ollamaModelName()
	m := model{Name: name, Model: name, ModifiedAt: s.started.UTC().Format(time.RFC3339Nano), Details: s.ollamaDetails()}
	writeJSON(w, http.StatusOK, map[string][]model{"models": {m}})
}

// ollamaCapabilities are the model's capabilities as /api/show lists
// them: "embedding" alone for a model that only gives embeddings
// (ServerOptions.EmbeddingsOnly), as ollama lists an embedding model's;
// else "completion", "tools" when its template has call markup tputool
// parses, and "thinking" when it has reasoning markup (or is harmony).
// A generative model does not list "embedding", though /api/embed
// serves it: ollama lists it for embedding models only, and its CLI then
// runs the model as one (embedding its prompt instead of chatting).
//
// A reranker (ServerOptions.Rerank) lists none: ollama (0.24.0) has no
// capability for reranking, and each it has names endpoints that answer
// a reranker 400 here ("embedding" would send ollama's CLI and clients
// such as Open WebUI to /api/embed, "completion" to /api/generate). The
// list is [], not left out as ollama leaves out an empty one, so that a
// client reading it finds an array.
func (s *Server) ollamaCapabilities() []string {
	if s.o.Rerank {
		return []string{}
	}
	if s.o.EmbeddingsOnly {
		return []string{"embedding"}
	}
	caps := []string{"completion"}
	if ToolFormatOf(s.o.Template) != "" {
		caps = append(caps, "tools")
	}
	if s.o.Reasoning != nil || s.o.Harmony {
		caps = append(caps, "thinking")
	}
	return caps
}

// ollamaShow answers POST /api/show: the model's details, its chat
// template's source, model_info in ollama's keys (general.architecture,
// general.parameter_count, <arch>.context_length — the served context —
// and <arch>.embedding_length) and its capabilities. There is no
// Modelfile, nor parameters from one.
func (s *Server) ollamaShow(w http.ResponseWriter, r *http.Request, _ *exchange) {
	var req struct {
		Model string `json:"model"`
		Name  string `json:"name"` // the older field
	}
	if err := decodeOllama(r, &req); err != nil {
		writeOllamaError(w, err)
		return
	}
	name := req.Model
	if name == "" {
		name = req.Name
	}
	if name == "" {
		writeOllamaError(w, badRequest("model", "model is required"))
		return
	}
	if err := s.checkOllamaModel(name); err != nil {
		writeOllamaError(w, err)
		return
	}
	info := map[string]any{}
	arch := s.o.Family
	if arch != "" {
		info["general.architecture"] = arch
	}
	if s.o.ParameterCount > 0 {
		info["general.parameter_count"] = s.o.ParameterCount
	}
	if arch != "" && s.o.MaxContext > 0 {
		info[arch+".context_length"] = s.o.MaxContext
	}
	if arch != "" && s.o.EmbeddingSize > 0 {
		info[arch+".embedding_length"] = s.o.EmbeddingSize
	}
	template := ""
	if s.o.Template != nil {
		template = s.o.Template.Source()
	}
	writeJSON(w, http.StatusOK, struct {
		Modelfile    string         `json:"modelfile"`
		Parameters   string         `json:"parameters"`
		Template     string         `json:"template"`
		Details      ollamaDetails  `json:"details"`
		ModelInfo    map[string]any `json:"model_info"`
		Capabilities []string       `json:"capabilities"`
		ModifiedAt   string         `json:"modified_at"`
	}{Template: template, Details: s.ollamaDetails(), ModelInfo: info, Capabilities: s.ollamaCapabilities(),
		ModifiedAt: s.started.UTC().Format(time.RFC3339Nano)})
}

// ollamaPS answers GET /api/ps: the served model, loaded for as long as
// the server runs (expires_at a century after it started), its context
// the served one. Sizes are not known here: 0.
func (s *Server) ollamaPS(w http.ResponseWriter, _ *http.Request, _ *exchange) {
	type model struct {
		Name          string        `json:"name"`
		Model         string        `json:"model"`
		Size          int64         `json:"size"`
		Digest        string        `json:"digest"`
		Details       ollamaDetails `json:"details"`
		ExpiresAt     string        `json:"expires_at"`
		SizeVRAM      int64         `json:"size_vram"`
		ContextLength int           `json:"context_length"`
	}
	name := s.ollamaModelName()
	m := model{Name: name, Model: name, Details: s.ollamaDetails(),
		ExpiresAt: s.started.AddDate(100, 0, 0).UTC().Format(time.RFC3339Nano), ContextLength: s.o.MaxContext}
	writeJSON(w, http.StatusOK, map[string][]model{"models": {m}})
}
