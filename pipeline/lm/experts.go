package lm

import "fmt"

// ExpertNames are the names of a routed expert's three SwiGLU matrices
// under its prefix PREFIX.E. in a checkpoint that holds the experts one by
// one: the gate and up projections [inter, hidden], whose act(gate)·up
// the down projection [hidden, inter] maps back.
type ExpertNames struct {
	Gate, Up, Down string
	// DownTransposed: the checkpoint stores each expert's down projection
	// transposed, [inter, hidden] (DBRX's w2, which the model splits
	// expert by expert: Splitter); the loader transposes it
	// (WeightSpec.Transposed).
	DownTransposed bool
}

var (
	// QwenExperts are the names of Qwen's MoE checkpoints (and of most
	// since): gate_proj, up_proj and down_proj.
	QwenExperts = ExpertNames{Gate: "gate_proj.weight", Up: "up_proj.weight", Down: "down_proj.weight"}
	// MixtralExperts are Mixtral's (MixtralBlockSparseTop2MLP): w1 the
	// gate, w3 the up and w2 the down projection.
	MixtralExperts = ExpertNames{Gate: "w1.weight", Up: "w3.weight", Down: "w2.weight"}
)

// ExpertWeights are routed expert e's tensors as checkpoints that hold the
// experts one by one name them: PREFIX.E.{gate,up,down}_proj.weight, the
// SwiGLU projections [inter, hidden], [inter, hidden] and [hidden, inter]
// (prefix is the layer's "….mlp.experts"). Under --tp they split as a dense
// MLP's.
func ExpertWeights(prefix string, e, inter, hidden int) []WeightSpec {
	return QwenExperts.Weights(prefix, e, inter, hidden)
}

// Weights are expert e's tensors under prefix named as n names them, as
// ExpertWeights lists Qwen's.
func (n ExpertNames) Weights(prefix string, e, inter, hidden int) []WeightSpec {
	p := fmt.Sprintf("%s.%d.", prefix, e)
	return []WeightSpec{
		{Name: p + n.Gate, Shape: []int{inter, hidden}, Matmul: true, TP: Column},
		{Name: p + n.Up, Shape: []int{inter, hidden}, Matmul: true, TP: Column},
		{Name: p + n.Down, Shape: []int{hidden, inter}, Matmul: true, TP: Row, Transposed: n.DownTransposed},
	}
}

// StackedExperts are a layer's routed experts as transformers v5 stores
// them (Qwen3MoeExperts, Qwen3_5MoeExperts, MixtralExperts and their kin):
// PREFIX.gate_up_proj [E, 2·inter, hidden], each expert's gate rows then
// its up rows, and PREFIX.down_proj [E, hidden, inter], with no .weight
// suffix. Each stack lists its parts (ExpertWeights, in expert order), so
// a checkpoint holding the experts one by one is assembled into the stacks
// at load. Under --tp every expert splits as a dense MLP does (gate_up by
// its output rows, down by its inputs).
func StackedExperts(prefix string, experts, inter, hidden int) []WeightSpec {
	return QwenExperts.Stacked(prefix, experts, inter, hidden)
}

// Stacked are StackedExperts whose parts n names.
func (n ExpertNames) Stacked(prefix string, experts, inter, hidden int) []WeightSpec {
	gateUp := WeightSpec{Name: prefix + ".gate_up_proj", Shape: []int{experts, 2 * inter, hidden}, Matmul: true, TP: Column}
	down := WeightSpec{Name: prefix + ".down_proj", Shape: []int{experts, hidden, inter}, Matmul: true, TP: Row}
	for e := 0; e < experts; e++ {
		ew := n.Weights(prefix, e, inter, hidden)
		gateUp.Parts = append(gateUp.Parts, ew[0], ew[1])
		down.Parts = append(down.Parts, ew[2])
	}
	return []WeightSpec{gateUp, down}
}

// SwiGLUWeights are an ungated SwiGLU MLP's tensors under prefix:
// PREFIX.{gate,up,down}_proj.weight, [inter, hidden], [inter, hidden] and
// [hidden, inter], split under --tp as a dense MLP's (DeepSeek-V3's and
// AFMoE's shared experts, prefix "….mlp.shared_experts").
func SwiGLUWeights(prefix string, inter, hidden int) []WeightSpec {
	return []WeightSpec{
		{Name: prefix + ".gate_proj.weight", Shape: []int{inter, hidden}, Matmul: true, TP: Column},
		{Name: prefix + ".up_proj.weight", Shape: []int{inter, hidden}, Matmul: true, TP: Column},
		{Name: prefix + ".down_proj.weight", Shape: []int{hidden, inter}, Matmul: true, TP: Row},
	}
}

// SharedExpertWeights are a Qwen-style shared expert's tensors under
// prefix (the layer's "….mlp"): PREFIX.shared_expert.{gate,up,down}_proj.weight,
// a SwiGLU MLP of width inter split under --tp as a dense MLP, and its
// gate PREFIX.shared_expert_gate.weight [1, hidden], replicated.
func SharedExpertWeights(prefix string, inter, hidden int) []WeightSpec {
	p := prefix + ".shared_expert"
	return []WeightSpec{
		{Name: p + ".gate_proj.weight", Shape: []int{inter, hidden}, Matmul: true, TP: Column},
		{Name: p + ".up_proj.weight", Shape: []int{inter, hidden}, Matmul: true, TP: Column},
		{Name: p + ".down_proj.weight", Shape: []int{hidden, inter}, Matmul: true, TP: Row},
		{Name: p + "_gate.weight", Shape: []int{1, hidden}, Matmul: true, TP: Replicated},
	}
}

// SparseLayers reads mlp_only_layers with a decoder_sparse_step (step,
// checked positive by the caller) as Qwen2-MoE, Qwen3-MoE and Qwen3-Next
// place their sparse blocks: layer i of layers is sparse where i is not
// in mlpOnly and i+1 is a multiple of step; the others have a dense MLP.
// An entry of mlpOnly outside the layers is an error naming where.
func SparseLayers(where string, step int, mlpOnly []int, layers int) ([]bool, error) {
	dense := make(map[int]bool, len(mlpOnly))
	for _, l := range mlpOnly {
		if l < 0 || l >= layers {
			return nil, fmt.Errorf("%s: mlp_only_layers holds %d, outside [0, %d)", where, l, layers)
		}
		dense[l] = true
	}
	sparse := make([]bool, layers)
	for i := range sparse {
		sparse[i] = !dense[i] && (i+1)%step == 0
	}
	return sparse, nil
}
