package sd

import (
	"context"
	"fmt"
	"image"
	"image/color"
	"math"
	"time"

	"github.com/gomlx/gomlx/pkg/core/tensors"

	"github.com/tputool/tputool/internal/errs"
	"github.com/tputool/tputool/pipeline/diffusion/blocks"
	"github.com/tputool/tputool/pipeline/diffusion/clip"
	"github.com/tputool/tputool/pipeline/diffusion/mmdit"
	"github.com/tputool/tputool/pipeline/diffusion/unet"
	"github.com/tputool/tputool/pipeline/schedulers"
	"github.com/tputool/tputool/pipeline/torchrand"
)

// Request is one text-to-image call.
type Request struct {
	Prompt string
	// NegativePrompt is used when HasNegative (an empty negative prompt is
	// not the same as none for SDXL, which zeroes the unconditional
	// embeddings when no negative prompt is given).
	NegativePrompt string
	HasNegative    bool
	Steps          int
	// Guidance is the classifier-free guidance scale; <= 1 disables it.
	Guidance float64
	// Width and Height in pixels; 0 uses the pipeline's default size.
	Width, Height int
	// Batch is the number of images (num_images_per_prompt).
	Batch int
	Seed  uint64
	// Scheduler is a short name (schedulers.Names); empty uses the
	// pipeline's own scheduler config.
	Scheduler string
	// Eager runs each block as its own executable instead of one
	// executable per model.
	Eager bool
	// OnStep is called after each denoising step (1-based).
	OnStep func(step, total int)
	// OnPhase is called as each phase starts: PhaseEncode, PhaseCompile
	// (only when the UNet is compiled ahead of the loop), PhaseDenoise
	// (total is the number of model calls, which some schedulers make
	// differ from Steps), PhaseDecode.
	OnPhase func(phase string, total int)
}

// Phases reported through Request.OnPhase.
const (
	PhaseEncode  = "encode"
	PhaseCompile = "compile"
	PhaseDenoise = "denoise"
	PhaseDecode  = "decode"
)

// Timings of one Generate call. Compile times are included in the phase
// durations and also reported apart.
type Timings struct {
	TextEncode time.Duration
	Denoise    time.Duration
	Decode     time.Duration
	Total      time.Duration
	// Steps are the wall times of each denoising step.
	Steps []time.Duration
	// Compile* are the compilation times inside each phase.
	CompileText, CompileDenoiser, CompileDecode time.Duration
	// Compiles counts the executables compiled during the call.
	Compiles int
}

// StepSeconds is the mean time of one denoising step, compilation excluded.
func (t Timings) StepSeconds() float64 {
	if len(t.Steps) == 0 {
		return 0
	}
	return (t.Denoise - t.CompileDenoiser).Seconds() / float64(len(t.Steps))
}

// Compile is the total compilation time.
func (t Timings) Compile() time.Duration { return t.CompileText + t.CompileDenoiser + t.CompileDecode }

// Result of Generate.
type Result struct {
	Images []*image.NRGBA
	// InitialLatents are the starting noise: randn_tensor(LatentShape,
	// torch.Generator().manual_seed(Seed)), times init_noise_sigma for SD
	// and SDXL (not SD3, as in diffusers).
	InitialLatents []float32
	// Latents are the final latents [Batch, C, h, w] before VAE decoding
	// (scaled, as the scheduler leaves them).
	Latents     []float32
	LatentShape []int
	Width       int
	Height      int
	Scheduler   string // the scheduler class used
	Timings     Timings
	// NewSize is true when this pipeline had not run at this size (and
	// batch) before, so its executables were compiled.
	NewSize bool
	// Truncated lists the text encoders whose prompt was cut to the
	// tokenizer's model_max_length.
	Truncated []string
}

// compileStats returns the executor's compilations and compile time so
// far (zero when it does not count them).
func (p *Pipeline) compileStats() compileStats {
	var s compileStats
	if c, ok := p.exec.(blocks.CompileCounter); ok {
		s.compiles, s.took = c.CompileStats()
	}
	return s
}

type compileStats struct {
	compiles int
	took     time.Duration
}

