package cmd

import (
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tputool/tputool/internal/humanize"
	"github.com/tputool/tputool/loader/safetensors"
	"github.com/tputool/tputool/pipeline/lm"
	"github.com/tputool/tputool/pipeline/testkit/dsref"
	"github.com/tputool/tputool/pipeline/testkit/lmckpt"
	"github.com/tputool/tputool/pipeline/testkit/qwenref"
)

// layerOutput are a decoder layer's output projections.
var layerOutput = regexp.MustCompile(`^model\.(language_model\.)?layers\.\d+\..*\.(o_proj|out_proj|down_proj)(\.weight)?$`)

// mtpModel writes c with its multi-token-prediction head and the chat
// model's tokenizer (stories260K's, with a chat template). echo zeroes
// every layer's output and makes the head predict the model's picks
// (lmckpt.EchoMTP): every draft is confirmed.
func mtpModel(t *testing.T, c qwenref.Qwen35, echo bool) string {
	t.Helper()
	c.Vocab, c.MTP = 512, true
	dir := t.TempDir()
	require.NoError(t, c.Write(dir))
	if echo {
		ck, err := safetensors.OpenDir(dir, "")
		require.NoError(t, err)
		var ts []safetensors.Tensor
		for _, name := range ck.Names() {
			info, _ := ck.Info(name)
			raw, err := ck.Raw(name)
			require.NoError(t, err)
			if layerOutput.MatchString(name) {
				raw = make([]byte, len(raw))
			}
			ts = append(ts, safetensors.Tensor{Name: name, DType: info.DType, Shape: info.Shape, Data: append([]byte(nil), raw...)})
		}
		require.NoError(t, ck.Close())
		require.NoError(t, lmckpt.EchoMTP(ts))
		cfg, err := lmckpt.ReadConfig(dir)
		require.NoError(t, err)
		require.NoError(t, os.RemoveAll(dir))
		require.NoError(t, lmckpt.WriteCheckpoint(dir, cfg, ts))
	}
	chat := chatModel(t)
	for _, name := range []string{"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"} {
		b, err := os.ReadFile(filepath.Join(chat, name))
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), b, 0o644))
	}
	return dir
}

// TestGenerateMTP: generate --mtp (Qwen3.5, Qwen3.5-MoE, Qwen3-Next) gives the
// tokens of plain greedy decoding, with its head's drafts proposed; a
// head made always right has every draft confirmed (the head follows
// the text in step with the model); sampling runs through it.
func TestGenerateMTP(t *testing.T) {
	moe := qwenref.TinyQwen35MoE()
	moe.Stacked = true
	for name, c := range map[string]qwenref.Qwen35{"qwen3.5": qwenref.TinyQwen35(), "qwen3.5-moe": moe, "qwen3-next": qwenref.TinyQwen3Next()} {
		for _, echo := range []bool{false, true} {
			dir := mtpModel(t, c, echo)
			run := func(args ...string) (string, []int, [2]int, string) {
				return generateJSON(t, append([]string{"-m", dir, "-p", "Lily saw a big red ball", "-n", "40", "--temperature", "0"}, args...)...)
			}
			_, want, _, _ := run()
			for _, args := range [][]string{{"--mtp", "--draft-p-min", "0"}, {"--mtp", "--draft-p-min", "0", "--speculate", "5"}} {
				_, got, drafts, errOut := run(args...)
				assert.Equal(t, want, got, "%s echo=%v %v", name, echo, args)
				assert.Positive(t, drafts[0], "%s echo=%v %v: no draft: %s", name, echo, args, errOut)
				assert.Contains(t, errOut, "from the model's multi-token-prediction head", "%s %v", name, args)
				if echo {
					assert.Equal(t, drafts[0], drafts[1], "%s %v: the echo head is always right", name, args)
				}
			}
			if echo {
				_, _, drafts, errOut := run("--mtp", "--draft-p-min", "0", "--temperature", "0.8", "--seed", "3")
				assert.Positive(t, drafts[1], "%s sampling: %s", name, errOut)
			}
		}
	}
}

