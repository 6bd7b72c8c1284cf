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

	"github.com/tputool/tputool/pipeline/testkit/granitehref"
	"github.com/tputool/tputool/pipeline/testkit/lfm2ref"
	"github.com/tputool/tputool/pipeline/testkit/lmckpt"
	"github.com/tputool/tputool/pipeline/testkit/nemotronhref"
	"github.com/tputool/tputool/pipeline/testkit/qwenref"
)

// draftRun runs generate --json on the stories model with args and
// returns its result's text, token ids and draft counts, and stderr.
func draftRun(t *testing.T, args ...string) (string, []int, [2]int, string) {
	t.Helper()
	return generateJSON(t, append([]string{"-m", storiesDir, "-p", "Once upon a time", "-n", "60", "--temperature", "0"}, args...)...)
}

// generateJSON runs --json -v generate with args (one prompt) and
// returns its result's text, token ids and draft counts (proposed,
// confirmed), and stderr.
func generateJSON(t *testing.T, args ...string) (string, []int, [2]int, string) {
	t.Helper()
	e := genEnv(t)
	code := e.run(append([]string{"--json", "-v", "generate"}, args...)...)
	require.Equal(t, ExitOK, code, "%v: %s", args, e.errOut.String())
	var res []struct {
		Text     string `json:"text"`
		TokenIDs []int  `json:"token_ids"`
		Metrics  struct {
			Draft    int `json:"draft_tokens"`
			Accepted int `json:"draft_accepted"`
		} `json:"metrics"`
	}
	require.NoError(t, json.Unmarshal(e.out.Bytes(), &res), e.out.String())
	require.Len(t, res, 1)
	return res[0].Text, res[0].TokenIDs, [2]int{res[0].Metrics.Draft, res[0].Metrics.Accepted}, e.errOut.String()
}

// otherDraft writes a random Llama with stories260K's tokenizer: a draft
// model that mostly disagrees with it.
func otherDraft(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	c := lmckpt.Config{Vocab: 512, Hidden: 32, Intermediate: 48, Layers: 1, Heads: 4, KVHeads: 2, HeadDim: 8, Eps: 1e-5, Tied: true, RopeTheta: []float64{10000}, Window: []int{0}}
	require.NoError(t, lmckpt.Tiny{Arch: "LlamaForCausalLM", Config: c, Seed: 11}.Write(dir))
	for _, f := range []string{"tokenizer.json", "tokenizer_config.json"} {
		b, err := os.ReadFile(filepath.Join(storiesDir, f))
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(dir, f), b, 0o644))
	}
	return dir
}

// TestGenerateDraftModel: --draft-model gives the tokens greedy decoding
// gives without it, in both modes, whether the draft model is the model
// itself (every draft confirmed: its cache is in step with the text),
// the model with int4 weights, or another model (few confirmed); it
// speculates 8 tokens a step unless --speculate says; sampling runs
// through it; --draft-p-min 1 drafts nothing.
func TestGenerateDraftModel(t *testing.T) {
	text, ids, _, _ := draftRun(t)
	other := otherDraft(t)
	for _, args := range [][]string{
		{"--draft-model", storiesDir},
		{"--draft-model", storiesDir, "--speculate", "3", "--mode", "eager"},
		{"--draft-model", storiesDir, "--draft-quantize", "int4", "--draft-p-min", "0"},
		{"--draft-model", other, "--speculate", "5"},
	} {
		got, gotIDs, drafts, errOut := draftRun(t, args...)
		assert.Equal(t, text, got, "%v", args)
		assert.Equal(t, ids, gotIDs, "%v", args)
		assert.Contains(t, errOut, "speculative decoding: up to", "%v", args)
		assert.Positive(t, drafts[0], "%v: no draft proposed", args)
		if args[1] == storiesDir && len(args) < 5 {
			assert.Equal(t, drafts[0], drafts[1], "%v: the model drafting for itself", args)
		}
	}
	_, _, _, errOut := draftRun(t, "--draft-model", storiesDir)
	assert.Contains(t, errOut, "up to 8 tokens a step from the draft model")
	_, _, drafts, _ := draftRun(t, "--draft-model", storiesDir, "--draft-p-min", "1")
	assert.Zero(t, drafts[0])
	_, _, drafts, errOut = draftRun(t, "--draft-model", other, "--temperature", "0.8", "--seed", "4")
	assert.Positive(t, drafts[0], errOut)
}