// Validate checks a request against the pipeline and fills defaults.
func (p *Pipeline) Validate(req *Request) error {
	if req.Width == 0 || req.Height == 0 {
		w, h := p.DefaultSize()
		if req.Width == 0 {
			req.Width = w
		}
		if req.Height == 0 {
			req.Height = h
		}
	}
	m := p.SizeMultiple()
	if req.Width <= 0 || req.Height <= 0 || req.Width%m != 0 || req.Height%m != 0 {
		return errs.Usagef("size %dx%d: width and height must be positive multiples of %d for this model", req.Width, req.Height, m)
	}
	if p.SD3 {
		c := p.Transformer.Cfg
		gh, gw := req.Height/p.VAEScaleFactor/c.PatchSize, req.Width/p.VAEScaleFactor/c.PatchSize
		if gh > c.PosEmbedMaxSize || gw > c.PosEmbedMaxSize {
			mx := c.PosEmbedMaxSize * c.PatchSize * p.VAEScaleFactor
			return errs.Usagef("size %dx%d: this transformer takes at most %dx%d (pos_embed_max_size %d)", req.Width, req.Height, mx, mx, c.PosEmbedMaxSize)
		}
	}
	if req.Steps < 1 {
		return errs.Usagef("steps %d: need at least 1", req.Steps)
	}
	if req.Batch < 1 {
		return errs.Usagef("batch %d: need at least 1", req.Batch)
	}
	if math.IsNaN(req.Guidance) || math.IsInf(req.Guidance, 0) {
		return errs.Usagef("guidance %v is not a finite number", req.Guidance)
	}
	return nil
}

// NewScheduler builds the request's scheduler: the short name over the
// pipeline's scheduler config, or the config's own class.
func (p *Pipeline) NewScheduler(name string) (schedulers.Scheduler, error) {
	if name != "" {
		return schedulers.FromShortName(name, p.SchedulerConfig)
	}
	class := p.SchedulerConfig.ClassName()
	if class == "" {
		return nil, fmt.Errorf("%s: scheduler_config.json has no _class_name", p.Dir)
	}
	return schedulers.New(class, p.SchedulerConfig)
}

