package loader

import (
	"encoding/json"
	"fmt"
	"path"
	"slices"
	"strings"

	"github.com/tputool/tputool/internal/errs"
	"github.com/tputool/tputool/loader/config"
)

// poolingFile reports whether name is a sentence-transformers Pooling
// module's config (1_Pooling/config.json), fetched with the configs.
func poolingFile(name string) bool {
	dir, rest, ok := strings.Cut(name, "/")
	return ok && rest == "config.json" && strings.HasSuffix(dir, "_Pooling")
}

// stModule is one entry of a sentence-transformers modules.json.
type stModule struct {
	Path string `json:"path"`
	Type string `json:"type"`
}

// class is the module's class name: sentence-transformers 2 and 3 save
// "sentence_transformers.models.Pooling", later versions the class's own
// module ("sentence_transformers.sentence_transformer.modules.pooling.Pooling").
func (mod stModule) class() string {
	if !strings.HasPrefix(mod.Type, "sentence_transformers.") {
		return mod.Type
	}
	return mod.Type[strings.LastIndex(mod.Type, ".")+1:]
}

// sentenceModules reads modules.json (nil when the model has none) and
// refuses a module after the first (the transformer, which tputool runs)
// that changes the vectors and that tputool does not apply: a Dense
// projection (2_Dense), LayerNorm, or any other but Pooling and Normalize
// (the embeddings are always normalized).
func (m *Checkpoint) sentenceModules() ([]stModule, error) {
	if m.Kind != Transformers || !m.HasFile("modules.json") {
		return nil, nil
	}
	var modules []stModule
	if err := config.ReadJSONFile(m.Path("modules.json"), &modules); err != nil {
		return nil, err
	}
	for i, mod := range modules {
		if c := mod.class(); i > 0 && c != "Pooling" && c != "Normalize" {
			return nil, fmt.Errorf("%s: modules.json: the %s module at %q transforms the pooled vectors and tputool does not apply it: %w", m.Name(), mod.Type, mod.Path, errs.ErrUnsupported)
		}
	}
	return modules, nil
}

// CheckSentenceModules refuses a sentence-transformers model whose
// modules.json has a module tputool does not apply (sentenceModules),
// whatever the pooling: its vectors would not be the model's.
func (m *Checkpoint) CheckSentenceModules() error {
	_, err := m.sentenceModules()
	return err
}

// Pooling reads how a sentence-transformers model pools its token
// embeddings (modules.json's sentence_transformers.models.Pooling module
// and that module's config.json): "last" (pooling_mode_lasttoken, as
// Qwen3-Embedding), "mean" (pooling_mode_mean_tokens, as
// all-MiniLM-L6-v2), "cls" (pooling_mode_cls_token, as bge), or "" when
// the model declares none. A mode tputool does not pool by (max,
// weighted mean, several at once) is an ErrUnsupported error naming it,
// as is a module tputool does not apply (CheckSentenceModules).
func (m *Checkpoint) Pooling() (string, error) {
	rel, c, err := m.poolingConfig()
	if err != nil || rel == "" {
		return "", err
	}
	if c == nil {
		return "", fmt.Errorf("%s: modules.json names a Pooling module at %q, whose config.json the model lacks", m.Name(), path.Dir(rel))
	}
	if mode, ok := c["pooling_mode"].(string); ok {
		// One mode by name (sentence-transformers 5.4 and later save
		// it so; Pooling lowercases it).
		switch strings.ToLower(mode) {
		case "cls":
			return "cls", nil
		case "mean":
			return "mean", nil
		case "lasttoken":
			return "last", nil
		}
		return "", fmt.Errorf("%s: %s: pooling_mode %q: tputool pools by the first (CLS) token, the last token or the mean of the tokens: %w", m.Name(), rel, mode, errs.ErrUnsupported)
	}
	// The flags, as Pooling's constructor takes them: the mean unless
	// pooling_mode_mean_tokens says otherwise, the others when true.
	on := []string{}
	if v, ok := c["pooling_mode_mean_tokens"].(bool); !ok || v {
		on = append(on, "mean_tokens")
	}
	for k, v := range c {
		if b, ok := v.(bool); ok && b && strings.HasPrefix(k, "pooling_mode_") && k != "pooling_mode_mean_tokens" {
			on = append(on, strings.TrimPrefix(k, "pooling_mode_"))
		}
	}
	if len(on) == 0 {
		return "", fmt.Errorf("%s: %s: every pooling_mode_* is false, so sentence-transformers pools nothing: %w", m.Name(), rel, errs.ErrUnsupported)
	}
	slices.Sort(on)
	switch {
	case len(on) == 1 && on[0] == "lasttoken":
		return "last", nil
	case len(on) == 1 && on[0] == "mean_tokens":
		return "mean", nil
	case len(on) == 1 && on[0] == "cls_token":
		return "cls", nil
	}
	return "", fmt.Errorf("%s: %s: pooling modes %v: tputool pools by the first (CLS) token, the last token or the mean of the tokens: %w", m.Name(), rel, on, errs.ErrUnsupported)
}

// poolingConfig finds the sentence-transformers Pooling module of
// modules.json and reads its config.json: its path and keys ("" and nil
// when the model has no Pooling module; the path and nil when the model
// lacks the module's config.json).
func (m *Checkpoint) poolingConfig() (rel string, c map[string]any, err error) {
	modules, err := m.sentenceModules()
	if err != nil {
		return "", nil, err
	}
	for _, mod := range modules {
		if mod.class() != "Pooling" {
			continue
		}
		rel = path.Join(mod.Path, "config.json")
		if !m.HasFile(rel) {
			return rel, nil, nil
		}
		if err := config.ReadJSONFile(m.Path(rel), &c); err != nil {
			return "", nil, err
		}
		return rel, c, nil
	}
	return "", nil, nil
}

