package cmd

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tputool/tputool/loader/safetensors"
	"github.com/tputool/tputool/pipeline/testkit/gemma4ref"
	"github.com/tputool/tputool/pipeline/testkit/gptossref"
)

// gptOSSDir writes the tiny GPT-OSS (MXFP4 experts, bf16 elsewhere, as
// released) with stories260K's vocabulary size and tokenizer, and a chat
// template.
func gptOSSDir(t *testing.T) string {
	t.Helper()
	c := gptossref.Tiny()
	c.Vocab, c.Form, c.DType = 512, gptossref.MXFP4, safetensors.BF16
	dir := t.TempDir()
	require.NoError(t, c.Write(dir))
	copyStoriesTokenizer(t, dir)
	p := filepath.Join(dir, "tokenizer_config.json")
	b, err := os.ReadFile(p)
	require.NoError(t, err)
	var cfg map[string]any
	require.NoError(t, json.Unmarshal(b, &cfg))
	cfg["chat_template"] = "{{ bos_token }}{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}assistant:"
	b, err = json.Marshal(cfg)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(p, b, 0o644))
	return dir
}

// GPT-OSS through the commands: generate gives the same greedy tokens on
// both CPU backends, in f32 and close in bf16; the one-by-one expert
// formulations are refused with the reason; chat answers; serve's greedy
// completion is generate's; bench runs; inspect reports the experts and
// both active counts.
func TestGptOssCommands(t *testing.T) {
	dir := gptOSSDir(t)
	var want []int
	var text string
	for _, dev := range []string{"cpu", "cpu:go"} {
		e := genEnv(t)
		require.Equal(t, ExitOK, e.run("--json", "--device", dev, "generate", "--model", dir, "-p", "Once upon a time", "-n", "8", "--temperature", "0"), e.errOut.String())
		var rs []jsonResult
		require.NoError(t, json.Unmarshal(e.out.Bytes(), &rs), e.out.String())
		require.Len(t, rs, 1)
		require.Len(t, rs[0].TokenIDs, 8)
		if want == nil {
			want, text = rs[0].TokenIDs, rs[0].Text
		}
		assert.Equal(t, want, rs[0].TokenIDs, dev)
	}
	e := genEnv(t)
	require.Equal(t, ExitOK, e.run("--json", "generate", "--model", dir, "-p", "Once upon a time", "-n", "8", "--temperature", "0", "--dtype", "bf16"), e.errOut.String())

	for _, experts := range []string{"host", "dense"} {
		e := genEnv(t)
		require.Equal(t, ExitUnsupported, e.run("generate", "--model", dir, "-p", "hi", "-n", "2", "--experts", experts))
		assert.Contains(t, e.errOut.String(), "--experts "+experts+": GptOssForCausalLM runs its experts only in the graph")
	}

	e = genEnv(t)
	e.f.IOStreams.In = strings.NewReader("Tell me about a cat.\n")
	require.Equal(t, ExitOK, e.run("chat", "--model", dir, "--json", "-n", "6", "--temperature", "0"), e.errOut.String())
	turns := chatTurns(t, e.out.Bytes())
	require.Len(t, turns, 1, e.out.String())

	addr, _, stop := serveInProcess(t, "--model", dir)
	resp, err := http.Post("http://"+addr+"/v1/completions", "application/json",
		strings.NewReader(`{"prompt":"Once upon a time","max_tokens":8,"temperature":0}`))
	require.NoError(t, err)
	var completion struct {
		Choices []struct {
			Text string `json:"text"`
		} `json:"choices"`
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&completion))
	resp.Body.Close()
	require.Len(t, completion.Choices, 1)
	assert.Equal(t, text, completion.Choices[0].Text, "serve's greedy completion is generate's")
	require.Equal(t, ExitOK, stop())

	e = benchEnv(t)
	require.Equal(t, ExitOK, e.run("bench", "-m", dir, "--json", "--batch", "2", "--prompt-len", "6", "--gen-len", "3", "--repeat", "1", "--mode", "compiled"), e.errOut.String())

	e = genEnv(t)
	require.Equal(t, ExitOK, e.run("--json", "inspect", "--model", dir), e.errOut.String())
	var r struct {
		Text struct {
			MoE struct {
				Experts         int `json:"experts"`
				ExpertsPerToken int `json:"experts_per_token"`
			} `json:"moe"`
		} `json:"text"`
		Params struct {
			Used, Active, Experts int64
			ActiveLess            int64 `json:"active_less_embedding"`
		} `json:"parameters"`
	}
	require.NoError(t, json.Unmarshal(e.out.Bytes(), &r), e.out.String())
	c := gptossref.Tiny()
	assert.Equal(t, 8, r.Text.MoE.Experts)
	assert.Equal(t, 2, r.Text.MoE.ExpertsPerToken)
	experts := int64(c.Layers * c.Experts * (3*c.Intermediate*c.Hidden + 2*c.Intermediate + c.Hidden))
	assert.Equal(t, experts, r.Params.Experts, "MXFP4 blocks count two parameters a byte, the scales none")
	assert.Equal(t, r.Params.Used-experts+experts*2/8, r.Params.Active)
	assert.Equal(t, r.Params.Active-int64(512*c.Hidden), r.Params.ActiveLess)
}

