package mamba2ref

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"

	"github.com/tputool/tputool/pipeline/testkit/lmckpt"
)

// LM describes a tiny Mamba2ForCausalLM (transformers' models/mamba2:
// Mamba2Model's embeddings, Mamba2Block's norm, mixer and residual,
// norm_f and lm_head) by the fields of its config.json.
type LM struct {
	Vocab, Hidden, Layers         int
	Heads, HeadDim, Groups, State int
	Eps                           float64
	// DtMax > 0 writes time_step_limit [0, DtMax]; 0 writes transformers'
	// default [0.0, Infinity] (Python's spelling, as the releases hold it).
	DtMax float64
	// ProjBias is use_bias: in_proj's and out_proj's biases.
	ProjBias bool
	Tied     bool
	Seed     uint64
}

// TinyLM is a small Mamba-2 language model: 3 layers, hidden 32, the
// mixer 4 heads of 16 (expand 2) in 2 groups of state 8, an eps that is
// not the default, untied.
func TinyLM() LM {
	return LM{Vocab: 64, Hidden: 32, Layers: 3, Heads: 4, HeadDim: 16, Groups: 2, State: 8, Eps: 1e-3, Seed: 180}
}

func (c LM) inner() int { return c.Heads * c.HeadDim }

type lmTensor struct {
	name  string
	shape []int
	init  string
}

func (c LM) tensors() []lmTensor {
	H, I := c.Hidden, c.inner()
	conv := I + 2*c.Groups*c.State
	out := []lmTensor{{"backbone.embeddings.weight", []int{c.Vocab, H}, "embed"}}
	for l := 0; l < c.Layers; l++ {
		p := fmt.Sprintf("backbone.layers.%d.", l)
		add := func(name, init string, shape ...int) { out = append(out, lmTensor{p + name, shape, init}) }
		add("norm.weight", "norm", H)
		add("mixer.in_proj.weight", "linear", I+conv+c.Heads, H)
		if c.ProjBias {
			add("mixer.in_proj.bias", "bias", I+conv+c.Heads)
		}
		add("mixer.conv1d.weight", "linear", conv, 1, 4)
		add("mixer.conv1d.bias", "bias", conv)
		add("mixer.dt_bias", "dt_bias", c.Heads)
		add("mixer.A_log", "A_log", c.Heads)
		add("mixer.D", "D", c.Heads)
		add("mixer.norm.weight", "norm", I)
		add("mixer.out_proj.weight", "linear", H, I)
		if c.ProjBias {
			add("mixer.out_proj.bias", "bias", H)
		}
	}
	out = append(out, lmTensor{"backbone.norm_f.weight", []int{H}, "norm"})
	if !c.Tied {
		out = append(out, lmTensor{"lm_head.weight", []int{c.Vocab, H}, "linear"})
	}
	return out
}

// ConfigJSON is the config.json with Mamba2Config's names.
func (c LM) ConfigJSON() map[string]any {
	j := map[string]any{
		"architectures": []string{"Mamba2ForCausalLM"}, "model_type": "mamba2",
		"vocab_size": c.Vocab, "hidden_size": c.Hidden, "num_hidden_layers": c.Layers, "num_heads": c.Heads, "head_dim": c.HeadDim,
		"n_groups": c.Groups, "state_size": c.State, "expand": float64(c.inner()) / float64(c.Hidden), "conv_kernel": 4,
		"chunk_size": 4, "layer_norm_epsilon": c.Eps, "use_bias": c.ProjBias, "use_conv_bias": true, "hidden_act": "silu",
		"residual_in_fp32": true, "rms_norm": true, "time_step_rank": "auto", "tie_word_embeddings": c.Tied,
		"bos_token_id": 0, "eos_token_id": 2, "pad_token_id": 1, "torch_dtype": "float32",
	}
	if c.DtMax > 0 {
		j["time_step_limit"] = []float64{0, c.DtMax}
	}
	return j
}

