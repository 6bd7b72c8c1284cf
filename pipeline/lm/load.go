package lm

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/dtypes/bfloat16"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/x448/float16"

	"github.com/tputool/tputool/internal/errs"
	"github.com/tputool/tputool/loader"
	"github.com/tputool/tputool/loader/config"
	"github.com/tputool/tputool/loader/safetensors"
)

// Loaded is a model whose checkpoint matched its weight list exactly. The
// checkpoint stays memory-mapped until Close; tensors are converted on the
// host when an executor asks for them (Tensor), never before.
type Loaded struct {
	// Dir is the model directory.
	Dir string
	// Config is config.json.
	Config *config.File
	// Generation is generation_config.json, nil when the directory has none.
	Generation *config.Generation
	Model      Model
	// OnNonFinite, when set, is called by Tensor for each weight that
	// holds NaN or infinite values (a damaged download that still matches
	// its hash, a bad fp16 conversion), found while the weight is
	// converted: each piece is scanned right after it is converted, so the
	// check costs no pass of its own over the weights. The model still
	// loads.
	OnNonFinite func(safetensors.NonFiniteTensor)
	// Notes say how the checkpoint was read where it departs from the
	// causal-LM layout (a base-model checkpoint: baseModel); commands
	// print them as warnings.
	Notes []string

	ckpt    *safetensors.Checkpoint
	weights []WeightSpec
	byName  map[string]WeightSpec // the model's weights
	partOf  map[string]partRef    // the parts of assembled weights
	// int4Held and int8Held remember StoredInt4Groups' and
	// StoredInt8Groups' answers (each reads a weight's scales and zero
	// points; a large MoE has tens of thousands of parts, asked about by
	// several passes).
	int4Held map[string]int4Held
	int8Held map[string]int8Held
	// nvfp4Stacks remembers StoredNVFP4Stack's answers (parts a matrix,
	// 0 for no).
	nvfp4Stacks map[string]int
}

// spec is the model's WeightSpec of name.
func (l *Loaded) spec(name string) (WeightSpec, bool) {
	l.index()
	w, ok := l.byName[name]
	return w, ok
}

// index builds byName and partOf once.
func (l *Loaded) index() {
	if l.byName != nil {
		return
	}
	l.byName = make(map[string]WeightSpec, len(l.weights))
	l.partOf = map[string]partRef{}
	for _, w := range l.weights {
		l.byName[w.Name] = w
		at := int64(0)
		for i, p := range w.Parts {
			l.partOf[p.Name] = partRef{stack: w.Name, index: i, at: at}
			at += int64(elements(p.Shape))
		}
	}
}

// partRef places a part of an assembled weight in its stack: its index
// in the stack's Parts and the flat element offset of its data there.
type partRef struct {
	stack string
	index int
	at    int64
}

func elements(shape []int) int {
	n := 1
	for _, d := range shape {
		n *= d
	}
	return n
}

// sources are the checkpoint tensors that hold weight name (see
// WeightSpec.Sources); a name the model does not list is its own source.
func (l *Loaded) sources(name string) []WeightSpec {
	w, ok := l.spec(name)
	if !ok {
		return []WeightSpec{{Name: name}}
	}
	return w.Sources(l.ckpt.Has)
}

// view is where one checkpoint tensor's data lies for a weight read whole
// or a part read from the stack the checkpoint holds: tensor name's
// elements [first, first+n).
type view struct {
	name     string
	info     safetensors.TensorInfo
	first, n int64
}

// viewOf finds the data of name: the checkpoint's tensor of that name, or
// the range of its stack for a part the checkpoint holds only stacked
// (transformers v5 checkpoints hold experts as one [E, out, in] tensor).
func (l *Loaded) viewOf(name string) (view, error) {
	if info, ok := l.ckpt.Info(name); ok {
		return view{name: name, info: info, n: info.NumElements()}, nil
	}
	l.index()
	if ref, ok := l.partOf[name]; ok {
		if info, ok := l.ckpt.Info(ref.stack); ok {
			if l.byName[ref.stack].Transposed { // its parts are not ranges of the stored stack
				return view{}, fmt.Errorf("tensor %q: the checkpoint stores the stack transposed, so its part %q cannot be read apart", ref.stack, name)
			}
			n := int64(elements(l.partSpec(name).Shape))
			if ref.at+n > info.NumElements() {
				return view{}, fmt.Errorf("tensor %q: part %q ends at element %d, past its %d", ref.stack, name, ref.at+n, info.NumElements())
			}
			return view{name: ref.stack, info: info, first: ref.at, n: n}, nil
		}
	}
	return view{}, fmt.Errorf("checkpoint %s has no tensor %q", l.Dir, name)
}