// MaxSeqLength reads sentence_bert_config.json's max_seq_length: the most
// tokens sentence-transformers gives the model per input, cutting the
// content of a longer one (the special tokens the tokenizer adds kept); 0
// when the model has no such file or it sets no limit.
func (m *Checkpoint) MaxSeqLength() (int, error) {
	if m.Kind != Transformers || !m.HasFile("sentence_bert_config.json") {
		return 0, nil
	}
	var c struct {
		MaxSeqLength *int `json:"max_seq_length"`
	}
	if err := config.ReadJSONFile(m.Path("sentence_bert_config.json"), &c); err != nil {
		return 0, err
	}
	if c.MaxSeqLength == nil {
		return 0, nil
	}
	if *c.MaxSeqLength < 1 {
		return 0, fmt.Errorf("%s: sentence_bert_config.json: max_seq_length %d: want a token count", m.Name(), *c.MaxSeqLength)
	}
	return *c.MaxSeqLength, nil
}

// CrossEncoderRaw reports whether a cross-encoder's relevance scores are
// its logits as they are, as sentence-transformers' CrossEncoder decides:
// config_sentence_transformers.json's activation_fn (sentence-transformers
// 5.4 and later), else config.json's sentence_transformers.activation_fn
// (4 and later) or sbert_ce_default_activation_function (earlier) naming
// torch's Identity (the cross-encoder/ms-marco-* models: scores of about
// -10 to 10) gives true; Sigmoid, or neither key (CrossEncoder's default
// for one label, bge-reranker's case), false. Another activation is an
// ErrUnsupported error naming it.
func (m *Checkpoint) CrossEncoderRaw() (bool, error) {
	if m.Config == nil {
		return false, nil
	}
	var name string
	// sentence-transformers 5.4 and later save it in
	// config_sentence_transformers.json.
	if m.Kind == Transformers && m.HasFile("config_sentence_transformers.json") {
		var st struct {
			ActivationFn string `json:"activation_fn"`
		}
		if err := config.ReadJSONFile(m.Path("config_sentence_transformers.json"), &st); err != nil {
			return false, err
		}
		name = st.ActivationFn
	}
	if raw, ok := m.Config.Raw["sentence_transformers"]; ok && name == "" && !isJSONNull(raw) {
		var st struct {
			ActivationFn string `json:"activation_fn"`
		}
		if err := json.Unmarshal(raw, &st); err != nil {
			return false, fmt.Errorf("%s: config.json: sentence_transformers: %w", m.Name(), err)
		}
		name = st.ActivationFn
	}
	if raw, ok := m.Config.Raw["sbert_ce_default_activation_function"]; ok && name == "" && !isJSONNull(raw) {
		if err := json.Unmarshal(raw, &name); err != nil {
			return false, fmt.Errorf("%s: config.json: sbert_ce_default_activation_function: %w", m.Name(), err)
		}
	}
	switch {
	case name == "" || name == "Sigmoid" || strings.HasSuffix(name, ".Sigmoid"):
		return false, nil
	case name == "Identity" || strings.HasSuffix(name, ".Identity"):
		return true, nil
	}
	return false, fmt.Errorf("%s: config.json: the cross-encoder's activation %q: tputool scores with its sigmoid or its logit (Identity): %w", m.Name(), name, errs.ErrUnsupported)
}

// isJSONNull reports whether a raw JSON value is null.
func isJSONNull(raw json.RawMessage) bool { return strings.TrimSpace(string(raw)) == "null" }

// SentencePrompts reads config_sentence_transformers.json's prompts (name
// to the text sentence-transformers puts before an input when encode is
// given that prompt_name: Qwen3-Embedding's "query" instruction, e5's
// "query: ") and its default_prompt_name (applied when none is given);
// nil and "" when the model has none. A default that names no prompt is
// an error.
func (m *Checkpoint) SentencePrompts() (prompts map[string]string, defaultName string, err error) {
	if m.Kind != Transformers || !m.HasFile("config_sentence_transformers.json") {
		return nil, "", nil
	}
	var c struct {
		Prompts           map[string]string `json:"prompts"`
		DefaultPromptName *string           `json:"default_prompt_name"`
	}
	if err := config.ReadJSONFile(m.Path("config_sentence_transformers.json"), &c); err != nil {
		return nil, "", err
	}
	if c.DefaultPromptName != nil {
		defaultName = *c.DefaultPromptName
		if _, ok := c.Prompts[defaultName]; !ok && defaultName != "" {
			return nil, "", fmt.Errorf("%s: config_sentence_transformers.json: default_prompt_name %q names none of its prompts", m.Name(), defaultName)
		}
	}
	return c.Prompts, defaultName, nil
}

// PoolingIncludesPrompt reads the Pooling module's include_prompt (true
// when the model has no Pooling config or the key is absent): false makes
// sentence-transformers leave a prompt's tokens out of a mean.
func (m *Checkpoint) PoolingIncludesPrompt() (bool, error) {
	_, c, err := m.poolingConfig()
	if err != nil {
		return false, err
	}
	in, ok := c["include_prompt"].(bool)
	return !ok || in, nil
}
