package loader_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/tputool/tputool/internal/errs"
	"github.com/tputool/tputool/loader"
	"github.com/tputool/tputool/loader/hub/hubtest"
	"github.com/tputool/tputool/loader/safetensors"
)

// TestPoolingFromHub: a sentence-transformers repo's modules.json and
// 1_Pooling/config.json come with the configs, and Pooling reads the
// last-token mode from them.
func TestPoolingFromHub(t *testing.T) {
	srv := hubtest.New(t)
	repo := shardedRepo(t)
	repo.ID = "org/embedder"
	repo.Files = append(repo.Files,
		hubtest.File{Path: "modules.json", Data: []byte(`[{"idx":0,"name":"0","path":"","type":"sentence_transformers.models.Transformer"},
			{"idx":1,"name":"1","path":"1_Pooling","type":"sentence_transformers.models.Pooling"},
			{"idx":2,"name":"2","path":"2_Normalize","type":"sentence_transformers.models.Normalize"}]`)},
		hubtest.File{Path: "1_Pooling/config.json", Data: []byte(`{"word_embedding_dimension":8,"pooling_mode_cls_token":false,
			"pooling_mode_mean_tokens":false,"pooling_mode_max_tokens":false,"pooling_mode_lasttoken":true,"include_prompt":true}`)})
	srv.AddRepo(repo)
	m, err := resolve(context.Background(), "org/embedder", loader.Options{Client: client(t, srv)})
	if err != nil {
		t.Fatal(err)
	}
	if got := fetched(srv); !slices.Contains(got, "1_Pooling/config.json") || slices.Contains(got, "onnx/model.onnx") {
		t.Errorf("fetched %q", got)
	}
	if p, err := m.Pooling(); p != "last" || err != nil {
		t.Errorf("Pooling() = %q, %v; want last", p, err)
	}
}

