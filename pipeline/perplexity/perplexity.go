// Package perplexity measures how well a language model predicts a
// text: its perplexity over the text's tokens, scored in windows of a
// fixed context that slide by a stride, as transformers' guide
// "Perplexity of fixed-length models" computes it.
//
// The first window is the text's first Context tokens and scores each of
// them but the first, which nothing precedes. Each next window ends
// Stride tokens further (at the text's end at most), holds the Context
// tokens before its end and scores the tokens the previous one did not:
// every token of the text but the first is scored exactly once, with at
// least Context−Stride tokens of the text before it in its window where
// the text has them. Every window but a short text's one holds Context
// tokens (transformers' last window holds fewer, starting at a multiple
// of the stride; here it ends at the text's end, the same tokens scored
// with more context). A larger stride is less computation, a smaller one
// more context.
package perplexity

import (
	"context"
	"fmt"
	"math"

	"github.com/tputool/tputool/internal/errs"
)

// Window is one window of a text's tokens: ids [Begin, End), of which
// the last Scored are scored.
type Window struct {
	Begin, End, Scored int
}

// Windows lays out the windows over a text of n tokens (n ≥ 2) for a
// context and a stride (1 ≤ stride < context).
func Windows(n, ctxLen, stride int) []Window {
	end := min(ctxLen, n)
	out := []Window{{Begin: 0, End: end, Scored: end - 1}}
	for end < n {
		next := min(end+stride, n)
		out = append(out, Window{Begin: next - ctxLen, End: next, Scored: next - end})
		end = next
	}
	return out
}

// Scorer returns, for each window of token ids, the log-probability
// (natural) of each of its tokens after the first given the tokens
// before it: out[i][j] for windows[i][j+1] (len(windows[i])−1 values),
// of which only those of the tokens from from[i] on are read (a scorer
// may skip the others).
type Scorer func(windows [][]int, from []int) ([][]float32, error)

// Options are Run's settings.
type Options struct {
	// Context is the most tokens a window holds (≥ 2).
	Context int
	// Stride is how far each window ends after the previous one (1 to
	// Context−1).
	Stride int
	// Batch is how many windows run together (≥ 1).
	Batch int
	// OnWindows, if set, is called after each batch with the windows
	// done and their total.
	OnWindows func(done, total int)
}

// Result is a text's perplexity.
type Result struct {
	// Tokens is the text's token count, Scored those scored (Tokens−1).
	Tokens, Scored int
	// Windows is the number of windows run.
	Windows int
	// NLL is the mean negative log-likelihood of a scored token, in nats.
	NLL float64
	// Perplexity is exp(NLL).
	Perplexity float64
	// Stderr is the standard error of Perplexity: that of the mean
	// per-token NLL, sqrt(var/(Scored−1)), times Perplexity, as
	// llama.cpp's perplexity reports its ± (0 for one scored token).
	Stderr float64
	// MinLogprob is the least log-probability of a scored token (the
	// model's worst surprise).
	MinLogprob float64
}

// Run scores ids (at least 2 tokens) window by window through score and
// returns their perplexity. ctx ending between batches stops it with an
// error wrapping errs.ErrInterrupted.
func Run(ctx context.Context, ids []int, o Options, score Scorer) (Result, error) {
	switch {
	case len(ids) < 2:
		return Result{}, errs.Usagef("the text has %d token(s): perplexity needs at least 2 (the first is only context)", len(ids))
	case o.Context < 2:
		return Result{}, errs.Usagef("context %d: want at least 2 tokens", o.Context)
	case o.Stride < 1 || o.Stride >= o.Context:
		return Result{}, errs.Usagef("stride %d: want 1 to the context less one, %d (a window's first token is only context)", o.Stride, o.Context-1)
	case o.Batch < 1:
		return Result{}, errs.Usagef("batch %d: want at least 1", o.Batch)
	}
	ws := Windows(len(ids), o.Context, o.Stride)
	var sum, sumSq float64
	res := Result{Tokens: len(ids), Windows: len(ws), MinLogprob: math.Inf(1)}
	for lo := 0; lo < len(ws); lo += o.Batch {
		if err := ctx.Err(); err != nil {
			return Result{}, fmt.Errorf("perplexity cancelled after %d of %d windows: %w", lo, len(ws), errs.ErrInterrupted)
		}
		batch := ws[lo:min(lo+o.Batch, len(ws))]
		in := make([][]int, len(batch))
		from := make([]int, len(batch))
		for i, w := range batch {
			in[i] = ids[w.Begin:w.End]
			from[i] = w.End - w.Begin - w.Scored
		}
		lps, err := score(in, from)
		if err != nil {
			return Result{}, err
		}
		if len(lps) != len(in) {
			return Result{}, fmt.Errorf("perplexity: %d results for %d windows", len(lps), len(in))
		}
		for i, w := range batch {
			lp := lps[i]
			if len(lp) != len(in[i])-1 {
				return Result{}, fmt.Errorf("perplexity: window of %d tokens scored %d", len(in[i]), len(lp))
			}
			for _, v := range lp[len(lp)-w.Scored:] {
				x := -float64(v)
				sum += x
				sumSq += x * x
				res.MinLogprob = math.Min(res.MinLogprob, float64(v))
			}
			res.Scored += w.Scored
		}
		if o.OnWindows != nil {
			o.OnWindows(lo+len(batch), len(ws))
		}
	}
	n := float64(res.Scored)
	res.NLL = sum / n
	res.Perplexity = math.Exp(res.NLL)
	if res.Scored > 1 {
		if v := sumSq/n - res.NLL*res.NLL; v > 0 {
			res.Stderr = math.Sqrt(v/(n-1)) * res.Perplexity
		}
	}
	return res, nil
}
