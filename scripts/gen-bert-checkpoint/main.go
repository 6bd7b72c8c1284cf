// Command gen-bert-checkpoint writes a BERT-family encoder with
// deterministic pseudo-random weights in a sentence-transformers layout
// (config.json, model.safetensors, a WordPiece tokenizer.json (BERT's
// specials, for every family) padded with
// [unusedN] entries to the vocabulary, modules.json with Pooling and
// Normalize, sentence_bert_config.json) for benchmarks and manual runs of
// tputool embed and serve. It is not a trained model.
//
//	go run ./scripts/gen-bert-checkpoint -o /tmp/minilm                     # all-MiniLM-L6-v2's shape
//	go run ./scripts/gen-bert-checkpoint -o /tmp/bge-base -hidden 768 -layers 12 -heads 12 -intermediate 3072 -pooling cls
//	go run ./scripts/gen-bert-checkpoint -o /tmp/xlmr -roberta -vocab 250002 -positions 514
//	go run ./scripts/gen-bert-checkpoint -o /tmp/mpnet -mpnet -hidden 768 -layers 12 -intermediate 3072 -positions 514   # all-mpnet-base-v2's shape
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/tputool/tputool/pipeline/testkit/bertref"
)

func main() {
	out := flag.String("o", "", "output directory (required)")
	hidden := flag.Int("hidden", 384, "hidden_size")
	layers := flag.Int("layers", 6, "num_hidden_layers")
	heads := flag.Int("heads", 12, "num_attention_heads")
	inter := flag.Int("intermediate", 1536, "intermediate_size")
	vocab := flag.Int("vocab", 30522, "vocab_size (the tokenizer is padded to it)")
	positions := flag.Int("positions", 512, "max_position_embeddings")
	roberta := flag.Bool("roberta", false, "XLMRobertaModel (positions from pad_token_id+1, one token type) instead of BertModel")
	mpnet := flag.Bool("mpnet", false, "MPNetModel (positions from 2, no token types, a relative position bias) instead of BertModel")
	pooling := flag.String("pooling", "mean", "sentence-transformers pooling: mean or cls")
	maxSeq := flag.Int("max-seq-length", 256, "sentence_bert_config.json max_seq_length")
	seed := flag.Uint64("seed", 5, "weights' seed")
	flag.Parse()
	if *out == "" {
		fmt.Fprintln(os.Stderr, "gen-bert-checkpoint: -o is required")
		os.Exit(2)
	}
	c := bertref.Config{Vocab: *vocab, Hidden: *hidden, Layers: *layers, Heads: *heads, Intermediate: *inter,
		MaxPositions: *positions, TypeVocab: 2, Eps: 1e-12}
	if *roberta && *mpnet {
		fmt.Fprintln(os.Stderr, "gen-bert-checkpoint: -roberta or -mpnet, not both")
		os.Exit(2)
	}
	if *roberta {
		c.Roberta, c.TypeVocab, c.Eps = true, 1, 1e-5
	}
	if *mpnet {
		c.MPNet, c.Eps = true, 1e-5
	}
	for _, step := range []func() error{
		func() error { return bertref.Write(*out, c, *seed) },
		func() error { return bertref.WriteTokenizer(*out, c.Vocab) },
		func() error { return bertref.WriteSentenceTransformers(*out, c.Hidden, *pooling, *maxSeq) },
	} {
		if err := step(); err != nil {
			fmt.Fprintln(os.Stderr, "gen-bert-checkpoint:", err)
			os.Exit(1)
		}
	}
}