// Generate runs text-to-image.
func (p *Pipeline) Generate(ctx context.Context, req Request) (*Result, error) {
	if err := p.Validate(&req); err != nil {
		return nil, err
	}
	sched, err := p.NewScheduler(req.Scheduler)
	if err != nil {
		return nil, err
	}
	total := time.Now()
	res := &Result{Width: req.Width, Height: req.Height, Scheduler: sched.Name()}
	cfg := req.Guidance > 1
	b := req.Batch
	ub := b
	if cfg {
		ub = 2 * b
	}
	key := [3]int{req.Height, req.Width, ub}
	res.NewSize = !p.sizes[key]
	if res.NewSize && len(p.sizes) > 0 && p.warn != nil {
		p.warn("new size %dx%d (UNet batch %d): the models compile again; executables for earlier sizes stay cached",
			req.Width, req.Height, ub)
	}
	stats0 := p.compileStats()

	phase := func(name string, total int) {
		if req.OnPhase != nil {
			req.OnPhase(name, total)
		}
	}

	// 1. Prompt embeddings [ub, T, D] (unconditional first), and for SDXL
	// the pooled embeddings [ub, P] and time ids [ub, 6].
	phase(PhaseEncode, 0)
	start := time.Now()
	emb, err := p.encodePrompts(req, cfg, res)
	if err != nil {
		return nil, err
	}
	res.Timings.TextEncode = time.Since(start)
	stats1 := p.compileStats()
	res.Timings.CompileText = stats1.took - stats0.took

	// 2. Timesteps and initial latents: randn_tensor with one CPU generator,
	// times init_noise_sigma for SD and SDXL (the SD3 pipeline's
	// prepare_latents does not scale the noise).
	if err := p.startSchedule(sched, req); err != nil {
		return nil, fmt.Errorf("scheduler %s: %w", sched.Name(), err)
	}
	ch := p.LatentChannels()
	h, w := req.Height/p.VAEScaleFactor, req.Width/p.VAEScaleFactor
	shape := []int{b, ch, h, w}
	gen := torchrand.NewGenerator(req.Seed)
	latents, err := torchrand.RandnTensor([]*torchrand.Generator{gen}, shape)
	if err != nil {
		return nil, err
	}
	if !p.SD3 {
		sigma := float32(sched.InitNoiseSigma())
		for i := range latents {
			latents[i] *= sigma
		}
	}
	res.InitialLatents = append([]float32(nil), latents...)

	// 3. Denoising loop. In compiled mode the UNet executable for these
	// shapes is built first (when the executor can compile without
	// running), so that compilation is timed and shown apart from the steps.
	start = time.Now()
	timesteps := sched.Timesteps()
	n := len(latents)
	predict := func(sample []float32, t float64, precompile bool) (*tensors.Tensor, error) {
		return p.predict(sample, t, []int{ub, ch, h, w}, emb, req.Eager, precompile)
	}
	if _, ok := p.exec.(blocks.Precompiler); ok && !req.Eager && len(timesteps) > 0 {
		if res.NewSize {
			phase(PhaseCompile, 0)
		}
		if _, err := predict(make([]float32, ub*n/b), timesteps[0], true); err != nil {
			return nil, err
		}
	}
	phase(PhaseDenoise, len(timesteps))
	for i, t := range timesteps {
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("%w: denoising stopped after %s: %w", errs.ErrInterrupted, StepCount(i, len(timesteps), req.Steps), err)
		}
		stepStart := time.Now()
		in := latents
		if cfg {
			in = make([]float32, 2*n)
			copy(in, latents)
			copy(in[n:], latents)
		}
		if !p.SD3 { // the SD3 pipeline does not call scale_model_input
			if in, err = sched.ScaleModelInput(in, t); err != nil {
				return nil, fmt.Errorf("scheduler %s: %w", sched.Name(), err)
			}
		}
		out, err := predict(in, t, false)
		if err != nil {
			return nil, fmt.Errorf("step %d (t=%g): %w", i+1, t, err)
		}
		noise := tensors.MustCopyFlatData[float32](out)
		out.FinalizeAll() // the device buffer goes now, not when the GC finds it
		if cfg {
			g := float32(req.Guidance)
			guided := make([]float32, n)
			for j := range guided {
				u, c := noise[j], noise[n+j]
				guided[j] = u + g*(c-u)
			}
			noise = guided
		}
		latents, err = sched.Step(noise, t, latents, shape, gen)
		if err != nil {
			return nil, fmt.Errorf("scheduler %s step %d: %w", sched.Name(), i+1, err)
		}
		res.Timings.Steps = append(res.Timings.Steps, time.Since(stepStart))
		if req.OnStep != nil {
			req.OnStep(i+1, len(timesteps))
		}
	}
	res.Timings.Denoise = time.Since(start)
	stats2 := p.compileStats()
	// Steps exclude the ahead-of-loop compilation: Denoise includes it.
	res.Timings.CompileDenoiser = stats2.took - stats1.took
	res.Latents = append([]float32(nil), latents...)
	res.LatentShape = shape

	// 4. VAE decode and conversion to 8-bit RGB.
	phase(PhaseDecode, 0)
	start = time.Now()
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("%w: before decoding: %w", errs.ErrInterrupted, err)
	}
	if res.Images, err = p.decode(latents, shape, req.Eager); err != nil {
		return nil, err
	}
	res.Timings.Decode = time.Since(start)
	stats3 := p.compileStats()
	res.Timings.CompileDecode = stats3.took - stats2.took
	res.Timings.Compiles = stats3.compiles - stats0.compiles
	res.Timings.Total = time.Since(total)
	p.sizes[key] = true
	return res, nil
}

// predict runs the denoiser (UNet or transformer) on sample [ub, C, h, w]
// at timestep t, or only compiles it for those shapes.
func (p *Pipeline) predict(sample []float32, t float64, shape []int, emb *embeddings, eager, precompile bool) (*tensors.Tensor, error) {
	ub := shape[0]
	ts := make([]float32, ub)
	for j := range ts {
		ts[j] = float32(t)
	}
	x := tensors.FromFlatDataAndDimensions(sample, shape...)
	tt := tensors.FromFlatDataAndDimensions(ts, ub)
	if p.SD3 {
		in := mmdit.Inputs[*tensors.Tensor]{Latents: x, Timesteps: tt, Context: emb.context, Pooled: emb.pooled}
		switch {
		case precompile:
			_, err := p.Transformer.Precompile(p.exec, in)
			return nil, wrap("transformer", err)
		case eager:
			out, err := p.Transformer.Eager(p.exec, in)
			return out, wrap("transformer", err)
		}
		out, err := p.Transformer.Compiled(p.exec, in)
		return out, wrap("transformer", err)
	}
	in := unet.Inputs[*tensors.Tensor]{Sample: x, Timesteps: tt, Context: emb.context, TextEmbeds: emb.pooled, TimeIDs: emb.timeIDs}
	switch {
	case precompile:
		_, err := p.UNet.Precompile(p.exec, in)
		return nil, wrap("unet", err)
	case eager:
		out, err := p.UNet.Eager(p.exec, in)
		return out, wrap("unet", err)
	}
	out, err := p.UNet.Compiled(p.exec, in)
	return out, wrap("unet", err)
}