// Gemma 4 through the commands: the tiny E2B-shaped model (per-layer
// embeddings, KV sharing) and the 26B-shaped MoE generate the same greedy
// tokens on both CPU backends and in eager mode, chat answers, serve's
// greedy completion is generate's, and inspect skips the vision tower.
func TestGemma4Commands(t *testing.T) {
	for _, c := range []gemma4ref.Config{gemma4ref.TinyE(), gemma4ref.TinyMoE()} {
		c.Vocab = 512
		dir := t.TempDir()
		require.NoError(t, c.Write(dir))
		copyStoriesTokenizer(t, dir)
		sameGreedyEverywhere(t, dir)

		e := genEnv(t)
		require.Equal(t, ExitOK, e.run("--json", "inspect", "--model", dir), e.errOut.String())
		assert.Contains(t, e.out.String(), `"vision"`, "the vision tower is reported as skipped")
	}
}

// sameGreedyEverywhere checks a checkpoint in dir (with a tokenizer)
// through the commands: generate's greedy tokens for "Once upon a time"
// are the same on cpu, cpu:go and in eager mode, and serve's greedy
// completion is generate's text.
func sameGreedyEverywhere(t *testing.T, dir string) {
	t.Helper()
	var want []int
	var text string
	for _, args := range [][]string{{"--device", "cpu"}, {"--device", "cpu:go"}, {"--device", "cpu", "--mode", "eager"}} {
		e := genEnv(t)
		full := append([]string{"--json"}, args[:2]...)
		full = append(full, "generate", "--model", dir, "-p", "Once upon a time", "-n", "8", "--temperature", "0")
		full = append(full, args[2:]...)
		require.Equal(t, ExitOK, e.run(full...), e.errOut.String())
		var rs []jsonResult
		require.NoError(t, json.Unmarshal(e.out.Bytes(), &rs), e.out.String())
		require.Len(t, rs, 1)
		if want == nil {
			want, text = rs[0].TokenIDs, rs[0].Text
		}
		assert.Equal(t, want, rs[0].TokenIDs, "%v", args)
	}
	addr, _, stop := serveInProcess(t, "--model", dir)
	resp, err := http.Post("http://"+addr+"/v1/completions", "application/json",
		strings.NewReader(`{"prompt":"Once upon a time","max_tokens":8,"temperature":0}`))
	require.NoError(t, err)
	var completion struct {
		Choices []struct {
			Text string `json:"text"`
		} `json:"choices"`
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&completion))
	resp.Body.Close()
	require.Len(t, completion.Choices, 1)
	assert.Equal(t, text, completion.Choices[0].Text, "serve's greedy completion is generate's")
	require.Equal(t, ExitOK, stop())
}
