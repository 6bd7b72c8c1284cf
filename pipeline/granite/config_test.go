package granite_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/tputool/tputool/pipeline/granite"
	"github.com/tputool/tputool/pipeline/lm"
	"github.com/tputool/tputool/pipeline/testkit/lmckpt"
)

// TestConfig reads granite-3.1-3b-a800m's sizes (3.3B parameters, 40
// experts of 512, top 8, the four multipliers), granite-3.1-8b's (8.2B,
// dense), the classes' defaults (every multiplier 1), GraniteMoe's names
// renamed to qwen3moe's, and refuses bad values naming the field.
func TestConfig(t *testing.T) {
	moe, err := lm.New(lmckpt.ParseConfig(t, `{"architectures": ["GraniteMoeForCausalLM"], "hidden_size": 1536, "num_hidden_layers": 32,
		"num_attention_heads": 24, "num_key_value_heads": 8, "intermediate_size": 512, "num_local_experts": 40, "num_experts_per_tok": 8,
		"vocab_size": 49155, "tie_word_embeddings": true, "embedding_multiplier": 12, "attention_multiplier": 0.015625,
		"residual_multiplier": 0.22, "logits_scaling": 6, "bos_token_id": 0, "eos_token_id": 0}`))
	if err != nil {
		t.Fatal(err)
	}
	if n := lmckpt.Params(moe); n < 3.25e9 || n > 3.35e9 {
		t.Errorf("granite-3.1-3b-a800m: %d parameters, want 3.3B", n)
	}
	o := moe.(*granite.MoEModel).Options()
	if o.EmbedScale != 12 || o.AttnScale != 0.015625 || o.ResidualScale != 0.22 || o.LogitsDivisor != 6 || o.Experts != 40 || o.TopK != 8 ||
		!o.NormTopK || o.MoEIntermediate != 512 || !o.Sparse[0] || o.Spec.BOS != 0 || fmt.Sprint(o.Spec.EOS) != "[0]" {
		t.Errorf("granite-3.1-3b-a800m options %+v", o)
	}
	r := moe.(lm.Renamer)
	for stored, want := range map[string]string{
		"model.layers.3.block_sparse_moe.router.layer.weight":  "model.layers.3.block_sparse_moe.gate.weight",
		"model.layers.3.block_sparse_moe.input_linear.weight":  "model.layers.3.block_sparse_moe.experts.gate_up_proj",
		"model.layers.3.block_sparse_moe.output_linear.weight": "model.layers.3.block_sparse_moe.experts.down_proj",
		"model.layers.3.self_attn.q_proj.weight":               "model.layers.3.self_attn.q_proj.weight",
	} {
		if got := r.RenameWeight(stored); got != want {
			t.Errorf("%s read as %s, want %s", stored, got, want)
		}
	}
	dense, err := lm.New(lmckpt.ParseConfig(t, `{"architectures": ["GraniteForCausalLM"], "hidden_size": 4096, "num_hidden_layers": 40,
		"num_attention_heads": 32, "num_key_value_heads": 8, "intermediate_size": 12800, "vocab_size": 49155, "tie_word_embeddings": true,
		"embedding_multiplier": 12, "attention_multiplier": 0.0078125, "residual_multiplier": 0.22, "logits_scaling": 16}`))
	if err != nil {
		t.Fatal(err)
	}
	if n := lmckpt.Params(dense); n/1e8 != 81 {
		t.Errorf("granite-3.1-8b: %d parameters, want 8.1B", n)
	}
	d, _, err := granite.Resolve(lmckpt.ParseConfig(t, `{"architectures": ["GraniteForCausalLM"]}`))
	if err != nil {
		t.Fatal(err)
	}
	if d.EmbedScale != 1 || d.AttnScale != 1 || d.ResidualScale != 1 || d.LogitsDivisor != 1 || d.Spec.Hidden != 4096 || d.Spec.BOS != 1 ||
		fmt.Sprint(d.Spec.EOS) != "[2]" || d.Spec.TieEmbeddings {
		t.Errorf("GraniteConfig's defaults: %+v", d)
	}
	base := `"architectures": ["GraniteMoeForCausalLM"], "num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4`
	for _, bad := range []struct{ js, want string }{
		{`"embedding_multiplier": 0`, "embedding_multiplier must be positive"},
		{`"logits_scaling": -1`, "logits_scaling must be positive"},
		{`"num_experts_per_tok": 9`, "num_experts_per_tok 9"},
		{`"mlp_bias": true`, "mlp_bias is true"},
		{`"layer_types": ["full_attention", "sliding_attention"], "sliding_window": 4`, "attend in full"},
	} {
		_, _, err := granite.Resolve(lmckpt.ParseConfig(t, fmt.Sprintf("{%s, %s}", base, bad.js)))
		if err == nil || !strings.Contains(err.Error(), bad.want) || !strings.Contains(err.Error(), "config.json") {
			t.Errorf("%s: error %v, want one naming config.json and %q", bad.js, err, bad.want)
		}
	}
}

