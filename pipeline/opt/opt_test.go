package opt_test

import (
	"strings"
	"testing"

	"github.com/tputool/tputool/pipeline/llama"
	"github.com/tputool/tputool/pipeline/lm"
	"github.com/tputool/tputool/pipeline/opt"
	"github.com/tputool/tputool/pipeline/testkit/lmckpt"
	"github.com/tputool/tputool/pipeline/testkit/moecheck"
	"github.com/tputool/tputool/pipeline/testkit/optref"
	"github.com/tputool/tputool/pipeline/testkit/refcheck"
)

var prompts = [][]int{{2, 7, 21, 33, 4}, {2, 9, 14, 60, 3, 5, 41, 27, 11, 19, 50}}

// TestLogitsMatchReference runs tiny OPTs (the first uploads' decoder.*
// names with a stored head; OPTForCausalLM's model.decoder.* without
// biases or LayerNorm parameters; OPT-350M's LayerNorms after each
// residual add and embeddings half the hidden size, with and without a
// stored head; projected embeddings under pre-LN layers) on a left-padded batch of two prompts
// and decode steps, compiled and eager, on the go and cpu backends,
// against optref's float64 forward under the checkpoints' names; and in
// bfloat16 within a few percent. A reference reading the position table
// without its offset of 2 differs, and for OPT-350M one with the
// LayerNorms before their sublayers.
func TestLogitsMatchReference(t *testing.T) {
	const steps = 6
	bare := optref.Tiny()
	bare.Prefix, bare.StoredHead, bare.NoBias, bare.NoAffine, bare.Seed = "model.", false, true, true, 151
	stored350 := optref.Tiny350M() // the first uploads' names, the tied head stored [vocab, word_embed_proj_dim]
	stored350.Prefix, stored350.StoredHead, stored350.Seed = "", true, 153
	preLNProj := optref.Tiny() // no release has it: the final LayerNorm, then project_out
	preLNProj.EmbedDim, preLNProj.Seed = 16, 154
	for _, c := range []struct {
		name string
		opt  optref.OPT
	}{{"decoder", optref.Tiny()}, {"bare", bare}, {"350m", optref.Tiny350M()}, {"350m-stored-head", stored350}, {"preln-projected", preLNProj}} {
		t.Run(c.name, func(t *testing.T) {
			dir, l := lmckpt.WriteLoad(t, c.opt.Write)
			rm, err := c.opt.Load(dir)
			if err != nil {
				t.Fatal(err)
			}
			seqs := refcheck.GreedySequences(rm, prompts, steps)
			moecheck.Run(t, "", l, rm, prompts, seqs, steps, 1e-4)
			t.Logf("bfloat16: worst relative error %.3g", moecheck.BFloat16(t, l, rm, prompts, 0.05))
			noOffset := &optref.Model{C: rm.C, W: rm.W, Offset: -2}
			prompt := prompts[1]
			mutants := []refcheck.Mutant{{Name: "the positions without their offset", Logits: noOffset.Logits}}
			if c.opt.PostLN {
				before := &optref.Model{C: rm.C, W: rm.W, NormsBefore: true}
				mutants = append(mutants, refcheck.Mutant{Name: "the LayerNorms before their sublayers", Logits: before.Logits})
			}
			refcheck.Discriminates(t, moecheck.Prefill(t, l, prompt)[0], prompt, rm.Logits, 1e-3, mutants...)
		})
	}
}

// opt125m is facebook/opt-125m's config.json.
const opt125m = `{"_name_or_path": "facebook/opt-125m", "activation_dropout": 0.0, "activation_function": "relu",
	"architectures": ["OPTForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 2, "do_layer_norm_before": true,
	"dropout": 0.1, "eos_token_id": 2, "ffn_dim": 3072, "hidden_size": 768, "init_std": 0.02, "layerdrop": 0.0,
	"max_position_embeddings": 2048, "model_type": "opt", "num_attention_heads": 12, "num_hidden_layers": 12,
	"pad_token_id": 1, "prefix": "</s>", "torch_dtype": "float16", "transformers_version": "4.21.0.dev0",
	"use_cache": true, "vocab_size": 50272, "word_embed_proj_dim": 768}`