// TestPoolingModes: mean, CLS, none declared, modules.json as later
// sentence-transformers versions name its modules, and modes or modules
// tputool does not apply (an ErrUnsupported error naming them).
func TestPoolingModes(t *testing.T) {
	for _, c := range []struct {
		modules, pooling string
		want             string
		unsupported      bool
	}{
		{`[{"path":"1_Pooling","type":"sentence_transformers.models.Pooling"}]`, `{"pooling_mode_mean_tokens":true}`, "mean", false},
		{`[{"path":"1_Pooling","type":"sentence_transformers.models.Pooling"}]`, `{"pooling_mode_cls_token":true,"pooling_mode_mean_tokens":false}`, "cls", false},
		{`[{"path":"1_Pooling","type":"sentence_transformers.models.Pooling"}]`, `{"pooling_mode_max_tokens":true,"pooling_mode_mean_tokens":false}`, "", true},
		// Every flag false pools nothing (sentence-transformers fails); a
		// config without the mean's flag pools by the mean, its default,
		// beside any other mode set.
		{`[{"path":"1_Pooling","type":"sentence_transformers.models.Pooling"}]`, `{"pooling_mode_cls_token":false,"pooling_mode_mean_tokens":false}`, "", true},
		{`[{"path":"1_Pooling","type":"sentence_transformers.models.Pooling"}]`, `{"word_embedding_dimension":384}`, "mean", false},
		{`[{"path":"1_Pooling","type":"sentence_transformers.models.Pooling"}]`, `{"pooling_mode_cls_token":true}`, "", true},
		{`[{"path":"1_Pooling","type":"sentence_transformers.models.Pooling"}]`, `{"pooling_mode":"CLS"}`, "cls", false},
		// sentence-transformers 5.4 and later write one mode by name.
		{`[{"path":"1_Pooling","type":"sentence_transformers.models.Pooling"}]`, `{"pooling_mode":"cls","include_prompt":true}`, "cls", false},
		{`[{"path":"1_Pooling","type":"sentence_transformers.models.Pooling"}]`, `{"pooling_mode":"lasttoken"}`, "last", false},
		{`[{"path":"1_Pooling","type":"sentence_transformers.models.Pooling"}]`, `{"pooling_mode":"weightedmean"}`, "", true},
		{`[{"path":"1_Pooling","type":"sentence_transformers.models.Pooling"}]`, `{"pooling_mode_mean_tokens":true,"pooling_mode_max_tokens":true}`, "", true},
		{`[{"path":"","type":"sentence_transformers.models.Transformer"}]`, "", "", false},
		// Saved by a later sentence-transformers: the class's own module.
		{`[{"path":"","type":"sentence_transformers.base.modules.transformer.Transformer"},{"path":"1_Pooling","type":"sentence_transformers.sentence_transformer.modules.pooling.Pooling"},
			{"path":"2_Normalize","type":"sentence_transformers.sentence_transformer.modules.normalize.Normalize"}]`, `{"pooling_mode_mean_tokens":true}`, "mean", false},
		// A Dense projection after the pooling is refused, not skipped.
		{`[{"path":"","type":"sentence_transformers.models.Transformer"},{"path":"1_Pooling","type":"sentence_transformers.models.Pooling"},
			{"path":"2_Dense","type":"sentence_transformers.models.Dense"}]`, `{"pooling_mode_mean_tokens":true}`, "", true},
		{`[{"path":"","type":"sentence_transformers.base.modules.transformer.Transformer"},{"path":"1_Pooling","type":"sentence_transformers.models.Pooling"},
			{"path":"2_Dense","type":"sentence_transformers.base.modules.dense.Dense"}]`, `{"pooling_mode_lasttoken":true}`, "", true},
		{"", "", "", false},
	} {
		dir := t.TempDir()
		os.WriteFile(filepath.Join(dir, "config.json"), []byte(`{"model_type":"llama"}`), 0o644)
		safetensors.WriteFile(filepath.Join(dir, "model.safetensors"), []safetensors.Tensor{tensor(t, "w", 2, 2)}, nil)
		if c.modules != "" {
			os.WriteFile(filepath.Join(dir, "modules.json"), []byte(c.modules), 0o644)
		}
		if c.pooling != "" {
			os.MkdirAll(filepath.Join(dir, "1_Pooling"), 0o755)
			os.WriteFile(filepath.Join(dir, "1_Pooling", "config.json"), []byte(c.pooling), 0o644)
		}
		m, err := resolve(context.Background(), dir, loader.Options{})
		if err != nil {
			t.Fatal(err)
		}
		got, err := m.Pooling()
		if got != c.want || errors.Is(err, errs.ErrUnsupported) != c.unsupported || (err != nil) != c.unsupported {
			t.Errorf("%s %s: Pooling() = %q, %v; want %q, unsupported %v", c.modules, c.pooling, got, err, c.want, c.unsupported)
		}
	}
}