// TestChatMTP: chat --mtp answers each turn as chat without it does, the
// head following the conversation across turns (every draft of the
// always-right head confirmed).
func TestChatMTP(t *testing.T) {
	dir := mtpModel(t, qwenref.TinyQwen35(), true)
	input := "Tell me about a cat.\nAnd the dog?\n"
	plain := greedyChat(t, input, 2, "--model", dir, "-n", "20")
	drafted := greedyChat(t, input, 2, "--model", dir, "-n", "20", "--mtp", "--draft-p-min", "0")
	for i := range plain {
		assert.Equal(t, plain[i].Text, drafted[i].Text, "turn %d", i+1)
		m := drafted[i].Metrics
		assert.Positive(t, m.DraftTokens, "turn %d", i+1)
		assert.Equal(t, m.DraftTokens, m.DraftAccepted, "turn %d", i+1)
	}
}

// TestMTPRefused: --mtp on a model without a head (or whose checkpoint
// lacks its tensors), or with --draft-model,
// --draft-quantize or --speculate 0, is refused by name; where
// speculation cannot run (eager mode on Qwen3.5) it warns and decodes
// plainly.
func TestMTPRefused(t *testing.T) {
	noHead := t.TempDir()
	c := qwenref.TinyQwen35()
	c.Vocab, c.CausalLM = 512, true
	require.NoError(t, c.Write(noHead))
	copyStoriesTokenizer(t, noHead)
	head := mtpModel(t, qwenref.TinyQwen35(), false)
	for _, tc := range []struct {
		model string
		args  []string
		code  ExitCode
		want  string
	}{
		{storiesDir, []string{"--mtp"}, ExitUnsupported, "has no multi-token-prediction head"},
		{noHead, []string{"--mtp"}, ExitUnsupported, "missing tensors: mtp.pre_fc_norm_embedding.weight"},
		{head, []string{"--mtp", "--draft-model", storiesDir}, ExitUsage, "--mtp and --draft-model"},
		{head, []string{"--mtp", "--draft-quantize", "int8"}, ExitUsage, "--draft-quantize applies to --draft-model"},
		{head, []string{"--mtp", "--speculate", "0"}, ExitUsage, "--speculate 0 turns speculation off"},
		{head, []string{"--mtp", "--mode", "eager"}, ExitOK, "--speculate: off"},
		{head, []string{"--mtp", "-p", "A second prompt"}, ExitOK, "--speculate: off for a batch of 2 prompts"},
	} {
		e := genEnv(t)
		args := append([]string{"generate", "-m", tc.model, "-p", "Once", "-n", "4"}, tc.args...)
		assert.Equal(t, tc.code, e.run(args...), "%v: %s", tc.args, e.errOut.String())
		assert.Contains(t, e.errOut.String(), tc.want, "%v", tc.args)
	}
}

// TestServeMTP: serve --mtp answers greedy requests running alone, one
// after another (each bringing the head that followed its prompt's
// prefill), with the text and
// log-probabilities of a server decoding one token a step; with the
// always-right head every draft is confirmed; concurrent requests (the
// head set aside while they share the batch, cold again after) are
// answered as without it.
func TestServeMTP(t *testing.T) {
	dir := mtpModel(t, qwenref.TinyQwen35(), true)
	args := []string{"--model", dir, "--max-batch", "2", "--max-context", "256"}
	plainAddr, _, _ := serveModelInProcess(t, args...)
	mtpAddr, _, _ := serveModelInProcess(t, append(args, "--mtp", "--draft-p-min", "0")...)
	plain, mtp := "http://"+plainAddr, "http://"+mtpAddr
	for _, p := range []string{"Lily saw a big red ball", "Once upon a time", "Lily saw a big red ball"} {
		sameCompletion(t, plain, mtp, p, 60)
	}
	everyDraftConfirmed(t, mtp)

	sameConcurrent(t, plain, mtp, []string{"The dog", "A girl", "Tom and"}, 40)
	sameCompletion(t, plain, mtp, "Once upon a time", 60) // alone again
	assert.Equal(t, metricValue(t, mtp, "tputool_draft_tokens_total"), metricValue(t, mtp, "tputool_draft_tokens_accepted_total"))
}