// partSpec is the WeightSpec of a part name.
func (l *Loaded) partSpec(name string) WeightSpec {
	if ref, ok := l.partOf[name]; ok {
		return l.byName[ref.stack].Parts[ref.index]
	}
	return WeightSpec{Name: name}
}

// shapeOf is the shape weight name is read with: the checkpoint's, the
// spec's for a weight assembled from parts, the part's for a part read
// from its stack.
func (l *Loaded) shapeOf(name string) ([]int, bool) {
	if w, how := l.encoding(name); how != "" {
		return w.Shape, true
	}
	if info, ok := l.ckpt.Info(name); ok {
		return info.Shape, true
	}
	l.index()
	if w, ok := l.byName[name]; ok && len(w.Parts) > 0 {
		return w.Shape, true
	}
	if _, ok := l.partOf[name]; ok {
		if _, err := l.viewOf(name); err == nil {
			return l.partSpec(name).Shape, true
		}
	}
	return nil, false
}

// ignoredBuffer reports checkpoint tensors that transformers itself never
// loads: the rotary inverse-frequency buffers that old Llama conversions
// saved. Every other name must be used.
func ignoredBuffer(name string) bool {
	return strings.HasSuffix(name, ".rotary_emb.inv_freq")
}

// maxListed bounds how many names one error lists.
const maxListed = 8

// Load builds the architecture that m's config.json names (from the
// registry) and opens its safetensors checkpoint, checking it strictly
// against the model's weight list: a missing tensor, an unused tensor, a
// shape mismatch or a non-float dtype is an error naming the tensor. When
// the config ties the embeddings, a checkpoint that still carries
// lm_head.weight must hold the same bytes as the embedding it is tied to
// (model.embed_tokens.weight, or under the model's prefix). A model
// that reads an older layout under its own names (Renamer) gets the
// checkpoint's tensors renamed first, and one that reads a stored tensor
// as several (Splitter) gets it split before that.
// m is the model as loader resolved it: config.json is not read again.
func Load(m *loader.Checkpoint) (*Loaded, error) {
	if m.Kind != loader.Transformers || m.Config == nil {
		return nil, errs.Unsupportedf("%s is a %s pipeline, not a language model (try tputool diffuse)", m.Name(), m.Kind)
	}
	model, err := New(m.Config)
	if err != nil {
		return nil, err
	}
	gen, err := m.Generation()
	if err != nil {
		return nil, fmt.Errorf("load model: %w", err)
	}
	ckpt, err := m.OpenCheckpoint("")
	if err != nil {
		return nil, fmt.Errorf("load model %s: %w", m.Dir, err)
	}
	refused, err := splitCheckpoint(model, ckpt)
	if err == nil && len(refused) > 0 {
		more := ""
		if len(refused) > 1 {
			more = fmt.Sprintf(" (and %d more such tensors)", len(refused)-1)
		}
		ckpt.Close()
		return nil, errs.Unsupportedf("checkpoint %s does not match %s (%s config): %s%s", m.Dir, model.Spec().Architecture, m.Config.Path, refused[0], more)
	}
	var from, to string
	if err == nil {
		from, to, err = renameCheckpoint(model, ckpt)
	}
	if err != nil {
		ckpt.Close()
		return nil, fmt.Errorf("load model %s: %w", m.Dir, err)
	}
	cfg, notes, err := baseModel(m.Config, model, ckpt)
	if err == nil && cfg != m.Config {
		model, err = New(cfg)
	}
	if err != nil {
		ckpt.Close()
		return nil, err
	}
	l := &Loaded{Dir: m.Dir, Config: cfg, Generation: gen, Model: model, weights: Weights(model), ckpt: ckpt, Notes: notes}
	if err := l.check(); err != nil {
		l.ckpt.Close()
		if from != "" {
			return nil, fmt.Errorf("%w (the checkpoint's tensors are read under %s's names, as transformers renames them: %s as %s)",
				err, model.Spec().Architecture, from, to)
		}
		return nil, err
	}
	return l, nil
}

