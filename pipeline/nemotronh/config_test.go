package nemotronh_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tputool/tputool/internal/errs"
	"github.com/tputool/tputool/pipeline/lm"
	"github.com/tputool/tputool/pipeline/nemotronh"
	"github.com/tputool/tputool/pipeline/nn"
	"github.com/tputool/tputool/pipeline/testkit/lmckpt"
)

// TestNanoConfig reads Nemotron 3 Nano 30B-A3B's config.json: 52 layers
// from hybrid_override_pattern (23 Mamba-2, 23 MoE, 6 attention), 128
// experts of 1856 (top 6) and a shared expert of 3712, Mamba-2 of 64
// heads of 64 in 8 groups of state 128.
func TestNanoConfig(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("..", "..", "testdata", "configs", "nemotron_3_nano_30b_a3b", "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	m, err := lm.New(lmckpt.ParseConfig(t, string(raw)))
	if err != nil {
		t.Fatal(err)
	}
	o := m.(*nemotronh.Model).Options()
	count := map[string]int{}
	for _, k := range o.Spec.LayerKinds {
		count[k]++
	}
	if count[nn.KindMamba] != 23 || count[nemotronh.KindMoE] != 23 || count[lm.KindFull] != 6 || o.Spec.Layers != 52 {
		t.Errorf("layer kinds %v", count)
	}
	if o.Mamba != (nn.Mamba2Dims{Heads: 64, HeadDim: 64, State: 128, Groups: 8, ConvKernel: 4}) || o.Router.Experts != 128 || o.Router.TopK != 6 ||
		o.Router.Scale != 2.5 || !o.Router.NormTopK || o.MoEIntermediate != 1856 || o.Shared != 3712 || o.Latent != 0 || o.Spec.HeadDim != 128 || o.Spec.KVHeads != 2 {
		t.Errorf("options %+v", o)
	}
	var all, active, embed int64
	for _, w := range lm.Weights(m) {
		k := int64(1)
		for _, d := range w.Shape {
			k *= int64(d)
		}
		all += k
		if strings.Contains(w.Name, ".experts.") {
			k = k * int64(o.Router.TopK) / int64(o.Router.Experts)
		}
		if w.Name == "backbone.embeddings.weight" {
			embed = k
		}
		active += k
	}
	t.Logf("%.4gB parameters, %.4gB active (%.4gB without the input embedding)", float64(all)/1e9, float64(active)/1e9, float64(active-embed)/1e9)
	if b := float64(all) / 1e9; b < 31.4 || b > 31.8 {
		t.Errorf("%.4gB parameters, want about 31.6B", b)
	}
	if b := float64(active-embed) / 1e9; b < 3.0 || b > 3.4 {
		t.Errorf("%.4gB active without the input embedding, want about 3.2B", b)
	}
	if st := m.LayerState(1, 1, 64); len(st) != 0 {
		t.Errorf("an MoE layer's state %+v, want none", st)
	}
}

// TestConfigForms reads the layer types from each form NemotronHConfig
// takes: the pattern, layers_block_type with transformers' names or the
// older ones, and the class's default four layers.
func TestConfigForms(t *testing.T) {
	base := `"architectures": ["NemotronHForCausalLM"], "hidden_size": 32, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 8, "vocab_size": 64, "intermediate_size": 16, "mamba_num_heads": 4, "mamba_head_dim": 8, "n_groups": 2, "ssm_state_size": 4, "n_routed_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 8, "moe_shared_expert_intermediate_size": 8`
	want := []string{nn.KindMamba, nemotronh.KindMoE, lm.KindFull, nemotronh.KindMLP}
	for _, form := range []string{
		`"hybrid_override_pattern": "ME*-"`,
		`"layers_block_type": ["linear_attention", "moe", "full_attention", "mlp"]`,
		`"layers_block_type": ["mamba", "moe", "attention", "mlp"]`,
		`"num_hidden_layers": 4`,
	} {
		m, err := lm.New(lmckpt.ParseConfig(t, "{"+base+", "+form+"}"))
		if err != nil {
			t.Fatalf("%s: %v", form, err)
		}
		if got := m.Spec().LayerKinds; strings.Join(got, " ") != strings.Join(want, " ") {
			t.Errorf("%s: kinds %v, want %v", form, got, want)
		}
	}
	// The list wins over the pattern, and the older spellings over the
	// newer, as NemotronHConfig reads them.
	m, err := lm.New(lmckpt.ParseConfig(t, "{"+base+`, "layers_block_type": ["mamba", "mlp"], "hybrid_override_pattern": "E*", "mamba_n_groups": 1, "n_groups": 2}`))
	if err != nil {
		t.Fatal(err)
	}
	if o := m.(*nemotronh.Model).Options(); strings.Join(o.Spec.LayerKinds, " ") != nn.KindMamba+" "+nemotronh.KindMLP || o.Mamba.Groups != 1 {
		t.Errorf("kinds %v, groups %d; want the list's, and mamba_n_groups", o.Spec.LayerKinds, o.Mamba.Groups)
	}
	if reason, ok := m.(lm.Skipper).SkipWeight("mtp.layers.0.mixer.q_proj.weight"); !ok || !strings.Contains(reason, "multi-token") {
		t.Errorf("mtp.*: skipped %v (%q), want skipped", ok, reason)
	}
	for _, c := range []struct {
		extra, want string
		unsupported bool
	}{
		{`"hybrid_override_pattern": "M*X"`, "hybrid_override_pattern[2]", true},
		{`"layers_block_type": ["mamba", "sliding_attention"]`, "layers_block_type[1]", true},
		{`"hybrid_override_pattern": "M*", "num_hidden_layers": 3`, "num_hidden_layers 3", false},
		{`"hybrid_override_pattern": "M*", "mlp_hidden_act": "silu"`, "mlp_hidden_act", true},
		{`"hybrid_override_pattern": "M*", "sliding_window": 128`, "sliding_window", true},
		{`"hybrid_override_pattern": "M*", "n_groups": 3`, "n_groups 3 must divide mamba_num_heads", false},
		{`"hybrid_override_pattern": "E", "num_experts_per_tok": 5`, "num_experts_per_tok 5", false},
		{`"hybrid_override_pattern": "E", "n_group": 3`, "n_group 3", false},
		{`"hybrid_override_pattern": "E", "moe_latent_size": 8, "mlp_bias": true`, "moe_latent_size", true},
		{`"hybrid_override_pattern": "M*", "residual_in_fp32": true`, "residual_in_fp32", true},
	} {
		_, err := lm.New(lmckpt.ParseConfig(t, "{"+base+", "+c.extra+"}"))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want one naming %q", c.extra, err, c.want)
			continue
		}
		if got := errors.Is(err, errs.ErrUnsupported); got != c.unsupported {
			t.Errorf("%s: unsupported %v, want %v (%v)", c.extra, got, c.unsupported, err)
		}
	}
}
