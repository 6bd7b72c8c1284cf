package generate

import (
	"math/rand/v2"
	"slices"

	"github.com/tputool/tputool/internal/errs"
	"github.com/tputool/tputool/loader/config"
	"github.com/tputool/tputool/pipeline/sample"
)

// DefaultMaxNewTokens applies when neither the caller nor
// generation_config.json sets a limit.
const DefaultMaxNewTokens = 256

// defaultTopK is transformers' GenerationConfig.top_k, used when sampling
// and nothing sets top_k.
const defaultTopK = 50

// Overrides are settings given explicitly (flags); nil means not given.
type Overrides struct {
	MaxNewTokens      *int
	Temperature       *float64
	TopK              *int
	TopP              *float64
	MinP              *float64
	RepetitionPenalty *float64
	// PresencePenalty, FrequencyPenalty and LogitBias are OpenAI's
	// (sample.Options); generation_config.json has none of them.
	PresencePenalty  *float64
	FrequencyPenalty *float64
	LogitBias        map[int]float64
	// Seed seeds sampling; nil draws a random seed (Options.Sampling.Seed
	// reports it, so a run can be repeated).
	Seed *uint64
	Stop []string
}

// Resolve layers explicit settings over generation_config.json (gen, may
// be nil) over transformers' defaults, and picks the end-of-sequence ids
// (generation_config.json's, else the model config's).
//
// As in transformers, the file's do_sample decides between greedy
// decoding and sampling; giving a temperature explicitly decides it too
// (0 is greedy, > 0 samples). When sampling, top_k defaults to 50 unless
// set (pass 0 to turn it off).
func Resolve(gen *config.Generation, modelEOS []int, o Overrides) (Options, error) {
	return ResolveWith(gen, modelEOS, -1, o)
}

// ResolveWith is Resolve that also stops at the tokenizer's end token
// tokEOS (tokenizer_config.json's eos_token; negative: none) besides the
// configs' ones, as vLLM does: a chat fine-tune whose tokenizer ends turns
// with <|im_end|> while its configs still name the base model's end token
// would otherwise write on past its turn, the token itself invisible.
// (transformers' generate stops at the configs' only.)
func ResolveWith(gen *config.Generation, modelEOS []int, tokEOS int, o Overrides) (Options, error) {
	opts, err := resolve(gen, modelEOS, o)
	if err == nil && tokEOS >= 0 && !slices.Contains(opts.EOS, tokEOS) {
		opts.EOS = append(slices.Clone(opts.EOS), tokEOS)
	}
	return opts, err
}

func resolve(gen *config.Generation, modelEOS []int, o Overrides) (Options, error) {
	if gen == nil {
		gen = &config.Generation{}
	}
	opts := Options{MaxNewTokens: DefaultMaxNewTokens, EOS: gen.EOSTokenID, Stop: o.Stop}
	if len(opts.EOS) == 0 {
		opts.EOS = modelEOS
	}
	switch {
	case o.MaxNewTokens != nil:
		opts.MaxNewTokens = *o.MaxNewTokens
	case gen.MaxNewTokens != nil:
		opts.MaxNewTokens = *gen.MaxNewTokens
	}
	if gen.MaxNewTokens != nil && *gen.MaxNewTokens > 0 {
		opts.ConfigMaxNewTokens = *gen.MaxNewTokens
	}
	if opts.MaxNewTokens <= 0 {
		return Options{}, errs.Usagef("max new tokens must be positive, got %d", opts.MaxNewTokens)
	}
	s := sample.Options{RepetitionPenalty: 1}
	if o.Seed != nil {
		s.Seed = *o.Seed
	} else {
		s.Seed = rand.Uint64()
	}
	if gen.RepetitionPenalty != nil {
		s.RepetitionPenalty = *gen.RepetitionPenalty
	}
	if o.RepetitionPenalty != nil {
		s.RepetitionPenalty = *o.RepetitionPenalty
	}
	if o.PresencePenalty != nil {
		s.PresencePenalty = *o.PresencePenalty
	}
	if o.FrequencyPenalty != nil {
		s.FrequencyPenalty = *o.FrequencyPenalty
	}
	if len(o.LogitBias) > 0 {
		s.LogitBias = o.LogitBias
	}
	doSample := gen.DoSample != nil && *gen.DoSample
	if o.Temperature != nil {
		doSample = *o.Temperature > 0
	}
	if doSample {
		s.Temperature, s.TopK, s.TopP = 1, defaultTopK, 1
		if gen.Temperature != nil {
			s.Temperature = *gen.Temperature
		}
		if gen.TopK != nil {
			s.TopK = *gen.TopK
		}
		if gen.TopP != nil {
			s.TopP = *gen.TopP
		}
		if gen.MinP != nil {
			s.MinP = *gen.MinP
		}
		if o.Temperature != nil {
			s.Temperature = *o.Temperature
		}
		if o.TopK != nil {
			s.TopK = *o.TopK
		}
		if o.TopP != nil {
			s.TopP = *o.TopP
		}
		if o.MinP != nil {
			s.MinP = *o.MinP
		}
		if s.Temperature == 0 {
			// do_sample with temperature 0 in the file: greedy, as
			// transformers would refuse to sample at temperature 0.
			s.TopK, s.TopP, s.MinP = 0, 0, 0
		}
	}
	if err := s.Validate(); err != nil {
		return Options{}, errs.Usagef("%v", err)
	}
	opts.Sampling = s
	return opts, nil
}
