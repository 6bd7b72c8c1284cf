package lm

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
)

// GPTQ's dynamic per-module rules (GPTQModel's quantization_config
// "dynamic"): an object whose keys are regular expressions over a
// module's name (the Linear's prefix, "model.layers.0.mlp.down_proj") and
// whose values override the config for the modules they match:
//
//	"dynamic": {
//	  "-:model\\.layers\\.0\\..*": {},                  // left unquantized
//	  "+:.*down_proj": {"bits": 8, "group_size": 32},  // "+:" or no prefix
//	}
//
// The first rule, in the order the config writes them, that matches a
// module decides it: a "-:" rule leaves the module in plain weights, a
// positive one takes its bits and group_size over the config's (the
// other keys, sym and desc_act, change nothing the loader reads: zero
// points are stored either way, and a reordered module has its g_idx).
// A pattern matches at the start of the name and need not reach its end
// (Python's re.match, as GPTQModel and vLLM apply them). Patterns are
// compiled with Go's regexp (RE2): lookarounds and backreferences, which
// RE2 lacks, are refused with the pattern named.

// PackedRule is one dynamic rule.
type PackedRule struct {
	Pattern string // as the config writes it, with its "+:" or "-:"
	re      *regexp.Regexp
	Skip    bool // "-:": matching modules are not quantized
	Bits    int  // 0: the config's
	Group   int  // 0: the config's; -1: one group over the whole row
}

// For is the quantization of the module named prefix: q with the first
// matching rule's overrides, and false when a rule leaves it unquantized.
func (q *PackedQuant) For(prefix string) (*PackedQuant, bool) {
	for _, r := range q.Rules {
		if !r.re.MatchString(prefix) {
			continue
		}
		if r.Skip {
			return q, false
		}
		o := *q
		o.Rules = nil
		if r.Bits != 0 {
			o.Bits = r.Bits
		}
		switch {
		case r.Group > 0:
			o.Group = r.Group
		case r.Group < 0:
			o.Group = 0
		}
		return &o, true
	}
	return q, true
}

// ForWeight is For of weight name's module (name less ".weight").
func (q *PackedQuant) ForWeight(name string) *PackedQuant {
	p, _ := packedPrefix(name)
	o, _ := q.For(p)
	return o
}

// parseDynamic reads a dynamic object in its written order (a Go map
// would lose it, and the first match decides). An absent, null or empty
// one gives no rules.
func parseDynamic(raw json.RawMessage, where string) ([]PackedRule, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	where += " dynamic"
	dec := json.NewDecoder(bytes.NewReader(raw))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil, fmt.Errorf("%s: want an object of rules keyed by a module pattern", where)
	}
	var rules []PackedRule
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", where, err)
		}
		key, _ := tok.(string)
		var over struct {
			Bits  *int `json:"bits"`
			Group *int `json:"group_size"`
		}
		if err := dec.Decode(&over); err != nil {
			return nil, fmt.Errorf("%s: rule %q: want an object of overrides: %w", where, key, err)
		}
		r, err := packedRule(key, over.Bits, over.Group)
		if err != nil {
			return nil, fmt.Errorf("%s: rule %q: %w", where, key, err)
		}
		rules = append(rules, r)
	}
	return rules, nil
}

// packedRule checks and compiles one rule.
func packedRule(key string, bits, group *int) (PackedRule, error) {
	r := PackedRule{Pattern: key}
	pat, skip := strings.CutPrefix(key, "-:")
	if !skip {
		pat, _ = strings.CutPrefix(key, "+:")
	}
	r.Skip = skip
	re, err := matchFromStart(pat)
	if err != nil {
		return r, err
	}
	r.re = re
	if bits != nil {
		if *bits != 4 && *bits != 8 {
			return r, fmt.Errorf("%d bits: tputool reads 4 and 8", *bits)
		}
		r.Bits = *bits
	}
	if group != nil {
		switch {
		case *group > 0:
			r.Group = *group
		case *group == -1:
			r.Group = -1
		default:
			return r, fmt.Errorf("group_size %d: want a positive size or -1 (one group per row)", *group)
		}
	}
	return r, nil
}

// matchFromStart compiles a module pattern of a quantization config (GPTQ's
// dynamic rules, compressed-tensors' "re:" targets), which Python applies
// with re.match: from the start of the name, not necessarily to its end.
func matchFromStart(pat string) (*regexp.Regexp, error) {
	re, err := regexp.Compile(`^(?:` + pat + `)`)
	if err != nil {
		return nil, fmt.Errorf("not a pattern tputool reads (Go's RE2 syntax, no lookarounds or backreferences): %v", err)
	}
	return re, nil
}
