package cmd

import (
	"fmt"
	"math"
	"strings"

	"github.com/gomlx/gomlx/pkg/core/dtypes"

	"github.com/tputool/tputool/compile"
	"github.com/tputool/tputool/internal/errs"
	"github.com/tputool/tputool/internal/humanize"
	"github.com/tputool/tputool/pipeline/diffusion/sd"
	"github.com/tputool/tputool/pipeline/lm"
)

// checkStateFits refuses a generation whose layer state (KV caches) could
// not be allocated: more bytes than int64 holds, or more than the host's
// memory (hostMemoryFn nil or 0: unknown, only the overflow check applies). Every
// executor allocates the state on the host before handing it to the
// device, so host memory bounds it on every backend. It runs before the
// allocation, with the figure in the message, so that a config with an
// absurd max_position_embeddings and a large --max-new-tokens (or
// generation_config.json max_new_tokens) fails cleanly instead of crashing
// the process. Over tp x dp devices every device's shard is built on the
// host (compile.HostStateBytes: what all of them hold whole counts once a
// device).
func checkStateFits(m lm.Model, batch, longestPrompt, maxNew, tp, dp int, dtype, kv dtypes.DType, hostMemoryFn func() int64) error {
	var hostMemory int64
	if hostMemoryFn != nil {
		hostMemory = hostMemoryFn()
	}
	positions, need, ok := stateNeed(m, batch, longestPrompt, maxNew, dtype, kv)
	spec := m.Spec()
	what := fmt.Sprintf("the KV cache for %d sequence(s) of %d positions (%d layers, %s)", batch, positions, spec.Layers, kvOr(kv, dtype))
	if ok && tp*dp > 1 {
		host, okHost := compile.HostStateBytes(m, tp, dp, batch, positions, dtype, kv)
		if host != need {
			what += fmt.Sprintf(", built on the host for %d devices", tp*dp)
		}
		need, ok = host, okHost
	}
	if spec.Encoder { // and a step's attention scores over the whole input
		need += compile.EncoderScoreBytes(spec, batch, longestPrompt)
		what = fmt.Sprintf("the attention scores of %d input(s) of %d tokens (%d heads, f32)", batch, longestPrompt, spec.Heads)
	}
	if _, isMTP := m.(lm.MTPModel); isMTP && ok {
		head, okHead := mtpStateNeed(m, longestPrompt+maxNew, dtype, kv)
		need += head
		ok = okHead && need >= head
		what += " and the multi-token-prediction head's"
	}
	lower := fmt.Sprintf("lower --max-new-tokens (now %d) or the number of prompts%s", maxNew, narrowerKV(kv))
	if !ok {
		lower = fmt.Sprintf("lower --max-new-tokens (the model allows %d positions)", spec.MaxPositions)
	}
	return checkHostMemory(what, need, !ok, hostMemory, lower)
}

// checkEmbedFits refuses embedding or scoring rows inputs of at most
// longest tokens together (embed, rerank) when the host cannot hold
// their layer state (a decoder's KV caches) and a step's attention
// scores (compile.EmbedScoreBytes).
func checkEmbedFits(m lm.Model, rows, longest int, dtype, kv dtypes.DType, hostMemoryFn func() int64) error {
	spec := m.Spec()
	return checkPassFits(m, rows, longest, dtype, kv, hostMemoryFn, compile.EmbedScoreBytes(spec, rows, longest),
		fmt.Sprintf("%d input(s) of %d tokens run together (%d layers, %d heads: KV caches in %s, attention scores in f32)", rows, longest, spec.Layers, spec.Heads, kvOr(kv, dtype)),
		"shorten the inputs or lower their number")
}

// checkLogprobsFits refuses scoring rows windows of at most longest
// tokens together (perplexity) when the host cannot hold their layer
// state and a step's working memory (compile.PromptLogprobsBytes:
// attention scores, hidden states, the scoring head's logits).
func checkLogprobsFits(m lm.Model, rows, longest int, dtype, kv dtypes.DType, hostMemoryFn func() int64) error {
	spec := m.Spec()
	return checkPassFits(m, rows, longest, dtype, kv, hostMemoryFn, compile.PromptLogprobsBytes(spec, rows, longest),
		fmt.Sprintf("%d window(s) of %d tokens run together (%d layers, %d heads: KV caches in %s, attention scores, hidden states and logits in f32)", rows, longest, spec.Layers, spec.Heads, kvOr(kv, dtype)),
		"lower --context or --batch")
}