// Write writes dir/config.json (time_step_limit [0.0, Infinity] unless
// DtMax says otherwise), generation_config.json and model.safetensors
// (float32).
func (c LM) Write(dir string) error {
	r := lmckpt.NewRand(c.Seed)
	var ts []lmckpt.F32Tensor
	for _, t := range c.tensors() {
		ts = append(ts, lmckpt.F32Tensor{Name: t.name, Shape: t.shape, Values: Fill(r, t.shape, t.init, 0.5, "mamba2ref")})
	}
	if err := lmckpt.WriteF32(dir, c.ConfigJSON(), map[string]any{"bos_token_id": 0, "eos_token_id": 2, "pad_token_id": 1}, ts); err != nil {
		return err
	}
	if c.DtMax > 0 {
		return nil
	}
	// Python's json writes transformers' default (0.0, inf) so.
	path := filepath.Join(dir, "config.json")
	raw, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	end := bytes.LastIndexByte(raw, '}')
	if end < 0 {
		return fmt.Errorf("mamba2ref: %s is not an object", path)
	}
	raw = append(append(raw[:end:end], []byte(`, "time_step_limit": [0.0, Infinity]`)...), raw[end:]...)
	return os.WriteFile(path, raw, 0o644)
}

// LMModel is a description plus its weights in float64.
type LMModel struct {
	C LM
	W map[string][]float64
	// NormGroups is a mutant for the tests when above 1: the gated norm
	// per group, as mamba_ssm's kernels take it (transformers' takes it
	// over the whole width).
	NormGroups int
}

// Load reads a checkpoint Write wrote, checking every tensor's size.
func (c LM) Load(dir string) (*LMModel, error) {
	w, err := lmckpt.ReadFloat64(dir)
	if err != nil {
		return nil, err
	}
	chk := lmckpt.Weights64{M: w, Kit: "mamba2ref"}
	for _, t := range c.tensors() {
		chk.Shaped(t.name, t.shape)
	}
	if chk.Err != nil {
		return nil, chk.Err
	}
	return &LMModel{C: c, W: w}, nil
}

func (m *LMModel) get(name string) []float64 {
	v, ok := m.W[name]
	if !ok {
		panic(fmt.Sprintf("mamba2ref: no tensor %q", name))
	}
	return v
}

// Logits runs tokens and returns the logits after every token: each
// Mamba2Block x + mixer(norm(x)), then norm_f and the head.
func (m *LMModel) Logits(tokens []int) [][]float64 {
	c := m.C
	H := c.Hidden
	emb := m.get("backbone.embeddings.weight")
	x := make([][]float64, len(tokens))
	for t, id := range tokens {
		x[t] = append([]float64(nil), emb[id*H:(id+1)*H]...)
	}
	groups := max(1, m.NormGroups)
	for l := 0; l < c.Layers; l++ {
		p := fmt.Sprintf("backbone.layers.%d.", l)
		h := make([][]float64, len(x))
		for t := range x {
			h[t] = lmckpt.RMSNorm64(x[t], m.get(p+"norm.weight"), c.Eps)
		}
		mx := Mixer{
			Heads: c.Heads, HeadDim: c.HeadDim, Groups: c.Groups, State: c.State, Kernel: 4,
			InProj: m.get(p + "mixer.in_proj.weight"), Conv: m.get(p + "mixer.conv1d.weight"), ConvBias: m.get(p + "mixer.conv1d.bias"),
			DtBias: m.get(p + "mixer.dt_bias"), ALog: m.get(p + "mixer.A_log"), D: m.get(p + "mixer.D"),
			Norm: m.get(p + "mixer.norm.weight"), OutProj: m.get(p + "mixer.out_proj.weight"), NormGroups: groups, Eps: c.Eps,
			DtMax: c.DtMax,
		}
		if c.ProjBias {
			mx.InBias, mx.OutBias = m.get(p+"mixer.in_proj.bias"), m.get(p+"mixer.out_proj.bias")
		}
		y := mx.Forward(h)
		for t := range x {
			for i := range x[t] {
				x[t][i] += y[t][i]
			}
		}
	}
	head := "lm_head.weight"
	if c.Tied {
		head = "backbone.embeddings.weight"
	}
	out := make([][]float64, len(x))
	for t := range x {
		out[t] = lmckpt.Linear64(lmckpt.RMSNorm64(x[t], m.get("backbone.norm_f.weight"), c.Eps), m.get(head), nil)
	}
	return out
}