// baseModel reads a base-model checkpoint as its causal-LM class would,
// as transformers does (base_model_prefix): one saved from the bare
// decoder (Qwen3Model, LlamaModel: what sentence-transformers publishes,
// Qwen3-Embedding among them) names its tensors without "model." and
// has no lm_head. Its tensors are renamed to "model.…"; when the config
// unties a head the checkpoint lacks, the head is tied to the embedding
// (cfg, a copy of config.json with tie_word_embeddings true: the model's
// logits are then the embedding's, of no use but for the final hidden
// states its embeddings are). Any other checkpoint comes back as it was
// (cfg == orig).
func baseModel(orig *config.File, model Model, ckpt *safetensors.Checkpoint) (*config.File, []string, error) {
	const embed = "embed_tokens.weight"
	if !ckpt.Has(embed) || ckpt.Has("model."+embed) {
		return orig, nil, nil
	}
	for _, n := range ckpt.Names() {
		if strings.HasPrefix(n, "model.") {
			return orig, nil, nil
		}
	}
	if !slices.ContainsFunc(Weights(model), func(w WeightSpec) bool { return w.Name == "model."+embed }) {
		return orig, nil, nil // an architecture that names its weights otherwise
	}
	if err := ckpt.Rename(func(s string) string {
		if s == tiedHead {
			return s
		}
		return "model." + s
	}); err != nil {
		return nil, nil, err
	}
	notes := []string{fmt.Sprintf("%s holds a base model's tensors (no \"model.\" prefix): read as %s's", ckpt.Dir, model.Spec().Architecture)}
	if model.Spec().TieEmbeddings || ckpt.Has(tiedHead) {
		return orig, notes, nil
	}
	cfg := *orig
	cfg.Raw = maps.Clone(orig.Raw)
	cfg.Raw["tie_word_embeddings"] = json.RawMessage("true")
	return &cfg, append(notes, fmt.Sprintf("%s has no lm_head.weight: the head is tied to the embedding, so its logits mean nothing; it serves embeddings (the final hidden states)", ckpt.Dir)), nil
}

func (l *Loaded) check() error {
	spec := l.Model.Spec()
	strict := Expect(l.Model, l.ckpt)
	// A tied checkpoint that still carries lm_head.weight must hold the
	// embedding's bytes there; Expect only checks its shape.
	if _, skip := SkipReason(l.Model, tiedHead); spec.TieEmbeddings && l.ckpt.Has(tiedHead) && !strict.Expected(tiedHead) && !skip {
		if err := l.checkTiedHead(); err != nil {
			return err
		}
	}
	for _, w := range l.weights {
		if !w.RowNormalized {
			continue
		}
		// Quantized forms (GPTQ's qweight, compressed-tensors'
		// weight_packed...) store no tensor under the weight's name.
		_, how := l.encoding(w.Name)
		if how == "normalized" || how == "" && !l.ckpt.Has(w.Name) { // absent: reported as missing
			continue
		}
		return errs.Unsupportedf("checkpoint %s: %s is stored %s; tputool reads a weight whose rows the model normalizes (%s's) from a float tensor only",
			l.Dir, w.Name, cmp.Or(how, "in another layout"), spec.Architecture)
	}
	problems := strict.Problems()
	if len(problems) == 0 {
		return nil
	}
	if spec.FP8Block != [2]int{} {
		// AutoFP8's (and vLLM's) per-tensor FP8 also says quant_method
		// fp8, with no weight_block_size, but stores PREFIX.weight_scale.
		for _, p := range problems {
			if p.Kind == safetensors.Unused && strings.HasSuffix(p.Name, ".weight_scale") {
				return errs.Unsupportedf("checkpoint %s: quant_method fp8 (%s) with scales such as %s is per-tensor or per-channel FP8 (AutoFP8's layout); tputool reads FP8 scales as NAME_scale_inv (one a weight_block_size block, or one a tensor when weight_block_size is null)",
					l.Dir, l.Config.Path, p.Name)
			}
		}
	}
	return errs.Unsupportedf("checkpoint %s does not match %s (%s config): %s",
		l.Dir, spec.Architecture, l.Config.Path, strings.Join(problems.Grouped(maxListed), "; "))
}

