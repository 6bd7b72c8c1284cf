package bert

import (
	"errors"
	"testing"

	"github.com/tputool/tputool/internal/errs"
	"github.com/tputool/tputool/loader/config"
	"github.com/tputool/tputool/pipeline/testkit/bertref"
)

// TestRelativeBucket: MPNet's buckets, worked out from
// relative_position_bucket: exact below 8 (keys before the query in
// 0..7, after it 16..23), logarithmic to 128, saturated beyond.
func TestRelativeBucket(t *testing.T) {
	for _, c := range []struct{ rel, want int }{
		{0, 0}, {-1, 1}, {1, 17}, {-7, 7}, {7, 23},
		{-8, 8}, {8, 24}, // log(1) = 0
		{-16, 10}, {16, 26}, // 8 + log(2)/log(16)·8 = 10
		{-32, 12}, {-64, 14}, // 8 + 4, 8 + 6
		{-127, 15}, {-128, 15}, {-1000, 15}, {1000, 31},
		{-11, 8}, {-12, 9}, // 8 + log(1.5)/log(16)·8 = 8.0 + 1.17
	} {
		if got := RelativeBucket(c.rel); got != c.want {
			t.Errorf("RelativeBucket(%d) = %d, want %d", c.rel, got, c.want)
		}
	}
	// And the reference's, written apart from modeling_mpnet.py, at every
	// distance of a 600-token input.
	for rel := -600; rel <= 600; rel++ {
		if got, want := RelativeBucket(rel), bertref.MPNetBucket(rel, 32, 128); got != want {
			t.Fatalf("RelativeBucket(%d) = %d, the reference's %d", rel, got, want)
		}
	}
}

// TestConfigs: the defaults and refusals of the three families' configs.
func TestConfigs(t *testing.T) {
	build := func(js string) (*Model, error) {
		cfg, err := config.ParseModel([]byte(js))
		if err != nil {
			t.Fatal(err)
		}
		m, err := New(cfg)
		if err != nil {
			return nil, err
		}
		return m.(*Model), nil
	}
	m, err := build(`{"architectures":["BertModel"],"model_type":"bert"}`)
	if err != nil {
		t.Fatal(err)
	}
	if s := m.Spec(); !s.Encoder || s.Hidden != 768 || s.Layers != 12 || s.HeadDim != 64 || s.MaxPositions != 512 || m.o.Eps != 1e-12 || m.o.PositionOffset != 0 {
		t.Errorf("BertModel defaults: %+v %+v", s, m.o)
	}
	m, err = build(`{"architectures":["XLMRobertaModel"],"model_type":"xlm-roberta","max_position_embeddings":514,"type_vocab_size":1}`)
	if err != nil {
		t.Fatal(err)
	}
	if s := m.Spec(); s.MaxPositions != 512 || m.o.PositionOffset != 2 || m.o.TypeVocab != 1 {
		t.Errorf("XLMRobertaModel: %+v %+v", s, m.o)
	}
	m, err = build(`{"architectures":["MPNetModel"],"model_type":"mpnet","max_position_embeddings":514,"pad_token_id":0}`)
	if err != nil {
		t.Fatal(err)
	}
	if s := m.Spec(); s.MaxPositions != 512 || m.o.PositionOffset != 2 || !m.o.MPNet || m.o.RelativeBuckets != 32 {
		t.Errorf("MPNetModel (padding index 1 whatever pad_token_id): %+v %+v", s, m.o)
	}
	for _, js := range []string{
		`{"architectures":["BertModel"],"position_embedding_type":"relative_key"}`,
		`{"architectures":["BertModel"],"is_decoder":true}`,
	} {
		if _, err := build(js); !errors.Is(err, errs.ErrUnsupported) {
			t.Errorf("%s: %v, want ErrUnsupported", js, err)
		}
	}
	for _, js := range []string{
		`{"architectures":["BertModel"],"hidden_size":100,"num_attention_heads":12}`,
		`{"architectures":["XLMRobertaModel"],"max_position_embeddings":2}`,
		`{"architectures":["MPNetModel"],"relative_attention_num_buckets":16}`,
	} {
		if _, err := build(js); err == nil {
			t.Errorf("%s: no error", js)
		}
	}
}