// TestConfig reads OPT-125M's config.json (125,239,296 parameters, the
// tied head counted once) and refuses what it cannot run, naming the
// field.
func TestConfig(t *testing.T) {
	m, err := lm.New(lmckpt.ParseConfig(t, opt125m))
	if err != nil {
		t.Fatal(err)
	}
	o := m.(*opt.Model).Options()
	s := m.Spec()
	if n := lmckpt.Params(m); n != 125_239_296 {
		t.Errorf("%d parameters, want 125,239,296", n)
	}
	if s.Hidden != 768 || s.Layers != 12 || s.Heads != 12 || s.KVHeads != 12 || s.Intermediate != 3072 || s.MaxPositions != 2048 ||
		o.Positions.Rows != 2050 || o.Positions.Offset != 2 || !o.QKVBias || !o.OBias || !o.MLPBias || o.FusedQKV || !o.LayerNorm ||
		o.NormNoParams || !o.UngatedMLP || o.Norms.PreAttn != "self_attn_layer_norm" || o.Norms.PreMLP != "final_layer_norm" ||
		!s.TieEmbeddings || s.BOS != 2 || s.EOS[0] != 2 || o.Eps != 1e-5 {
		t.Errorf("spec %+v, options %+v", s, o)
	}
	r := m.(lm.Renamer)
	for stored, want := range map[string]string{
		"decoder.embed_tokens.weight":                      "model.embed_tokens.weight",
		"model.decoder.embed_tokens.weight":                "model.embed_tokens.weight",
		"decoder.embed_positions.weight":                   llama.PositionsWeight,
		"model.decoder.final_layer_norm.bias":              "model.norm.bias",
		"decoder.layers.3.final_layer_norm.weight":         "model.layers.3.final_layer_norm.weight",
		"model.decoder.layers.3.self_attn_layer_norm.bias": "model.layers.3.self_attn_layer_norm.bias",
		"model.decoder.layers.3.self_attn.q_proj.weight":   "model.layers.3.self_attn.q_proj.weight",
		"decoder.layers.3.self_attn.out_proj.bias":         "model.layers.3.self_attn.o_proj.bias",
		"model.decoder.layers.11.fc1.weight":               "model.layers.11.mlp.up_proj.weight",
		"decoder.layers.11.fc2.bias":                       "model.layers.11.mlp.down_proj.bias",
		"lm_head.weight":                                   "lm_head.weight",
		"model.decoder.project_out.weight":                 "model.project_out.weight",
		"decoder.project_in.weight":                        "model.project_in.weight",
	} {
		if got := r.RenameWeight(stored); got != want {
			t.Errorf("%s read as %s, want %s", stored, got, want)
		}
	}
	for _, bad := range []struct{ js, want string }{
		{`"word_embed_proj_dim": 0`, "word_embed_proj_dim must be positive"},
		{`"activation_function": "swish2"`, "hidden_act"},
	} {
		js := strings.Replace(opt125m, `"vocab_size": 50272, "word_embed_proj_dim": 768}`, `"vocab_size": 50272, `+bad.js+`}`, 1)
		_, err := opt.Resolve(lmckpt.ParseConfig(t, js))
		if err == nil || !strings.Contains(err.Error(), bad.want) || !strings.Contains(err.Error(), "config.json") {
			t.Errorf("%s: error %v, want one naming config.json and %q", bad.js, err, bad.want)
		}
	}
}

// opt350m is facebook/opt-350m's config.json.
const opt350m = `{"_name_or_path": "facebook/opt-350m", "activation_dropout": 0.0, "activation_function": "relu",
	"architectures": ["OPTForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 2, "do_layer_norm_before": false,
	"dropout": 0.1, "eos_token_id": 2, "ffn_dim": 4096, "hidden_size": 1024, "init_std": 0.02, "layerdrop": 0.0,
	"max_position_embeddings": 2048, "model_type": "opt", "num_attention_heads": 16, "num_hidden_layers": 24,
	"pad_token_id": 1, "prefix": "</s>", "torch_dtype": "float16", "transformers_version": "4.21.0.dev0", "use_cache": true,
	"vocab_size": 50272, "word_embed_proj_dim": 512}`

// TestConfig350M reads OPT-350M's config.json (331,196,416 parameters):
// the LayerNorms after each residual add, no final LayerNorm, the
// embeddings projected in and out; _remove_final_layer_norm drops the
// final LayerNorm of a pre-LN OPT.
func TestConfig350M(t *testing.T) {
	m, err := lm.New(lmckpt.ParseConfig(t, opt350m))
	if err != nil {
		t.Fatal(err)
	}
	o := m.(*opt.Model).Options()
	if n := lmckpt.Params(m); n != 331_196_416 {
		t.Errorf("%d parameters, want 331,196,416", n)
	}
	if fw := m.(*opt.Model).FinalWeights(); !o.PostLN || !o.NoFinalNorm || o.EmbedProj != 512 || o.Spec.Hidden != 1024 ||
		len(fw) != 1 || fw[0].Name != "model.project_out.weight" || lm.FinalWidth(m) != 512 {
		t.Errorf("options %+v, final weights %+v", o, fw)
	}
	o2, err := opt.Resolve(lmckpt.ParseConfig(t, strings.Replace(opt125m, `"vocab_size": 50272,`, `"vocab_size": 50272, "_remove_final_layer_norm": true,`, 1)))
	if err != nil {
		t.Fatal(err)
	}
	if o2.PostLN || !o2.NoFinalNorm || o2.EmbedProj != 0 {
		t.Errorf("_remove_final_layer_norm: %+v", o2)
	}
}
