// Command export-llama2c converts a Hugging Face Llama checkpoint (a
// directory with config.json and safetensors weights, such as the one
// scripts/gen-llm-checkpoint writes) to the .bin checkpoint format that
// llama2.c's run.c reads, and writes a placeholder tokenizer.bin that run.c
// accepts for the same vocabulary. It exists to time run.c on the same
// weights as tputool (scripts/bench-vs-llama2c.sh); the placeholder
// tokenizer makes run.c's text meaningless but leaves its speed unchanged.
//
//	go run ./scripts/export-llama2c -m /tmp/llama-110m -o /tmp/model.bin -tokenizer /tmp/tokenizer.bin
//
// The .bin file is a header of seven little-endian int32s (dim, hidden_dim,
// n_layers, n_heads, n_kv_heads, vocab_size, seq_len; vocab_size is negative
// when the output projection is not the embedding) followed by float32
// tensors: token embedding, every layer's attention RMSNorm weight, then
// per kind across the layers wq, wk, wv, wo, the FFN RMSNorm weights, w1
// (gate), w2 (down), w3 (up), the final RMSNorm weight, two unused RoPE
// tables of seq_len*head_dim/2 floats each (written as zeros), and the
// output projection when it is not tied. Linear weights keep Hugging Face's
// [out, in] row-major layout, which is what run.c multiplies by.
//
// run.c rotates adjacent pairs (x[2i], x[2i+1]) while Hugging Face Llama
// rotates halves (x[i], x[i+d/2]), so by default the rows of wq and wk are
// permuted within each head (Hugging Face row half*d/2+i becomes row
// 2i+half) to make the two compute the same model; -permute=false skips
// this (the speed is the same either way).
//
// run.c hard-codes rope_theta 10000 and rms_norm_eps 1e-5; other values are
// reported on stderr and exported anyway.
package main

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"os"
	"path/filepath"

	"github.com/tputool/tputool/loader/safetensors"
)

type hfConfig struct {
	HiddenSize        int     `json:"hidden_size"`
	IntermediateSize  int     `json:"intermediate_size"`
	NumLayers         int     `json:"num_hidden_layers"`
	NumHeads          int     `json:"num_attention_heads"`
	NumKVHeads        int     `json:"num_key_value_heads"`
	HeadDim           int     `json:"head_dim"`
	VocabSize         int     `json:"vocab_size"`
	MaxPositions      int     `json:"max_position_embeddings"`
	TieWordEmbeddings bool    `json:"tie_word_embeddings"`
	RopeTheta         float64 `json:"rope_theta"`
	RMSNormEps        float64 `json:"rms_norm_eps"`
}

func main() {
	model := flag.String("m", "", "Hugging Face model directory (config.json + safetensors; required)")
	out := flag.String("o", "", "output run.c checkpoint .bin (required)")
	tok := flag.String("tokenizer", "", "also write a placeholder run.c tokenizer.bin for the vocabulary here")
	seqLen := flag.Int("seq-len", 0, "seq_len in the header (run.c's KV cache length); 0: max_position_embeddings")
	permute := flag.Bool("permute", true, "permute wq/wk rows from Hugging Face's rotate-half RoPE to run.c's adjacent pairs")
	flag.Parse()
	if *model == "" || *out == "" {
		fmt.Fprintln(os.Stderr, "export-llama2c: -m and -o are required")
		os.Exit(2)
	}
	if err := run(*model, *out, *tok, *seqLen, *permute); err != nil {
		fmt.Fprintln(os.Stderr, "export-llama2c:", err)
		os.Exit(1)
	}
}

