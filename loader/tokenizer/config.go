package tokenizer

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"

	"github.com/tputool/tputool/internal/errs"
	"github.com/tputool/tputool/loader/tokenizer/chat"
)

// rawConfig is the part of tokenizer_config.json that tputool reads.
type rawConfig struct {
	BOS          json.RawMessage `json:"bos_token"`
	EOS          json.RawMessage `json:"eos_token"`
	Pad          json.RawMessage `json:"pad_token"`
	AddBOS       *bool           `json:"add_bos_token"`
	AddEOS       *bool           `json:"add_eos_token"`
	ChatTemplate json.RawMessage `json:"chat_template"`
	// ModelMaxLength is transformers' model_max_length: the longest
	// input the tokenizer was saved for (sentence-transformers' and
	// CrossEncoder's max_length); a number of 1e18 or more is
	// transformers' "no limit" (int(1e30)).
	ModelMaxLength *float64 `json:"model_max_length"`
}

// tokenName reads a special-token field: a string, or an AddedToken object
// with a "content" field, or null.
func tokenName(raw json.RawMessage, field string) (string, error) {
	if isNull(raw) {
		return "", nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return s, nil
	}
	var obj struct {
		Content string `json:"content"`
	}
	if err := json.Unmarshal(raw, &obj); err != nil {
		return "", fmt.Errorf("%s: expected a string or {\"content\": ...}: %w", field, err)
	}
	return obj.Content, nil
}

func (t *Tokenizer) applyConfig(data []byte) error {
	var cfg rawConfig
	if err := json.Unmarshal(data, &cfg); err != nil {
		return fmt.Errorf("tokenizer_config.json: %w", err)
	}
	names := map[string]*int{"bos_token": &t.bos, "eos_token": &t.eos, "pad_token": &t.pad}
	raws := map[string]json.RawMessage{"bos_token": cfg.BOS, "eos_token": cfg.EOS, "pad_token": cfg.Pad}
	for field, dst := range names {
		name, err := tokenName(raws[field], field)
		if err != nil {
			return err
		}
		if name == "" {
			continue
		}
		id, ok := t.TokenToID(name)
		if !ok {
			return fmt.Errorf("%s: %q is not in the vocabulary", field, name)
		}
		*dst = id
	}
	if cfg.AddBOS != nil || cfg.AddEOS != nil {
		t.applyAddBOSEOS(cfg.AddBOS, cfg.AddEOS)
	}
	if n := cfg.ModelMaxLength; n != nil && *n >= 1 && *n < 1e18 {
		t.maxLen = int(*n)
	}
	if !isNull(cfg.ChatTemplate) {
		tm, err := parseChatTemplates(cfg.ChatTemplate)
		if err != nil {
			return err
		}
		t.templates = tm
	}
	return nil
}

// applyAddBOSEOS follows transformers' update_post_processor (Llama, Gemma):
// add_bos_token/add_eos_token decide the single-sequence template. It only
// replaces a post-processor that adds nothing but BOS/EOS.
func (t *Tokenizer) applyAddBOSEOS(addBOS, addEOS *bool) {
	var before, after []int
	if t.post != nil {
		before, after = t.post.around()
	}
	for _, id := range append(append([]int(nil), before...), after...) {
		if id != t.bos && id != t.eos {
			return
		}
	}
	wantBOS := len(before) > 0
	wantEOS := len(after) > 0
	if addBOS != nil {
		wantBOS = *addBOS
	}
	if addEOS != nil {
		wantEOS = *addEOS
	}
	p := &templatePost{}
	if wantBOS && t.bos >= 0 {
		p.before = []int{t.bos}
	}
	if wantEOS && t.eos >= 0 {
		p.after = []int{t.eos}
	}
	// The pair template is the single one with type id 0, then again
	// around $B with type id 1: "bos:0 $A:0 eos:0 bos:1 $B:1 eos:1".
	p.single = flatPieces(p.before, p.after, 0)
	second := flatPieces(p.before, p.after, 1)
	for i := range second {
		if second[i].seq == 0 {
			second[i].seq = 1
		}
	}
	p.pair = append(slices.Clip(p.single), second...)
	t.post = p
}

func parseChatTemplates(raw json.RawMessage) (map[string]string, error) {
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return map[string]string{"default": s}, nil
	}
	var list []struct {
		Name     string `json:"name"`
		Template string `json:"template"`
	}
	if err := json.Unmarshal(raw, &list); err != nil {
		return nil, fmt.Errorf("chat_template: expected a string or a list of {name, template}: %w", err)
	}
	m := map[string]string{}
	for i, e := range list {
		if e.Name == "" {
			return nil, fmt.Errorf("chat_template[%d]: missing name", i)
		}
		m[e.Name] = e.Template
	}
	return m, nil
}

// ChatTemplateNames lists the chat templates the tokenizer has, sorted.
func (t *Tokenizer) ChatTemplateNames() []string {
	var names []string
	for n := range t.templates {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// ErrNoChatTemplate is returned (wrapped with errs.ErrUnsupported) when the
// tokenizer has no chat template of the requested name.
var ErrNoChatTemplate = errors.New("no chat template")

// ChatTemplate compiles the named chat template ("" for "default"), with the
// tokenizer's BOS/EOS token strings bound to bos_token/eos_token.
func (t *Tokenizer) ChatTemplate(name string) (*chat.Template, error) {
	if name == "" {
		name = "default"
	}
	src, ok := t.templates[name]
	if !ok {
		if len(t.templates) == 0 {
			return nil, errs.Unsupportedf("tokenizer has no chat template: %w", ErrNoChatTemplate)
		}
		return nil, errs.Unsupportedf("chat template %q not found (have %v): %w", name, t.ChatTemplateNames(), ErrNoChatTemplate)
	}
	var opts chat.Options
	if s, ok := t.IDToToken(t.bos); ok {
		opts.BOSToken = s
	}
	if s, ok := t.IDToToken(t.eos); ok {
		opts.EOSToken = s
	}
	return chat.New(name, src, opts)
}