func wrap(what string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%s: %w", what, err)
}

// startSchedule sets the timesteps and, for SDXL, the begin index 0: the
// SDXL pipeline calls set_begin_index(0) before its loop (when the class has
// it), so the first step is at the first sigma even when the first timestep
// repeats; the SD and SD3 pipelines do not, and their schedulers find the
// step index by looking the timestep up.
func (p *Pipeline) startSchedule(s schedulers.Scheduler, req Request) error {
	if err := p.setTimesteps(s, req); err != nil {
		return err
	}
	if p.XL {
		schedulers.SetBeginIndex(s, 0)
	}
	return nil
}

// setTimesteps starts the schedule; with a flow-matching scheduler whose
// config sets use_dynamic_shifting, mu comes from the image's token count
// as in the SD3 pipeline (calculate_shift).
func (p *Pipeline) setTimesteps(s schedulers.Scheduler, req Request) error {
	cfg := s.Config()
	dyn, _ := cfg["use_dynamic_shifting"].(bool)
	ts, ok := s.(schedulers.TimestepSetter)
	if !p.SD3 || !dyn || !ok {
		return s.SetTimesteps(req.Steps)
	}
	pc := p.Transformer.Cfg.PatchSize
	seq := float64((req.Height / p.VAEScaleFactor / pc) * (req.Width / p.VAEScaleFactor / pc))
	num := func(key string, def float64) float64 {
		if v, ok := cfg[key].(float64); ok {
			return v
		}
		return def
	}
	baseSeq, maxSeq := num("base_image_seq_len", 256), num("max_image_seq_len", 4096)
	baseShift, maxShift := num("base_shift", 0.5), num("max_shift", 1.16)
	m := (maxShift - baseShift) / (maxSeq - baseSeq)
	mu := seq*m + baseShift - m*baseSeq
	return ts.SetTimestepsWith(schedulers.TimestepOptions{NumInferenceSteps: req.Steps, Mu: &mu})
}

// sd3T5Tokens is the SD3 pipeline's max_sequence_length: the T5 part of
// the prompt embeddings (zeros here, as without text_encoder_3).
const sd3T5Tokens = 256

// embeddings are the denoiser's conditioning inputs for one call.
type embeddings struct {
	context, pooled, timeIDs *tensors.Tensor
}

// StepCount describes denoising progress honestly: "5 of 20 steps", or,
// for a scheduler that calls the denoiser more often than the steps asked
// for (PNDM's PLMS repeats one timestep; Heun and KDPM2 call it twice a
// step), "5 of 26 denoiser calls (25 steps)".
func StepCount(done, calls, steps int) string {
	if calls == steps {
		return fmt.Sprintf("%d of %d steps", done, steps)
	}
	return fmt.Sprintf("%d of %d denoiser calls (%d steps)", done, calls, steps)
}

// TruncatedBy returns the text encoders whose tokenizer cuts prompt to its
// length (77 tokens for CLIP), so a caller can warn before any work.
func (p *Pipeline) TruncatedBy(prompt string) ([]string, error) {
	var names []string
	for _, te := range p.texts {
		_, truncated, err := te.tok.encode(prompt, te.tok.maxLen)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", te.name, err)
		}
		if truncated {
			names = append(names, te.name)
		}
	}
	return names, nil
}