func (l *Loaded) checkTiedHead() error {
	embed := tiedEmbedding(l.Model)
	hi, _ := l.ckpt.Info(tiedHead)
	ei, ok := l.ckpt.Info(embed)
	if !ok {
		return nil // reported as missing
	}
	if hi.DType == ei.DType && slices.Equal(hi.Shape, ei.Shape) {
		h, err := l.ckpt.Raw(tiedHead)
		if err != nil {
			return err
		}
		e, err := l.ckpt.Raw(embed)
		if err != nil {
			return err
		}
		if bytes.Equal(h, e) {
			return nil
		}
	}
	return errs.Unsupportedf("checkpoint %s: tie_word_embeddings is true in %s, but lm_head.weight differs from %s",
		l.Dir, l.Config.Path, embed)
}

// tiedEmbedding is the embedding a tied head shares: the model's
// "…embed_tokens.weight", under its prefix ("model.language_model." in
// the multimodal wrappers of Qwen3.5 and Gemma 4), not always
// model.embed_tokens.weight; for a model whose embedding has another
// name (NemotronH's backbone.embeddings.weight), its first EmbedWeights.
func tiedEmbedding(m Model) string {
	ws := m.EmbedWeights()
	for _, w := range ws {
		if strings.HasSuffix(w.Name, "embed_tokens.weight") {
			return w.Name
		}
	}
	if len(ws) > 0 {
		return ws[0].Name
	}
	return "model.embed_tokens.weight"
}

// Weights lists the tensors the model reads (each once).
func (l *Loaded) Weights() []WeightSpec { return l.weights }

// WeightBytes is the size of the model's tensors in the checkpoint.
func (l *Loaded) WeightBytes() int64 {
	var n int64
	for _, w := range l.weights {
		for _, t := range w.storedTensors(l.Model.Spec(), l.ckpt.Has) {
			if info, ok := l.ckpt.Info(t.name); ok {
				n += info.NumBytes()
			}
		}
	}
	return n
}

// StoredDType is the dtype a weight has in the checkpoint as GoMLX names
// it: Float32, BFloat16 or Float16; Float32 for any other stored type
// (F64, F8, integers), which executors always convert.
func (l *Loaded) StoredDType(name string) dtypes.DType {
	switch _, how := l.encoding(name); how {
	case "packed":
		return dtypes.Float16 // the scales' dtype in GPTQ and AWQ releases
	case "compressed":
		return dtypes.BFloat16 // llm-compressor's releases keep bf16 scales
	case "bitnet":
		return l.bitnetDType(name)
	}
	src := l.sources(name)[0].Name
	if src != name {
		if _, how := l.encoding(src); how != "" { // a stack of encoded parts
			return l.StoredDType(src)
		}
	}
	v, _ := l.viewOf(src)
	switch v.info.DType {
	case safetensors.BF16:
		return dtypes.BFloat16
	case safetensors.F16:
		return dtypes.Float16
	}
	return dtypes.Float32
}

// Shape is the shape Tensor returns weight name in, without decoding it;
// false when the checkpoint cannot give it (Tensor says why).
func (l *Loaded) Shape(name string) ([]int, bool) { return l.shapeOf(name) }

// Tensor returns a weight as a new host tensor of compute dtype dtype
// (Float32 or BFloat16) with the checkpoint's shape (see DecodeInto).
func (l *Loaded) Tensor(name string, dtype dtypes.DType) (*tensors.Tensor, error) {
	shape, ok := l.shapeOf(name)
	if !ok {
		if _, err := l.viewOf(name); err != nil { // why: absent, or a part that cannot be read apart
			return nil, err
		}
		return nil, fmt.Errorf("checkpoint %s has no tensor %q", l.Dir, name)
	}
	switch dtype {
	case dtypes.Float32, dtypes.BFloat16:
	default:
		return nil, errs.Unsupportedf("tensor %q: compute dtype %s is not supported (use float32 or bfloat16)", name, dtype)
	}
	t := tensors.FromShape(shapes.Make(dtype, shape...))
	var err error
	t.MustMutableFlatData(func(flat any) { err = l.DecodeInto(name, flat) })
	if err != nil {
		t.FinalizeAll()
		return nil, err
	}
	return t, nil
}