// TestMoeSharedConfig reads GraniteMoeSharedConfig's defaults
// (LlamaConfig's sizes, 8 experts of 11008, top 2, no shared MLP:
// 37,039,116,288 parameters, none named shared_mlp), a shared MLP's
// weights where shared_intermediate_size is set, every layer rotating
// whatever position_embedding_type says (the class hard-codes "rope"),
// and refuses bad values naming the field.
func TestMoeSharedConfig(t *testing.T) {
	m, err := lm.New(lmckpt.ParseConfig(t, `{"architectures": ["GraniteMoeSharedForCausalLM"]}`))
	if err != nil {
		t.Fatal(err)
	}
	if n := lmckpt.Params(m); n != 37_039_116_288 {
		t.Errorf("GraniteMoeSharedConfig's defaults: %d parameters, want 37,039,116,288", n)
	}
	h := m.(*granite.HybridModel)
	o := h.HybridOptions()
	if o.Experts != 8 || o.TopK != 2 || o.Shared != 0 || len(o.NoRope) != 0 || o.Spec.BOS != 1 || fmt.Sprint(o.Spec.EOS) != "[2]" {
		t.Errorf("defaults: %+v", o)
	}
	for _, w := range lm.Weights(m) {
		if strings.Contains(w.Name, "shared_mlp") {
			t.Errorf("weight %s without shared_intermediate_size", w.Name)
		}
	}
	s, err := granite.ResolveShared(lmckpt.ParseConfig(t, `{"architectures": ["GraniteMoeSharedForCausalLM"], "num_hidden_layers": 2, "hidden_size": 64,
		"num_attention_heads": 4, "intermediate_size": 32, "shared_intermediate_size": 48, "position_embedding_type": "nope",
		"residual_multiplier": 0.5}`))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{"model.layers.1.shared_mlp.input_linear.weight": true, "model.layers.1.shared_mlp.output_linear.weight": true}
	for _, w := range granite.NewHybridModel(s).LayerWeights(1) {
		if want[w.Name] {
			delete(want, w.Name)
			if w.Name == "model.layers.1.shared_mlp.input_linear.weight" && fmt.Sprint(w.Shape) != "[96 64]" {
				t.Errorf("%s: shape %v, want [96 64]", w.Name, w.Shape)
			}
		}
	}
	if len(want) > 0 || len(s.NoRope) != 0 || s.ResidualScale != 0.5 {
		t.Errorf("shared_intermediate_size 48: missing %v, NoRope %v, residual %g", want, s.NoRope, s.ResidualScale)
	}
	base := `"architectures": ["GraniteMoeSharedForCausalLM"], "num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4`
	for _, bad := range []struct{ js, want string }{
		{`"shared_intermediate_size": -1`, "shared_intermediate_size must not be negative"},
		{`"num_local_experts": 0`, "num_local_experts 0"},
		{`"num_experts_per_tok": 9`, "num_experts_per_tok 9"},
		{`"mlp_bias": true`, "mlp_bias is true"},
		{`"attention_multiplier": 0`, "attention_multiplier must be positive"},
		{`"layer_types": ["full_attention", "sliding_attention"], "sliding_window": 4`, "attend in full"},
	} {
		_, err := granite.ResolveShared(lmckpt.ParseConfig(t, fmt.Sprintf("{%s, %s}", base, bad.js)))
		if err == nil || !strings.Contains(err.Error(), bad.want) || !strings.Contains(err.Error(), "config.json") {
			t.Errorf("%s: error %v, want one naming config.json and %q", bad.js, err, bad.want)
		}
	}
}
