package lm

import (
	"regexp"
	"sort"
	"strings"
)

// Skipper is implemented by models whose checkpoints hold tensors the model
// deliberately does not read: the vision tower of a multimodal checkpoint
// run as a text-only model, or a multi-token-prediction head. The strict
// loader accepts such tensors instead of reporting them as unused, and
// counts them per reason so that inspect can state the text-only path.
type Skipper interface {
	// SkipWeight reports whether the checkpoint tensor name is skipped, with
	// a short reason shared by every tensor of that group ("vision tower
	// (model.visual.*): text-only model").
	SkipWeight(name string) (reason string, skip bool)
}

// SkipPrefixed is a Skipper's answer for the tensors under one of
// prefixes (a multimodal checkpoint's vision tower and projector): reason
// and true for those, "" and false for the others.
func SkipPrefixed(name, reason string, prefixes ...string) (string, bool) {
	for _, p := range prefixes {
		if strings.HasPrefix(name, p) {
			return reason, true
		}
	}
	return "", false
}

// SkipMatched is a Skipper's answer for the tensors whose names re
// matches: reason and true for those, "" and false for the others.
func SkipMatched(name, reason string, re *regexp.Regexp) (string, bool) {
	if re.MatchString(name) {
		return reason, true
	}
	return "", false
}

// MaskBuffersReason is the reason of the Skippers of GPT-2, GPT-J and
// GPT-Neo for the causal-mask buffers (attn.bias, attn.masked_bias) their
// checkpoints saved with the weights; inspect counts the tensors skipped
// for it as buffers.
const MaskBuffersReason = "the attention's causal-mask buffers, which transformers recomputes"

// SkippedGroup counts the checkpoint tensors skipped for one reason.
type SkippedGroup struct {
	Reason  string `json:"reason"`
	Tensors int    `json:"tensors"`
	Bytes   int64  `json:"bytes"`
}

// SkipReason asks the model whether it skips a checkpoint tensor, and why.
func SkipReason(m Model, name string) (string, bool) {
	if s, ok := m.(Skipper); ok {
		return s.SkipWeight(name)
	}
	return "", false
}

// Skipped lists the checkpoint tensors the model skipped, grouped by
// reason and sorted by reason.
func (l *Loaded) Skipped() []SkippedGroup {
	by := map[string]*SkippedGroup{}
	for _, name := range l.ckpt.Names() {
		reason, ok := SkipReason(l.Model, name)
		if !ok {
			continue
		}
		g := by[reason]
		if g == nil {
			g = &SkippedGroup{Reason: reason}
			by[reason] = g
		}
		g.Tensors++
		if info, ok := l.ckpt.Info(name); ok {
			g.Bytes += info.NumBytes()
		}
	}
	out := make([]SkippedGroup, 0, len(by))
	for _, g := range by {
		out = append(out, *g)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Reason < out[j].Reason })
	return out
}