func run(dir, out, tokPath string, seqLen int, permute bool) error {
	b, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if err != nil {
		return err
	}
	var c hfConfig
	if err := json.Unmarshal(b, &c); err != nil {
		return fmt.Errorf("config.json: %w", err)
	}
	if c.NumKVHeads == 0 {
		c.NumKVHeads = c.NumHeads
	}
	if c.HiddenSize <= 0 || c.NumHeads <= 0 || c.NumLayers <= 0 || c.VocabSize <= 0 || c.IntermediateSize <= 0 {
		return fmt.Errorf("config.json: not a Llama config (hidden_size %d, heads %d, layers %d, vocab %d)", c.HiddenSize, c.NumHeads, c.NumLayers, c.VocabSize)
	}
	if c.HiddenSize%c.NumHeads != 0 || (c.HeadDim != 0 && c.HeadDim != c.HiddenSize/c.NumHeads) {
		return fmt.Errorf("run.c needs head_dim = hidden_size/num_attention_heads (head_dim %d, hidden %d, heads %d)", c.HeadDim, c.HiddenSize, c.NumHeads)
	}
	if c.RopeTheta != 0 && c.RopeTheta != 10000 {
		fmt.Fprintf(os.Stderr, "export-llama2c: rope_theta %g; run.c uses 10000\n", c.RopeTheta)
	}
	if c.RMSNormEps != 0 && math.Abs(c.RMSNormEps-1e-5) > 1e-12 {
		fmt.Fprintf(os.Stderr, "export-llama2c: rms_norm_eps %g; run.c uses 1e-5\n", c.RMSNormEps)
	}
	if seqLen <= 0 {
		seqLen = c.MaxPositions
	}
	if seqLen <= 0 {
		return fmt.Errorf("no seq_len: pass -seq-len")
	}
	headDim := c.HiddenSize / c.NumHeads

	ck, err := safetensors.Open(dir)
	if err != nil {
		return err
	}
	defer ck.Close()
	tied := c.TieWordEmbeddings || !ck.Has("lm_head.weight")

	f, err := os.Create(out)
	if err != nil {
		return err
	}
	w := bufio.NewWriterSize(f, 1<<20)
	vocab := int32(c.VocabSize)
	if !tied {
		vocab = -vocab
	}
	header := []int32{int32(c.HiddenSize), int32(c.IntermediateSize), int32(c.NumLayers), int32(c.NumHeads), int32(c.NumKVHeads), vocab, int32(seqLen)}
	if err := binary.Write(w, binary.LittleEndian, header); err != nil {
		f.Close()
		return err
	}
	put := func(name string, want int, perm int) error {
		v, err := ck.Float32(name)
		if err != nil {
			return err
		}
		if len(v) != want {
			return fmt.Errorf("%s: %d values, want %d", name, len(v), want)
		}
		if perm > 0 {
			v = rotateHalfToPairs(v, perm, headDim, len(v)/(perm*headDim))
		}
		return writeFloats(w, v)
	}
	layer := func(i int, s string) string { return fmt.Sprintf("model.layers.%d.%s", i, s) }
	d, h, kv := c.HiddenSize, c.IntermediateSize, c.NumKVHeads*headDim
	type kind struct {
		name string
		n    int
		perm int // heads to permute, 0 for none
	}
	kinds := []kind{
		{"input_layernorm.weight", d, 0},
		{"self_attn.q_proj.weight", d * d, c.NumHeads},
		{"self_attn.k_proj.weight", kv * d, c.NumKVHeads},
		{"self_attn.v_proj.weight", kv * d, 0},
		{"self_attn.o_proj.weight", d * d, 0},
		{"post_attention_layernorm.weight", d, 0},
		{"mlp.gate_proj.weight", h * d, 0},
		{"mlp.down_proj.weight", d * h, 0},
		{"mlp.up_proj.weight", h * d, 0},
	}
	err = put("model.embed_tokens.weight", c.VocabSize*d, 0)
	for _, k := range kinds {
		p := k.perm
		if !permute {
			p = 0
		}
		for i := 0; i < c.NumLayers && err == nil; i++ {
			err = put(layer(i, k.name), k.n, p)
		}
	}
	if err == nil {
		err = put("model.norm.weight", d, 0)
	}
	if err == nil {
		err = writeFloats(w, make([]float32, seqLen*headDim)) // freq_cis_real and _imag, unused
	}
	if err == nil && !tied {
		err = put("lm_head.weight", c.VocabSize*d, 0)
	}
	if err == nil {
		err = w.Flush()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	if tokPath != "" {
		return writeTokenizer(tokPath, c.VocabSize)
	}
	return nil
}

// rotateHalfToPairs reorders the rows of a [heads*headDim, cols] weight so
// that, within each head, row half*headDim/2+i moves to row 2i+half.
func rotateHalfToPairs(v []float32, heads, headDim, cols int) []float32 {
	o := make([]float32, len(v))
	half := headDim / 2
	for hd := 0; hd < heads; hd++ {
		base := hd * headDim
		for r := 0; r < headDim; r++ {
			dst := base + 2*(r%half) + r/half
			copy(o[dst*cols:(dst+1)*cols], v[(base+r)*cols:(base+r+1)*cols])
		}
	}
	return o
}

func writeFloats(w *bufio.Writer, v []float32) error {
	var buf [4]byte
	for _, x := range v {
		binary.LittleEndian.PutUint32(buf[:], math.Float32bits(x))
		if _, err := w.Write(buf[:]); err != nil {
			return err
		}
	}
	return nil
}

// writeTokenizer writes run.c's tokenizer format: max_token_length (int32),
// then per token a float32 score, an int32 length and the bytes. Token 0 is
// <unk>, 1 <s> (run.c's BOS), 2 </s>, 3..258 the byte-fallback pieces
// <0x00>..<0xFF> that run.c's encoder and decoder expect at those ids, 259
// a single space (run.c's dummy prefix), and the rest placeholders tN.
func writeTokenizer(path string, vocab int) error {
	if vocab < 260 {
		return fmt.Errorf("tokenizer: vocabulary of %d is below the 260 tokens run.c's byte fallback needs", vocab)
	}
	pieces := make([]string, vocab)
	pieces[0], pieces[1], pieces[2] = "<unk>", "<s>", "</s>"
	for i := 0; i < 256; i++ {
		pieces[3+i] = fmt.Sprintf("<0x%02X>", i)
	}
	pieces[259] = " "
	for i := 260; i < vocab; i++ {
		pieces[i] = fmt.Sprintf("t%d", i)
	}
	maxLen := 0
	for _, p := range pieces {
		maxLen = max(maxLen, len(p))
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := bufio.NewWriter(f)
	_ = binary.Write(w, binary.LittleEndian, int32(maxLen))
	for _, p := range pieces {
		_ = binary.Write(w, binary.LittleEndian, float32(0))
		_ = binary.Write(w, binary.LittleEndian, int32(len(p)))
		_, _ = w.WriteString(p)
	}
	err = w.Flush()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}
