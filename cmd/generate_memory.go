package cmd

import (
	"github.com/gomlx/gomlx/pkg/core/dtypes"

	"github.com/tputool/tputool/compile"
	"github.com/tputool/tputool/internal/errs"
	"github.com/tputool/tputool/internal/humanize"
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
// the process.
func checkStateFits(m lm.Model, batch, longestPrompt, maxNew int, dtype dtypes.DType, hostMemoryFn func() int64) error {
	var hostMemory int64
	if hostMemoryFn != nil {
		hostMemory = hostMemoryFn()
	}
	positions := compile.CacheBucket(compile.PromptBucket(longestPrompt) + maxNew)
	if positions < longestPrompt+maxNew { // the bucketing overflowed
		positions = longestPrompt + maxNew
	}
	need, ok := lm.StateBytes(m, batch, positions, dtype)
	spec := m.Spec()
	if !ok {
		return errs.Usagef("the KV cache for %d sequence(s) of %d positions (%d layers, %s) needs more than 8 EiB of memory; lower --max-new-tokens (the model allows %d positions)",
			batch, positions, spec.Layers, dtype, spec.MaxPositions)
	}
	if hostMemory > 0 && need > hostMemory {
		return errs.Usagef("the KV cache for %d sequence(s) of %d positions (%d layers, %s) needs %s, more than this machine's %s of memory; lower --max-new-tokens (now %d) or the number of prompts",
			batch, positions, spec.Layers, dtype, humanize.Bytes(need), humanize.Bytes(hostMemory), maxNew)
	}
	return nil
}
