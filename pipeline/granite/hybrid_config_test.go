package granite_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tputool/tputool/internal/errs"
	"github.com/tputool/tputool/pipeline/granite"
	"github.com/tputool/tputool/pipeline/lm"
	"github.com/tputool/tputool/pipeline/nn"
	"github.com/tputool/tputool/pipeline/testkit/lmckpt"
)

// TestHybridTinyConfig reads granite-4.0-h-tiny's config.json: 36
// Mamba-2 layers and 4 attention layers without a positional embedding,
// 64 experts of 512 (top 6) beside a shared MLP of 1024 in every layer.
// Its sizes give the published 7B parameters and 1B active.
func TestHybridTinyConfig(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("..", "..", "testdata", "configs", "granite_4_0_h_tiny", "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	m, err := lm.New(lmckpt.ParseConfig(t, string(raw)))
	if err != nil {
		t.Fatal(err)
	}
	o := m.(*granite.HybridModel).HybridOptions()
	if o.Mamba != (nn.Mamba2Dims{Heads: 48, HeadDim: 64, State: 128, Groups: 1, ConvKernel: 4}) || o.Experts != 64 || o.TopK != 6 || o.Shared != 1024 || !o.ConvBias || o.ProjBias {
		t.Errorf("options %+v", o)
	}
	var attn []int
	for i, k := range o.Spec.LayerKinds {
		if k == lm.KindFull {
			attn = append(attn, i)
		}
		if !o.NoRope[i] {
			t.Errorf("layer %d rotates; position_embedding_type is nope", i)
		}
	}
	if len(attn) != 4 || attn[0] != 5 || attn[3] != 35 {
		t.Errorf("attention layers %v, want [5 15 25 35]", attn)
	}
	var all, active int64
	for _, w := range lm.Weights(m) {
		k := int64(1)
		for _, d := range w.Shape {
			k *= int64(d)
		}
		all += k
		if strings.Contains(w.Name, ".experts.") {
			k = k * int64(o.TopK) / int64(o.Experts)
		}
		active += k
	}
	if b := float64(all) / 1e9; b < 6.8 || b > 7.1 {
		t.Errorf("%.4gB parameters, want about 6.9B", b)
	}
	if b := float64(active) / 1e9; b < 1.0 || b > 1.5 {
		t.Errorf("%.4gB active parameters, want about 1B", b)
	}
	t.Logf("%.4gB parameters, %.4gB active", float64(all)/1e9, float64(active)/1e9)
	st := m.LayerState(0, 1, 4096)
	if len(st) != 2 || st[0].Shape[2] != 48*64+2*128 || st[1].Shape[3] != 128 || st[1].SlotAxis != lm.NoSlots {
		t.Errorf("a Mamba layer's state %+v", st)
	}
}

// TestHybridConfigErrors checks that configs the model cannot run are
// refused with the field named: unknown layer types and positional
// embeddings as unsupported, sizes that do not fit together as errors.
func TestHybridConfigErrors(t *testing.T) {
	base := `"architectures": ["GraniteMoeHybridForCausalLM"], "hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 64, "intermediate_size": 16, "mamba_n_heads": 8, "mamba_d_state": 4`
	for _, c := range []struct {
		extra, want string
		unsupported bool
	}{
		{`"layer_types": ["mamba", "sliding_attention"]`, "layer_types[1]", true},
		{`"layer_types": ["mamba"]`, "layer_types has 1 entries", false},
		{`"position_embedding_type": "alibi"`, "position_embedding_type", true},
		{`"mamba_n_heads": 5`, "mamba_n_heads 5", false},
		{`"mamba_d_head": 16`, "mamba_d_head 16", false},
		{`"mamba_d_head": "wide"`, "mamba_d_head", false},
		{`"mamba_n_groups": 3`, "mamba_n_groups 3", false},
		{`"mamba_d_conv": 1`, "mamba_d_conv 1", false},
		{`"num_local_experts": 4, "num_experts_per_tok": 5`, "num_experts_per_tok 5", false},
		{`"shared_intermediate_size": 0`, "shared_intermediate_size 0", false},
		{`"residual_multiplier": -1`, "residual_multiplier", false},
		{`"hidden_act": "gelu"`, "hidden_act", true},
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
	// Absent layer_types: every layer is Mamba-2 (transformers'
	// layers_block_type); num_local_experts 0: the shared MLP alone.
	m, err := lm.New(lmckpt.ParseConfig(t, "{"+base+`, "num_local_experts": 0, "num_experts_per_tok": 0}`))
	if err != nil {
		t.Fatal(err)
	}
	o := m.(*granite.HybridModel).HybridOptions()
	if o.Spec.LayerKinds[0] != nn.KindMamba || o.Spec.LayerKinds[1] != nn.KindMamba || o.Experts != 0 || m.(*granite.HybridModel).Experts(0) != nil ||
		o.Spec.Intermediate != o.Shared {
		t.Errorf("options %+v", o)
	}
}