// TestGenerateDraftModelRefused: a draft model of another tokenizer, a
// diffusion pipeline or a missing folder is refused by name, as are bad
// --draft-p-min and --draft-quantize values; where speculation cannot
// run (a batch, GoMLX's go backend) the draft model is not loaded.
func TestGenerateDraftModelRefused(t *testing.T) {
	bad := otherDraft(t)
	tj := filepath.Join(bad, "tokenizer.json")
	b, err := os.ReadFile(tj)
	require.NoError(t, err)
	// Two tokens' ids swapped.
	swap := strings.NewReplacer(`"▁ha": 300`, `"▁ha": 301`, `"▁S": 301`, `"▁S": 300`)
	changed := []byte(swap.Replace(string(b)))
	require.NotEqual(t, b, changed)
	require.NoError(t, os.WriteFile(tj, changed, 0o644))
	for _, c := range []struct {
		args []string
		code ExitCode
		want string
	}{
		{[]string{"--draft-model", bad}, ExitUsage, `its token 300 is "▁S" and the model's "▁ha": a draft model needs the model's tokenizer`},
		{[]string{"--draft-model", filepath.Join(t.TempDir(), "none")}, ExitUsage, "--draft-model"},
		{[]string{"--draft-model", storiesDir, "--draft-p-min", "1.5"}, ExitUsage, "--draft-p-min 1.5"},
		{[]string{"--draft-model", storiesDir, "--draft-quantize", "int3"}, ExitUsage, `--draft-quantize "int3"`},
	} {
		e := genEnv(t)
		assert.Equal(t, c.code, e.run(append([]string{"generate", "-m", storiesDir, "-p", "Once", "-n", "4"}, c.args...)...), "%v: %s", c.args, e.errOut.String())
		assert.Contains(t, e.errOut.String(), c.want, "%v", c.args)
	}
	// Not loaded where it would not run: a broken draft model is no error.
	e := genEnv(t)
	require.Equal(t, ExitOK, e.run("generate", "-m", storiesDir, "-p", "Once", "-p", "The dog", "-n", "4", "--draft-model", bad), e.errOut.String())
	assert.Contains(t, e.errOut.String(), "--speculate: off for a batch of 2 prompts")
	e = genEnv(t)
	require.Equal(t, ExitOK, e.run("--device", "cpu:go", "generate", "-m", storiesDir, "-p", "Once", "-n", "4", "--draft-model", bad), e.errOut.String())
	assert.Contains(t, e.errOut.String(), "--speculate: off")
}

// TestChatDraftModel: chat --draft-model answers each turn as chat
// without it does, and the draft model (the model itself) continues its
// cache across turns in step with the conversation: every draft of every
// turn is confirmed.
func TestChatDraftModel(t *testing.T) {
	dir := chatModel(t)
	input := "Tell me about a cat.\nAnd the dog?\nOne more.\n"
	plain := greedyChat(t, input, 3, "--model", dir, "-n", "24")
	drafted := greedyChat(t, input, 3, "--model", dir, "-n", "24", "--draft-model", dir, "--draft-p-min", "0") // drafts at every step
	for i := range plain {
		assert.Equal(t, plain[i].Text, drafted[i].Text, "turn %d", i+1)
		m := drafted[i].Metrics
		assert.Positive(t, m.DraftTokens, "turn %d", i+1)
		assert.Equal(t, m.DraftTokens, m.DraftAccepted, "turn %d: the model drafting for itself", i+1)
	}
}

// greedyChat runs chat --json --temperature 0 with args on input and
// returns its n turns.
func greedyChat(t *testing.T, input string, n int, args ...string) []chatTurn {
	t.Helper()
	e := genEnv(t)
	e.f.IOStreams.In = strings.NewReader(input)
	require.Equal(t, ExitOK, e.run(append([]string{"chat", "--json", "--temperature", "0"}, args...)...), e.errOut.String())
	turns := chatTurns(t, e.out.Bytes())
	require.Len(t, turns, n, e.out.String())
	return turns
}

// TestServeDraftModel: serve --draft-model answers greedy requests
// running alone, one after another (the draft model's cache follows
// each), with the text and log-probabilities of a server decoding one
// token a step; the model drafting for itself, every draft is confirmed;
// concurrent requests are answered as without it.
func TestServeDraftModel(t *testing.T) {
	plainAddr, _, _ := serveInProcess(t, "--max-context", "512")
	draftAddr, _, _ := serveInProcess(t, "--max-context", "512", "--draft-model", storiesDir)
	plain, drafted := "http://"+plainAddr, "http://"+draftAddr
	for _, p := range []string{"Once upon a time", "Lily was sad and did not know what to do.", "Once upon a time"} {
		sameCompletion(t, plain, drafted, p, 120)
	}
	proposed := everyDraftConfirmed(t, drafted)

	// A sampling request: the draft model draws from its own distribution,
	// here the model's (up to rounding), so nearly every draft is taken;
	// its argmax would be taken only as often as the model picks it.
	body := `{"prompt":"Once upon a time","max_tokens":120,"temperature":1,"seed":5}`
	resp, err := http.Post(drafted+"/v1/completions", "application/json", strings.NewReader(body))
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	more := metricValue(t, drafted, "tputool_draft_tokens_total") - proposed
	taken := metricValue(t, drafted, "tputool_draft_tokens_accepted_total") - proposed
	assert.Positive(t, more)
	assert.GreaterOrEqual(t, taken, 0.9*more, "sampled drafts taken %v of %v", taken, more)

	// Four at once.
	sameConcurrent(t, plain, drafted, []string{"The dog", "A girl", "Tom and", "One day"}, 40)
}