// DecodeInto converts weight name into flat, a []float32,
// []bfloat16.BFloat16 or []float16.Float16 of exactly its element count
// (a backend's shared buffer, so the weight is held once): a stored dtype
// equal to flat's is copied, others are converted (to bf16 and f16
// rounding to nearest even). NaN and infinite values go to OnNonFinite.
// The tensor's pages of the mapping are released as it is converted, in
// pieces of 64 MiB (safetensors.Checkpoint.ReleaseRange): the process
// holds the weight once, in flat, and a later read maps it in again.
func (l *Loaded) DecodeInto(name string, flat any) error {
	if w, how := l.encoding(name); how != "" {
		return l.decodeEncodedInto(w, how, flat)
	}
	if src := l.sources(name); len(src) > 1 || src[0].Name != name {
		return l.decodeParts(name, src, flat)
	}
	v, err := l.viewOf(name)
	if err != nil {
		return err
	}
	info := v.info
	var (
		convert func(at int, piece []byte)
		n       int
	)
	switch out := flat.(type) {
	case []float32:
		n = len(out)
		convert = func(at int, piece []byte) { safetensors.DecodeFloat32(out[at:], info.DType, piece) }
	case []bfloat16.BFloat16:
		n = len(out)
		convert = func(at int, piece []byte) { safetensors.DecodeBFloat16(out[at:], info.DType, piece) }
	case []float16.Float16:
		n = len(out)
		convert = func(at int, piece []byte) { safetensors.DecodeFloat16(out[at:], info.DType, piece) }
	default:
		return errs.Unsupportedf("tensor %q: cannot decode into %T (want float32, bfloat16 or float16)", name, flat)
	}
	if int64(n) != v.n {
		return fmt.Errorf("tensor %q: %d elements, destination holds %d", name, v.n, n)
	}
	if _, wide := flat.([]float32); !wide && info.DType != safetensors.F32 && info.DType != safetensors.BF16 && info.DType != safetensors.F16 {
		return errs.Unsupportedf("tensor %q: stored as %s, which converts to float32 only", name, info.DType)
	}
	return l.convertReleasing(name, v, releasePiece/max(info.DType.Size(), 1), func(at int, piece []byte, check bool) (int64, int64) {
		if !check {
			convert(at, piece)
			return 0, -1
		}
		return safetensors.ConvertChecked(info.DType, piece, func(off int, p []byte) { convert(at+off, p) })
	})
}

// decodeParts decodes the parts of an assembled weight one after the
// other into consecutive pieces of flat.
func (l *Loaded) decodeParts(name string, parts []WeightSpec, flat any) error {
	at := 0
	for _, p := range parts {
		n := elements(p.Shape) // an encoded part (GPTQ, AWQ, FP8...) has no plain tensor
		if _, how := l.encoding(p.Name); how == "" {
			v, err := l.viewOf(p.Name)
			if err != nil {
				return fmt.Errorf("%w (a part of %s)", err, name)
			}
			n = int(v.n)
		}
		var piece any
		switch out := flat.(type) {
		case []float32:
			piece = out[at:min(at+n, len(out))]
		case []bfloat16.BFloat16:
			piece = out[at:min(at+n, len(out))]
		case []float16.Float16:
			piece = out[at:min(at+n, len(out))]
		default:
			return errs.Unsupportedf("tensor %q: cannot decode into %T (want float32, bfloat16 or float16)", name, flat)
		}
		if err := l.DecodeInto(p.Name, piece); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		at += n
	}
	if at != flatLen(flat) {
		return fmt.Errorf("tensor %q: its parts hold %d elements, destination holds %d", name, at, flatLen(flat))
	}
	return nil
}

func flatLen(flat any) int {
	switch out := flat.(type) {
	case []float32:
		return len(out)
	case []bfloat16.BFloat16:
		return len(out)
	case []float16.Float16:
		return len(out)
	}
	return 0
}

// releasePiece is the number of checkpoint bytes converted before their
// pages are released (convertReleasing): the mapping of a weight being
// read holds at most this much, not the whole tensor (a 9B model's
// embedding is 2 GB).
const releasePiece = 64 << 20

