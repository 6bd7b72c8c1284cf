package llama

import "strings"

// TransformerNames reads the tensors of a checkpoint stored under
// GPT-2-style module names as Llama's: under "transformer." (with
// Optional, with that prefix or without it, as GPT2Model's and
// BloomModel's own uploads store them), each of Top's stored names
// becomes its Llama name, a name ending in "." standing for every name it
// begins, and the blocks under "h." become model.layers with Blocks'
// replacements. Any other name stays as stored. GPT-2, GPT-J, GPT-Neo,
// BLOOM, Falcon and EXAONE read their checkpoints so.
type TransformerNames struct {
	Optional bool
	Top      [][2]string
	Blocks   *strings.Replacer
}

// Rename is the Llama name of stored (an lm.Renamer's RenameWeight).
func (n *TransformerNames) Rename(stored string) string {
	name, ok := strings.CutPrefix(stored, "transformer.")
	if !ok && !n.Optional {
		return stored
	}
	for _, t := range n.Top {
		if !strings.HasSuffix(t[0], ".") {
			if name == t[0] {
				return t[1]
			}
		} else if rest, ok := strings.CutPrefix(name, t[0]); ok {
			return t[1] + rest
		}
	}
	if rest, ok := strings.CutPrefix(name, "h."); ok {
		return n.Blocks.Replace("model.layers." + rest)
	}
	return stored
}

// FusedBlockNames are the block modules of BLOOM's and Falcon's
// checkpoints as Llama's: self_attention.query_key_value and dense are
// self_attn's qkv_proj and o_proj, the MLP's dense_h_to_4h and
// dense_4h_to_h its up_proj and down_proj; the norms keep their names.
var FusedBlockNames = strings.NewReplacer(
	".self_attention.query_key_value.", ".self_attn.qkv_proj.",
	".self_attention.dense.", ".self_attn.o_proj.",
	".mlp.dense_h_to_4h.", ".mlp.up_proj.",
	".mlp.dense_4h_to_h.", ".mlp.down_proj.",
)