// everyDraftConfirmed checks that the server at addr proposed drafts,
// confirmed every one and saw no failure of what drafts them; it returns
// the drafts proposed.
func everyDraftConfirmed(t *testing.T, addr string) float64 {
	t.Helper()
	proposed := metricValue(t, addr, "tputool_draft_tokens_total")
	assert.Positive(t, proposed)
	assert.Equal(t, proposed, metricValue(t, addr, "tputool_draft_tokens_accepted_total"))
	assert.Zero(t, metricValue(t, addr, "tputool_draft_errors_total"))
	return proposed
}

// sameConcurrent asks other for n-token completions of prompts all at
// once, and plain for each alone: the texts must be the same.
func sameConcurrent(t *testing.T, plain, other string, prompts []string, n int) {
	t.Helper()
	want := make([]string, len(prompts))
	for i, p := range prompts {
		want[i], _ = servedCompletion(t, plain, p, n)
	}
	got := make([]string, len(prompts))
	done := make(chan int)
	for i, p := range prompts {
		go func() {
			defer func() { done <- i }() // also after a failed require
			got[i], _ = servedCompletion(t, other, p, n)
		}()
	}
	for range prompts {
		<-done
	}
	assert.Equal(t, want, got)
}

// TestSpeculateRecurrent: Qwen3.5 and Qwen3.5-MoE (recurrent linear
// attention, whose state is restored and replayed where a draft is cut
// short) speculate by prompt lookup and with a draft model (the stories
// model, which shares their tokenizer here) with the tokens of plain
// greedy decoding, in compiled mode (eager mode warns and decodes
// plainly); a draft model with recurrent state is refused.
func TestSpeculateRecurrent(t *testing.T) {
	dense, moe := qwenref.TinyQwen35(), qwenref.TinyQwen35MoE()
	dense.Vocab, moe.Vocab, moe.Stacked = 512, 512, true
	for name, write := range map[string]func(string) error{"qwen3.5": dense.Write, "qwen3.5-moe": moe.Write} {
		dir := t.TempDir()
		require.NoError(t, write(dir))
		copyStoriesTokenizer(t, dir)
		run := func(args ...string) (string, []int, [2]int, string) {
			return generateJSON(t, append([]string{"-m", dir, "-p", "Lily saw a big red ball. Lily saw a big red ball. Lily saw", "-n", "48", "--temperature", "0"}, args...)...)
		}
		_, want, _, _ := run()
		for _, args := range [][]string{{"--speculate", "4"}, {"--speculate", "6"}, {"--draft-model", storiesDir, "--draft-p-min", "0", "--speculate", "3"}} {
			_, got, drafts, errOut := run(args...)
			assert.Equal(t, want, got, "%s %v", name, args)
			assert.Positive(t, drafts[0], "%s %v: no draft proposed: %s", name, args, errOut)
			assert.NotContains(t, errOut, "--speculate: off", "%s %v", name, args)
		}
		// Eager mode pads every step to one length, which a recurrent
		// state would replay: it does not speculate there.
		_, got, _, errOut := run("--speculate", "4", "--mode", "eager")
		assert.Equal(t, want, got, "%s eager", name)
		assert.Contains(t, errOut, "--speculate: off", "%s eager", name)
		e := genEnv(t)
		assert.Equal(t, ExitUnsupported, e.run("generate", "-m", storiesDir, "-p", "Once", "-n", "4", "--draft-model", dir), e.errOut.String())
		assert.Contains(t, e.errOut.String(), "cannot take its caches back to any earlier token", name)
	}
}

