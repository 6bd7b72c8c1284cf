package lmckpt

import (
	"fmt"
	"regexp"

	"github.com/tputool/tputool/loader/safetensors"
)

// mtpOutput are an MTP head's layer output projections (attention's
// o_proj, the MLP's or experts' down_proj).
var mtpOutput = regexp.MustCompile(`^mtp\.layers\.\d+\..*\.(o_proj|down_proj)(\.weight)?$`)

// EchoMTP rewrites in place the multi-token-prediction head (Qwen3.5's
// mtp.*) among a checkpoint's tensors ts so that it predicts what the
// model predicts once every decoder layer's output projection is zero
// (scripts/draft-pair -layers 0 -scale 0): there the model's final hidden
// state at a token is its embedding normed, and the head is made to give
// the next token's embedding normed the same way (fc passes the
// embedding half through, pre_fc_norm_embedding is 1, its layer adds
// nothing, and mtp.norm is the model's final norm), so its drafts are
// the model's picks: a benchmark's and a test's head that is always
// right, where no trained one can be downloaded.
func EchoMTP(ts []safetensors.Tensor) error {
	var final []float32
	for _, t := range ts {
		if t.Name == "model.norm.weight" || t.Name == "model.language_model.norm.weight" {
			final = decode(t)
		}
	}
	if final == nil {
		return fmt.Errorf("no final norm (model.norm.weight or model.language_model.norm.weight)")
	}
	fc := false
	for i, t := range ts {
		v := make([]float32, numElements(t.Shape))
		switch {
		case t.Name == "mtp.fc.weight":
			h := t.Shape[0]
			if len(t.Shape) != 2 || t.Shape[1] != 2*h {
				return fmt.Errorf("mtp.fc.weight %v: want [H, 2H]", t.Shape)
			}
			for r := range h {
				v[r*2*h+r] = 1
			}
			fc = true
		case t.Name == "mtp.norm.weight":
			if len(v) != len(final) {
				return fmt.Errorf("mtp.norm.weight %v and the final norm's %d values", t.Shape, len(final))
			}
			copy(v, final)
		case t.Name == "mtp.pre_fc_norm_embedding.weight", mtpOutput.MatchString(t.Name):
			// zero: a (1+w) norm of 1, or an output that adds nothing
		default:
			continue
		}
		nt, err := safetensors.Float32Tensor(t.Name, t.DType, t.Shape, v)
		if err != nil {
			return err
		}
		ts[i] = nt
	}
	if !fc {
		return fmt.Errorf("no multi-token-prediction head (mtp.fc.weight)")
	}
	return nil
}

func decode(t safetensors.Tensor) []float32 {
	v := make([]float32, numElements(t.Shape))
	safetensors.DecodeFloat32(v, t.DType, t.Data)
	return v
}

func numElements(shape []int) int {
	n := 1
	for _, d := range shape {
		n *= d
	}
	return n
}