// TestMTPStateFits: the memory checks of generate and chat
// (checkStateFits) and of serve (checkSlotsFit) count the
// multi-token-prediction head's KV cache where the model is read with
// its head: a host whose memory holds the model's caches exactly
// refuses them with the head's, naming it. The head's weights count in
// the held weights (checkWeightsFit's figure).
func TestMTPStateFits(t *testing.T) {
	dir := mtpModel(t, qwenref.TinyQwen35(), false)
	l, err := lmckpt.Load(dir)
	require.NoError(t, err)
	defer l.Close()
	const prompt, maxNew, context = 20, 100, 256
	f32, none := dtypes.Float32, dtypes.InvalidDType
	_, plain, ok := stateNeed(l.Model, 1, prompt, maxNew, f32, none)
	require.True(t, ok)
	slots, ok := lm.StateBytes(l.Model, 2, context, f32, none)
	require.True(t, ok)
	exactly := func(n int64) func() int64 { return func() int64 { return n } }
	require.NoError(t, checkStateFits(l.Model, 1, prompt, maxNew, 1, 1, f32, none, exactly(plain)))
	require.NoError(t, checkSlotsFit(l.Model, 2, context, 0, f32, none, exactly(slots), nil))

	weights := l.HeldBytes(lm.Holding{Compute: f32})
	require.NoError(t, l.WithMTP())
	assert.Greater(t, l.HeldBytes(lm.Holding{Compute: f32}), weights, "the head's weights count in checkWeightsFit's figure")
	head, ok := mtpStateNeed(l.Model, prompt+maxNew, f32, none)
	require.True(t, ok)
	assert.Positive(t, head)
	err = checkStateFits(l.Model, 1, prompt, maxNew, 1, 1, f32, none, exactly(plain))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "and the multi-token-prediction head's needs "+humanize.Bytes(plain+head))
	require.NoError(t, checkStateFits(l.Model, 1, prompt, maxNew, 1, 1, f32, none, exactly(plain+head)))
	err = checkSlotsFit(l.Model, 2, context, 0, f32, none, exactly(slots), nil)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "and the multi-token-prediction head's needs")
}

// TestGenerateMTPDeepSeek: generate --mtp on DeepSeek-V3 (MLA) and
// GLM-4.5 (grouped-query attention), whose heads are the checkpoint's
// layer past the model's, gives the tokens of plain greedy decoding, with
// the head's drafts proposed.
func TestGenerateMTPDeepSeek(t *testing.T) {
	ds, glm := dsref.TinyDeepSeek(), dsref.TinyGLM()
	ds.Vocab, ds.MTP, glm.Vocab, glm.MTP = 512, true, 512, true
	for name, write := range map[string]func(string) error{"deepseek-v3": ds.Write, "glm-4.5": glm.Write} {
		dir := t.TempDir()
		require.NoError(t, write(dir))
		copyStoriesTokenizer(t, dir)
		run := func(args ...string) (string, []int, [2]int, string) {
			return generateJSON(t, append([]string{"-m", dir, "-p", "Lily saw a big red ball", "-n", "40", "--temperature", "0"}, args...)...)
		}
		_, want, _, _ := run()
		for _, args := range [][]string{{"--mtp", "--draft-p-min", "0"}, {"--mtp", "--draft-p-min", "0", "--speculate", "4"}} {
			_, got, drafts, errOut := run(args...)
			assert.Equal(t, want, got, "%s %v", name, args)
			assert.Positive(t, drafts[0], "%s %v: no draft: %s", name, args, errOut)
			assert.Contains(t, errOut, "from the model's multi-token-prediction head", "%s %v", name, args)
		}
	}
}