// encodePrompts encodes the prompt (and the negative prompt when guidance
// is on) with every text encoder and assembles the UNet conditioning.
func (p *Pipeline) encodePrompts(req Request, cfg bool, res *Result) (*embeddings, error) {
	type encoded struct {
		ctx    []float32 // [T, D] (SD: last hidden state; SDXL: both penultimate states, concatenated)
		pooled []float32 // [P] SDXL only
	}
	var seqLen, width int
	encode := func(text string) (encoded, error) {
		var parts [][]float32
		var dims []int
		var out encoded
		for i, te := range p.texts {
			row, truncated, err := te.tok.encode(text, te.tok.maxLen)
			if err != nil {
				return out, fmt.Errorf("%s: %w", te.name, err)
			}
			if truncated && text == req.Prompt {
				res.Truncated = append(res.Truncated, te.name)
			}
			o, err := te.model.Encode(p.exec, te.name, [][]int{row}, req.Eager)
			if err != nil {
				return out, fmt.Errorf("%s: %w", te.name, err)
			}
			var hidden *tensors.Tensor
			switch {
			case p.SD3: // penultimate states; both pooled text_embeds, concatenated
				hidden = o.Penultimate
				out.pooled = append(out.pooled, tensors.MustCopyFlatData[float32](o.Pooled)...)
			case p.XL: // penultimate states; text_encoder_2's pooled text_embeds
				hidden = o.Penultimate
				if i == len(p.texts)-1 {
					out.pooled = tensors.MustCopyFlatData[float32](o.Pooled)
				}
			default:
				hidden = o.LastHidden
			}
			parts = append(parts, tensors.MustCopyFlatData[float32](hidden))
			dims = append(dims, hidden.Shape().Dimensions[2])
			seqLen = hidden.Shape().Dimensions[1]
		}
		// Concatenate along the feature axis: [T, D1 + D2].
		width = 0
		for _, d := range dims {
			width += d
		}
		rows, stride := seqLen, width
		if p.SD3 {
			// The CLIP features are zero-padded to joint_attention_dim and
			// followed by the T5 tokens, zeros without text_encoder_3.
			stride = p.Transformer.Cfg.JointAttentionDim
			rows = seqLen + sd3T5Tokens
		}
		out.ctx = make([]float32, rows*stride)
		off := 0
		for k, part := range parts {
			for t := 0; t < seqLen; t++ {
				copy(out.ctx[t*stride+off:], part[t*dims[k]:(t+1)*dims[k]])
			}
			off += dims[k]
		}
		return out, nil
	}
	cond, err := encode(req.Prompt)
	if err != nil {
		return nil, err
	}
	rows := []encoded{}
	if cfg {
		var uncond encoded
		if p.XL && !req.HasNegative && p.ForceZerosForEmptyPrompt {
			uncond = encoded{ctx: make([]float32, len(cond.ctx)), pooled: make([]float32, len(cond.pooled))}
		} else if uncond, err = encode(req.NegativePrompt); err != nil {
			return nil, err
		}
		for i := 0; i < req.Batch; i++ {
			rows = append(rows, uncond)
		}
	}
	for i := 0; i < req.Batch; i++ {
		rows = append(rows, cond)
	}
	ub := len(rows)
	if p.SD3 {
		seqLen += sd3T5Tokens
		width = p.Transformer.Cfg.JointAttentionDim
	}
	e := &embeddings{}
	ctxData := make([]float32, 0, ub*len(cond.ctx))
	for _, r := range rows {
		ctxData = append(ctxData, r.ctx...)
	}
	e.context = tensors.FromFlatDataAndDimensions(ctxData, ub, seqLen, width)
	if p.XL || p.SD3 {
		pooled := make([]float32, 0, ub*len(cond.pooled))
		for _, r := range rows {
			pooled = append(pooled, r.pooled...)
		}
		e.pooled = tensors.FromFlatDataAndDimensions(pooled, ub, len(cond.pooled))
	}
	if p.XL {
		// original_size + crops_coords_top_left + target_size, as (h, w).
		ids := []float32{float32(req.Height), float32(req.Width), 0, 0, float32(req.Height), float32(req.Width)}
		timeIDs := make([]float32, 0, ub*6)
		for i := 0; i < ub; i++ {
			timeIDs = append(timeIDs, ids...)
		}
		e.timeIDs = tensors.FromFlatDataAndDimensions(timeIDs, ub, 6)
	}
	return e, nil
}