// convertReleasing runs conv over the bytes of weight name's view v in
// pieces of elems elements (at: the piece's first element within the view;
// check: count NaN/Inf and return the count and the first one's index in
// the piece), releasing each piece's pages of the mapping once converted,
// and reports NaN and infinite values to OnNonFinite once for the weight.
func (l *Loaded) convertReleasing(name string, v view, elems int, conv func(at int, piece []byte, check bool) (count, first int64)) error {
	raw, err := l.ckpt.Raw(v.name)
	if err != nil {
		return err
	}
	info := v.info
	size := info.DType.Size()
	if size == 0 || int64(len(raw)) != info.NumBytes() || len(raw)%size != 0 {
		return fmt.Errorf("tensor %q: %d bytes do not hold %s elements", v.name, len(raw), info.DType)
	}
	lo := int(v.first) * size
	raw = raw[lo : lo+int(v.n)*size]
	step := max(elems, 1) * size
	check := l.OnNonFinite != nil
	nf := safetensors.NonFiniteTensor{Name: name, DType: info.DType, Elements: v.n, First: -1}
	for off := 0; off < len(raw); off += step {
		end := min(off+step, len(raw))
		if count, first := conv(off/size, raw[off:end], check); count > 0 {
			if nf.Count == 0 {
				nf.First = int64(off/size) + first
			}
			nf.Count += count
		}
		l.ckpt.ReleaseRange(v.name, int64(lo+off), int64(lo+end))
	}
	if nf.Count > 0 {
		l.OnNonFinite(nf)
	}
	return nil
}

// DecodeBlocks converts weight name to float32 in consecutive blocks of
// block elements (the last one shorter) and calls fn with each block's
// first element index and its values, in a buffer reused between calls:
// a weight is processed (quantised) with one block of f32 memory instead
// of an f32 copy of the whole tensor. NaN and infinite values go to
// OnNonFinite once, counted over the whole tensor; the pages of the
// mapping are released block by block. A weight assembled from parts is
// read part by part, blocks not crossing parts.
func (l *Loaded) DecodeBlocks(name string, block int, fn func(at int, vals []float32)) error {
	if w, how := l.encoding(name); how != "" {
		push, flush := rebatch(block, fn)
		if err := l.decodeEncoded(w, how, push); err != nil {
			return err
		}
		flush()
		return nil
	}
	if src := l.sources(name); len(src) > 1 || src[0].Name != name {
		at := 0 // an assembled weight: each part in blocks, at its offset
		for _, p := range src {
			v, err := l.viewOf(p.Name)
			if err != nil {
				return fmt.Errorf("%w (a part of %s)", err, name)
			}
			base := at
			if err := l.DecodeBlocks(p.Name, block, func(off int, vals []float32) { fn(base+off, vals) }); err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
			at += int(v.n)
		}
		return nil
	}
	v, err := l.viewOf(name)
	if err != nil {
		return err
	}
	info := v.info
	block = max(block, 1)
	buf := make([]float32, min(int64(block), v.n))
	return l.convertReleasing(name, v, block, func(at int, piece []byte, check bool) (count, first int64) {
		vals := buf[:len(piece)/info.DType.Size()]
		convert := func(off int, p []byte) { safetensors.DecodeFloat32(vals[off:], info.DType, p) }
		first = -1
		if check {
			count, first = safetensors.ConvertChecked(info.DType, piece, convert)
		} else {
			convert(0, piece)
		}
		fn(at, vals)
		return count, first
	})
}

// rebatch passes fn values in consecutive blocks of block elements (the
// last one, which flush passes, shorter) when push is given them in
// pieces of any length, in order; they are copied into a reused buffer.
func rebatch(block int, fn func(at int, vals []float32)) (push func(at int, vals []float32), flush func()) {
	block = max(block, 1)
	var buf []float32
	first := 0 // the element index of buf[0]
	push = func(at int, vals []float32) {
		for len(vals) > 0 {
			if buf == nil {
				buf = make([]float32, 0, block)
			}
			if len(buf) == 0 {
				first = at
			}
			n := min(block-len(buf), len(vals))
			buf = append(buf, vals[:n]...)
			vals, at = vals[n:], at+n
			if len(buf) == block {
				fn(first, buf)
				buf = buf[:0]
			}
		}
	}
	flush = func() {
		if len(buf) > 0 {
			fn(first, buf)
			buf = buf[:0]
		}
	}
	return push, flush
}

// Close unmaps the checkpoint.
func (l *Loaded) Close() error { return l.ckpt.Close() }
