package sample

// TokenLogprob is what a model's distribution says of one token of a
// sequence, given the tokens before it (compile.Runner.PromptLogprobs:
// a prompt's tokens, scored).
type TokenLogprob struct {
	// Logprob is the token's log-probability: its logit less the
	// log-sum-exp of all the logits, at the model's head (no sampling
	// settings).
	Logprob float32
	// Rank is 1 plus the number of tokens whose logits are strictly
	// above the token's: 1 for the model's likeliest (a greedy choice),
	// a token tied with it 1 too (vLLM's rank counts ties as above).
	Rank int
	// Top are the likeliest tokens, best first (as many as asked); equal
	// logits in the order of their ids.
	Top []TopLogprob
}

// TopLogprob is one of a token's likeliest alternatives.
type TopLogprob struct {
	ID      int
	Logprob float32
}