// Conditioning encodes the request's prompts as Generate does and returns
// the denoiser's conditioning on the host: the context [ub, T, D]
// (unconditional rows first when guidance is on) and, for SDXL and SD3, the
// pooled embeddings [ub, P].
func (p *Pipeline) Conditioning(req Request) (context []float32, contextShape []int, pooled []float32, err error) {
	if err := p.Validate(&req); err != nil {
		return nil, nil, nil, err
	}
	emb, err := p.encodePrompts(req, req.Guidance > 1, &Result{})
	if err != nil {
		return nil, nil, nil, err
	}
	context = tensors.MustCopyFlatData[float32](emb.context)
	if emb.pooled != nil {
		pooled = tensors.MustCopyFlatData[float32](emb.pooled)
	}
	return context, emb.context.Shape().Dimensions, pooled, nil
}

// EncodeText runs one text encoder on token rows; for tests and tools.
func (p *Pipeline) EncodeText(index int, ids [][]int, eager bool) (clip.Output[*tensors.Tensor], error) {
	te := p.texts[index]
	return te.model.Encode(p.exec, te.name, ids, eager)
}

// decode unscales the latents, runs the VAE decoder and converts the
// images as diffusers' postprocess does: (x/2 + 0.5) clamped to [0, 1],
// times 255, rounded half to even.
func (p *Pipeline) decode(latents []float32, shape []int, eager bool) ([]*image.NRGBA, error) {
	z := append([]float32(nil), latents...)
	p.unscale(z, shape[1], shape[2]*shape[3])
	out, err := p.VAE.Decode(p.exec, tensors.FromFlatDataAndDimensions(z, shape...), eager)
	if err != nil {
		return nil, fmt.Errorf("vae decode: %w", err)
	}
	d := out.Shape().Dimensions // [B, 3, H, W]
	if len(d) != 4 || d[1] != 3 {
		return nil, fmt.Errorf("vae decode: output shape %v, want [B, 3, H, W]", d)
	}
	px := tensors.MustCopyFlatData[float32](out)
	return ToImages(px, d[0], d[2], d[3]), nil
}

// unscale turns the final latents z [B, C, h*w] into the VAE decoder's input
// in place, as each pipeline class does before vae.decode, in float32 as
// torch does on the CPU (the Python floats become float32 scalars):
//
//   - StableDiffusionPipeline: latents / scaling_factor;
//   - StableDiffusionXLPipeline: latents * latents_std / scaling_factor +
//     latents_mean per channel when the VAE config sets both, otherwise
//     latents / scaling_factor; never shift_factor;
//   - StableDiffusion3Pipeline: latents / scaling_factor + shift_factor
//     (0 when unset, where diffusers fails); never latents_mean/std.
func (p *Pipeline) unscale(z []float32, channels, hw int) {
	c := p.VAE.Cfg
	sf := float32(*c.ScalingFactor)
	switch {
	case p.SD3:
		var shift float32
		if c.ShiftFactor != nil {
			shift = float32(*c.ShiftFactor)
		}
		for i, v := range z {
			z[i] = float32(v/sf) + shift
		}
	case p.XL && c.LatentsMean != nil && c.LatentsStd != nil:
		for i, v := range z {
			ch := (i / hw) % channels
			z[i] = float32(float32(v*float32(c.LatentsStd[ch]))/sf) + float32(c.LatentsMean[ch])
		}
	default:
		for i, v := range z {
			z[i] = v / sf
		}
	}
}

// ToImages converts decoder output [B, 3, H, W] in [-1, 1] to 8-bit images.
func ToImages(px []float32, b, h, w int) []*image.NRGBA {
	imgs := make([]*image.NRGBA, b)
	plane := h * w
	for n := 0; n < b; n++ {
		img := image.NewNRGBA(image.Rect(0, 0, w, h))
		base := n * 3 * plane
		for y := 0; y < h; y++ {
			for x := 0; x < w; x++ {
				i := y*w + x
				img.SetNRGBA(x, y, color.NRGBA{
					R: to8(px[base+i]), G: to8(px[base+plane+i]), B: to8(px[base+2*plane+i]), A: 255,
				})
			}
		}
		imgs[n] = img
	}
	return imgs
}

func to8(v float32) uint8 {
	// float32 arithmetic as torch/numpy do it; the explicit conversions
	// keep the compiler from fusing the operations.
	f := float32(v/2) + 0.5
	if !(f > 0) { // also NaN
		f = 0
	}
	if f > 1 {
		f = 1
	}
	return uint8(math.RoundToEven(float64(float32(f * 255))))
}