// TestPoolingMaxSeqLength: sentence_bert_config.json's max_seq_length, 0
// without the file or the field, an error for a value that is no length.
func TestPoolingMaxSeqLength(t *testing.T) {
	for _, c := range []struct {
		file    string
		want    int
		wantErr bool
	}{
		{`{"max_seq_length":512,"do_lower_case":false}`, 512, false},
		{`{"do_lower_case":false}`, 0, false},
		{"", 0, false},
		{`{"max_seq_length":0}`, 0, true},
	} {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "config.json"), []byte(`{"model_type":"llama"}`), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := safetensors.WriteFile(filepath.Join(dir, "model.safetensors"), []safetensors.Tensor{tensor(t, "w", 2, 2)}, nil); err != nil {
			t.Fatal(err)
		}
		if c.file != "" {
			if err := os.WriteFile(filepath.Join(dir, "sentence_bert_config.json"), []byte(c.file), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		m, err := resolve(context.Background(), dir, loader.Options{})
		if err != nil {
			t.Fatal(err)
		}
		got, err := m.MaxSeqLength()
		if got != c.want || (err != nil) != c.wantErr {
			t.Errorf("%s: MaxSeqLength() = %d, %v; want %d, error %v", c.file, got, err, c.want, c.wantErr)
		}
	}
}

// TestCrossEncoderRaw: a cross-encoder's activation as sentence-transformers
// reads it, from each place it has been saved, and an unknown one refused.
func TestCrossEncoderRaw(t *testing.T) {
	for _, c := range []struct {
		config, stConfig string
		raw, bad         bool
	}{
		{`{"model_type":"bert"}`, "", false, false},
		{`{"model_type":"bert","sbert_ce_default_activation_function":"torch.nn.modules.linear.Identity"}`, "", true, false},
		{`{"model_type":"bert","sbert_ce_default_activation_function":"torch.nn.modules.activation.Sigmoid"}`, "", false, false},
		{`{"model_type":"bert","sentence_transformers":{"activation_fn":"torch.nn.modules.linear.Identity","version":"4.1.0"}}`, "", true, false},
		{`{"model_type":"bert","sentence_transformers":{"activation_fn":"torch.nn.modules.activation.Sigmoid"},"sbert_ce_default_activation_function":"torch.nn.modules.linear.Identity"}`, "", false, false},
		{`{"model_type":"bert"}`, `{"activation_fn":"torch.nn.modules.linear.Identity"}`, true, false},
		{`{"model_type":"bert","sbert_ce_default_activation_function":"torch.nn.modules.activation.Tanh"}`, "", false, true},
	} {
		dir := t.TempDir()
		os.WriteFile(filepath.Join(dir, "config.json"), []byte(c.config), 0o644)
		safetensors.WriteFile(filepath.Join(dir, "model.safetensors"), []safetensors.Tensor{tensor(t, "w", 2, 2)}, nil)
		if c.stConfig != "" {
			os.WriteFile(filepath.Join(dir, "config_sentence_transformers.json"), []byte(c.stConfig), 0o644)
		}
		m, err := resolve(context.Background(), dir, loader.Options{})
		if err != nil {
			t.Fatal(err)
		}
		raw, err := m.CrossEncoderRaw()
		if c.bad {
			if !errors.Is(err, errs.ErrUnsupported) {
				t.Errorf("%s: %v, want ErrUnsupported", c.config, err)
			}
			continue
		}
		if err != nil || raw != c.raw {
			t.Errorf("%s %s: raw %v, %v; want %v", c.config, c.stConfig, raw, err, c.raw)
		}
	}
}

// TestSentencePrompts: config_sentence_transformers.json's prompts and
// default, a default naming no prompt refused, and include_prompt.
func TestSentencePrompts(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "config.json"), []byte(`{"model_type":"bert"}`), 0o644)
	safetensors.WriteFile(filepath.Join(dir, "model.safetensors"), []safetensors.Tensor{tensor(t, "w", 2, 2)}, nil)
	os.WriteFile(filepath.Join(dir, "modules.json"), []byte(`[{"path":"1_Pooling","type":"sentence_transformers.models.Pooling"}]`), 0o644)
	os.MkdirAll(filepath.Join(dir, "1_Pooling"), 0o755)
	os.WriteFile(filepath.Join(dir, "1_Pooling", "config.json"), []byte(`{"pooling_mode_mean_tokens":true,"include_prompt":false}`), 0o644)
	m, err := resolve(context.Background(), dir, loader.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if p, def, err := m.SentencePrompts(); p != nil || def != "" || err != nil {
		t.Errorf("no config_sentence_transformers.json: %v %q %v", p, def, err)
	}
	if in, err := m.PoolingIncludesPrompt(); in || err != nil {
		t.Errorf("include_prompt false: %v %v", in, err)
	}
	os.WriteFile(filepath.Join(dir, "config_sentence_transformers.json"), []byte(`{"prompts":{"query":"query: ","passage":"passage: "},"default_prompt_name":null}`), 0o644)
	if m, err = resolve(context.Background(), dir, loader.Options{}); err != nil {
		t.Fatal(err)
	}
	if p, def, err := m.SentencePrompts(); len(p) != 2 || p["query"] != "query: " || def != "" || err != nil {
		t.Errorf("prompts: %v %q %v", p, def, err)
	}
	os.WriteFile(filepath.Join(dir, "config_sentence_transformers.json"), []byte(`{"prompts":{"query":"q"},"default_prompt_name":"passage"}`), 0o644)
	if m, err = resolve(context.Background(), dir, loader.Options{}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := m.SentencePrompts(); err == nil {
		t.Error("a default naming no prompt: no error")
	}
}