// checkPassFits refuses one pass of rows inputs of at most longest
// tokens (no generation) when the host cannot hold their layer state
// and the pass's working memory, work bytes; what describes the pass
// and lower says what to change.
func checkPassFits(m lm.Model, rows, longest int, dtype, kv dtypes.DType, hostMemoryFn func() int64, work int64, what, lower string) error {
	var hostMemory int64
	if hostMemoryFn != nil {
		hostMemory = hostMemoryFn()
	}
	_, need, ok := stateNeed(m, rows, longest, 0, dtype, kv)
	return checkHostMemory(what, need+work, !ok, hostMemory, lower)
}

// stateNeed is the most layer state a generation allocates: batch rows of
// positions slots (the cache bucket of the longest prompt's bucket plus
// maxNew), need bytes; ok is false when the figure overflows.
func stateNeed(m lm.Model, batch, longestPrompt, maxNew int, dtype, kv dtypes.DType) (positions int, need int64, ok bool) {
	positions = compile.CacheBucket(compile.PromptBucket(longestPrompt) + maxNew)
	if positions < longestPrompt+maxNew { // the bucketing overflowed
		positions = longestPrompt + maxNew
	}
	need, ok = lm.StateBytes(m, batch, positions, dtype, kv)
	return positions, need, ok
}

// mtpStateNeed is the KV cache of m's multi-token-prediction head where
// m was read with one (lm.MTPModel; 0 otherwise): the head drafts for one
// sequence, of up to positions positions and a draft of up to
// maxSpeculate tokens (at most the model's positions), its cache
// growing by compile.CacheBucket; ok is false when the figure overflows.
func mtpStateNeed(m lm.Model, positions int, dtype, kv dtypes.DType) (need int64, ok bool) {
	n := positions + maxSpeculate
	if mp := m.Spec().MaxPositions; mp > 0 && n > mp {
		n = mp
	}
	if n < positions { // overflowed
		return 0, false
	}
	return lm.MTPStateBytes(m, compile.CacheBucket(n), dtype, kv)
}

// kvHeld names how the KV caches are held, for -v.
func kvHeld(kv, dtype dtypes.DType) string {
	if kv == dtypes.Int8 {
		return "int8 with an f32 scale a slot and head"
	}
	return strings.ToLower(kvOr(kv, dtype).String())
}

// narrowerKV suggests int8 KV caches, where they are not int8 already,
// to a lower-this-or-that hint.
func narrowerKV(kv dtypes.DType) string {
	if kv == dtypes.Int8 {
		return ""
	}
	return ", or hold the caches in int8 (--kv-cache-dtype int8: about a quarter of f32's memory, half of bf16's)"
}

// checkDiffusionFits refuses a request whose largest activation alone is
// more than the host's memory (hostMemoryFn nil or 0: unknown, no check),
// naming the tensor and its size, before anything is allocated. It applies
// to backends that compute in host memory, which the kernel's OOM killer
// would end without a message; an XLA device reports its own
// out-of-memory error.
func checkDiffusionFits(largest sd.Buffer, req sd.Request, hostMemoryFn func() int64) error {
	if hostMemoryFn == nil {
		return nil
	}
	what := fmt.Sprintf("--size %dx%d --batch %d: %s alone", req.Width, req.Height, req.Batch, largest.What)
	overflow := largest.Bytes >= math.MaxInt64
	return checkHostMemory(what, int64(min(largest.Bytes, math.MaxInt64)), overflow, hostMemoryFn(), "lower --size or --batch")
}

// checkHostMemory is the commands' one memory-fit check, run before a
// large allocation on a backend that computes in host memory: need bytes
// (overflow: more than an int64 holds) for what must fit in hostMemory
// (0: unknown, then only an overflow is refused). The error says what
// needs how much, and lower says how to ask for less.
func checkHostMemory(what string, need int64, overflow bool, hostMemory int64, lower string) error {
	switch {
	case overflow:
		return errs.Usagef("%s needs more than 8 EiB of memory; %s", what, lower)
	case hostMemory > 0 && need > hostMemory:
		return errs.Usagef("%s needs %s, more than this machine's %s of memory; %s", what, humanize.Bytes(need), humanize.Bytes(hostMemory), lower)
	}
	return nil
}

// kvOr is the KV caches' dtype: kv when set, else the compute dtype.
func kvOr(kv, dtype dtypes.DType) dtypes.DType {
	if kv == dtypes.InvalidDType {
		return dtype
	}
	return kv
}