// TestDraftFlags: the draft model's flags without --draft-model, and
// --speculate 0 with it, are usage errors naming them.
func TestDraftFlags(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--draft-p-min", "0.5"}, "--draft-p-min applies to --draft-model"},
		{[]string{"--draft-quantize", "int8"}, "--draft-quantize applies to --draft-model"},
		{[]string{"--draft-model", storiesDir, "--speculate", "0"}, "--speculate 0 turns speculation off"},
	} {
		for _, cmd := range []string{"generate", "serve"} {
			e := genEnv(t)
			args := append([]string{cmd, "-m", storiesDir}, c.args...)
			if cmd == "generate" {
				args = append(args, "-p", "Once")
			}
			assert.Equal(t, ExitUsage, e.run(args...), "%v: %s", args, e.errOut.String())
			assert.Contains(t, e.errOut.String(), c.want, "%v", args)
		}
	}
}

// TestServeSpeculateRecurrent: serve --speculate on Qwen3.5's DeltaNet,
// on Granite 4.0-H's and Nemotron 3 Nano's Mamba-2 and on LFM2-MoE's
// short convolutions (a lone sequence's steps taken back by restoring
// and replaying its recurrent state) answers greedy requests with the
// text and log-probabilities of a server decoding one token a step, with
// drafts proposed, and nothing compiled after the warm-up.
func TestServeSpeculateRecurrent(t *testing.T) {
	qwen, granite, nemotron, lfm2 := qwenref.TinyQwen35(), granitehref.TinyHybrid(), nemotronhref.TinyNano(), lfm2ref.TinyMoE()
	qwen.Vocab, granite.Vocab, nemotron.Vocab, lfm2.Vocab = 512, 512, 512, 512
	for _, c := range []struct {
		name  string
		write func(dir string) error
	}{{"qwen3.5", qwen.Write}, {"granite-4.0-h", granite.Write}, {"nemotron-3-nano", nemotron.Write}, {"lfm2-moe", lfm2.Write}} {
		t.Run(c.name, func(t *testing.T) { serveSpeculateRecurrent(t, c.write) })
	}
}

func serveSpeculateRecurrent(t *testing.T, write func(dir string) error) {
	dir := t.TempDir()
	require.NoError(t, write(dir))
	copyStoriesTokenizer(t, dir)
	args := []string{"--model", dir, "--max-batch", "2", "--max-context", "256"}
	plainAddr, _, _ := serveModelInProcess(t, args...)
	specAddr, _, _ := serveModelInProcess(t, append(args, "--speculate", "4")...)
	plain, spec := "http://"+plainAddr, "http://"+specAddr
	for _, p := range []string{"Lily saw a big red ball. Lily saw a big red ball. Lily saw", "Once upon a time"} {
		sameCompletion(t, plain, spec, p, 60)
	}
	assert.Positive(t, metricValue(t, spec, "tputool_draft_tokens_total"))
	assert.Zero(t, metricValue(t, spec, "tputool_recompiles_total"), "the warm-up compiled the speculative steps and their replays")
}

// TestDraftStateFits: the model's KV caches and the draft model's
// together are checked against the (fake, 16 MiB) machine's memory before
// anything runs: a draft model of many narrow layers, whose caches for
// 500 new tokens do not fit beside the model's, is refused naming both,
// and fits for 40; serve counts it beside its slots.
func TestDraftStateFits(t *testing.T) {
	dir := t.TempDir()
	const layers = 100
	c := lmckpt.Config{Vocab: 512, Hidden: 48, Intermediate: 96, Layers: layers, Heads: 4, KVHeads: 4, HeadDim: 12, Eps: 1e-5, Tied: true,
		RopeTheta: make([]float64, layers), Window: make([]int, layers)}
	for i := range c.RopeTheta {
		c.RopeTheta[i] = 10000
	}
	require.NoError(t, lmckpt.Tiny{Arch: "LlamaForCausalLM", Config: c, Seed: 3, MaxPositions: 512}.Write(dir))
	copyStoriesTokenizer(t, dir)
	e := genEnv(t)
	assert.Equal(t, ExitUsage, e.run("generate", "-m", storiesDir, "-p", "Once", "-n", "500", "--draft-model", dir), e.errOut.String())
	assert.Contains(t, e.errOut.String(), "the KV caches of the model and the draft model needs")
	e = genEnv(t)
	assert.Equal(t, ExitOK, e.run("generate", "-m", storiesDir, "-p", "Once", "-n", "40", "--draft-model", dir), e.errOut.String())
	// serve: the slots' caches and the draft model's lone sequence's.
	e = genEnv(t)
	assert.Equal(t, ExitUsage, e.run("serve", "-m", storiesDir, "--port", "0", "--max-batch", "1", "--max-context", "500", "--draft-model", dir), e.errOut.String())
	assert.Contains(t, e.errOut.String(), "and the draft model's needs")
}
