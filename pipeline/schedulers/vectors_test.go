package schedulers

// The diffusers scheduler test vectors: testdata/schedulers/vectors.json
// and extra_vectors.json, plus the file named by $TPUTOOL_SCHEDULER_VECTORS
// (same format) when set.
// testdata/schedulers/README.md defines the dummy model, samples and loop
// conventions this harness follows. Each vector is its own subtest; vectors
// of classes this package does not implement are skipped with the class
// name, never passed.

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/tputool/tputool/pipeline/torchrand"
)

type vector struct {
	Kind                     string          `json:"kind"`
	ID                       string          `json:"id"`
	Test                     string          `json:"test"`
	Class                    string          `json:"scheduler_class"`
	EffectiveConfig          map[string]any  `json:"effective_config"`
	NumInferenceSteps        *int            `json:"num_inference_steps"`
	SampleShape              []int           `json:"sample_shape"`
	SampleInit               string          `json:"sample_init"`
	Loop                     []string        `json:"loop"`
	Expected                 json.RawMessage `json:"expected"`
	Tolerance                json.RawMessage `json:"tolerance"`
	Deterministic            *bool           `json:"deterministic"`
	Call                     string          `json:"call"`
	Calls                    []scalarCall    `json:"calls"`
	ExpectedTimesteps        []float64       `json:"expected_timesteps"`
	ExpectedSigmas           []float64       `json:"expected_sigmas"`
	ExpectedPreviousTimestep []float64       `json:"expected_previous_timestep"`
	Comparison               string          `json:"comparison"`
	Notes                    any             `json:"notes"`
	file                     string
}

type scalarCall struct {
	Call     string  `json:"call"`
	Expected float64 `json:"expected"`
}

func loadVectors(t *testing.T, path string) []*vector {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read vectors: %v", err)
	}
	var raw []json.RawMessage
	if err := json.Unmarshal(data, &raw); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	var out []*vector
	for i, r := range raw {
		var v vector
		if err := json.Unmarshal(r, &v); err != nil {
			t.Fatalf("%s: element %d: %v", path, i, err)
		}
		if v.Kind == "meta" {
			continue
		}
		v.file = filepath.Base(path)
		out = append(out, &v)
	}
	return out
}

// vectorFiles lists the vector files to run.
func vectorFiles() []string {
	dir := filepath.Join("..", "..", "testdata", "schedulers")
	files := []string{filepath.Join(dir, "vectors.json"), filepath.Join(dir, "extra_vectors.json")}
	if extra := os.Getenv("TPUTOOL_SCHEDULER_VECTORS"); extra != "" {
		files = append(files, extra)
	}
	return files
}

// unreproducible lists classes whose vectors need something outside torch's
// RNG and numerics.
var unreproducible = map[string]string{
	"DPMSolverSDEScheduler": "needs torchsde's BrownianTree noise sampler",
}

type tally struct {
	mu   sync.Mutex
	pass map[string]int
	skip map[string]int
	fail map[string]int
}

func (c *tally) add(m map[string]int, class string) {
	c.mu.Lock()
	m[class]++
	c.mu.Unlock()
}

func TestSchedulerVectors(t *testing.T) {
	counts := &tally{pass: map[string]int{}, skip: map[string]int{}, fail: map[string]int{}}
	byID := map[string]*vector{}
	var all []*vector
	for _, f := range vectorFiles() {
		vs := loadVectors(t, f)
		for _, v := range vs {
			byID[v.ID] = v
		}
		all = append(all, vs...)
	}
	for _, v := range all {
		v := v
		name := strings.TrimSuffix(v.file, ".json") + "/" + v.ID
		t.Run(name, func(t *testing.T) {
			if reason, ok := unreproducible[v.Class]; ok {
				counts.add(counts.skip, v.Class)
				t.Skipf("%s: %s", v.Class, reason)
			}
			if _, ok := registry[v.Class]; !ok {
				counts.add(counts.skip, v.Class)
				t.Skipf("%s is not implemented", v.Class)
			}
			var err error
			switch v.Kind {
			case "full_loop":
				err = runFullLoop(t, v, byID)
			case "batch_step":
				err = runBatchStep(t, v)
			case "set_timesteps":
				err = runSetTimesteps(t, v)
			case "scalar":
				err = runScalar(t, v)
			default:
				counts.add(counts.skip, v.Class)
				t.Skipf("%s: unknown vector kind %q", v.Class, v.Kind)
			}
			var skip *skipError
			switch {
			case err == nil:
				counts.add(counts.pass, v.Class)
			case asSkip(err, &skip):
				counts.add(counts.skip, v.Class)
				t.Skipf("%s: %s", v.Class, skip.msg)
			default:
				counts.add(counts.fail, v.Class)
				t.Errorf("%s (%s): %v", v.ID, v.Class, err)
			}
		})
	}
	classes := map[string]bool{}
	for _, m := range []map[string]int{counts.pass, counts.skip, counts.fail} {
		for k := range m {
			classes[k] = true
		}
	}
	names := make([]string, 0, len(classes))
	for k := range classes {
		names = append(names, k)
	}
	sort.Strings(names)
	var sb strings.Builder
	tp, ts, tf := 0, 0, 0
	for _, k := range names {
		fmt.Fprintf(&sb, "\n  %-36s pass %3d  skip %3d  fail %3d", k, counts.pass[k], counts.skip[k], counts.fail[k])
		tp += counts.pass[k]
		ts += counts.skip[k]
		tf += counts.fail[k]
	}
	t.Logf("scheduler vectors by class:%s\n  total: pass %d, skip %d, fail %d", sb.String(), tp, ts, tf)
}

// vectorGenerator is the torch.manual_seed(0) generator of the loops. The
// vectors were recorded with torch's AVX2 normal kernel (their SA-Solver and
// score-SDE values match it to the last printed digit, and are a few float32
// ULPs from the scalar kernel); TPUTOOL_TORCHRAND_KERNEL=scalar runs them with
// torchrand's default scalar kernel instead. Both pass.
func vectorGenerator() *torchrand.Generator {
	g := torchrand.NewGenerator(0)
	if os.Getenv("TPUTOOL_TORCHRAND_KERNEL") != "scalar" {
		g.SetNormalKernel(torchrand.KernelAVX2)
	}
	return g
}

type skipError struct{ msg string }

func (e *skipError) Error() string { return "skip: " + e.msg }

func skipf(format string, args ...any) error { return &skipError{fmt.Sprintf(format, args...)} }

func asSkip(err error, target **skipError) bool {
	s, ok := err.(*skipError)
	if ok {
		*target = s
	}
	return ok
}

// ---- fixtures (testdata/schedulers/README.md) -----------------------------

// dummySample is dummy_sample_deter: torch.arange(N) reshaped to
// (C, *spatial, B), divided by N and permuted to batch first. noise uses the
// flipped arange.
func dummySample(shape []int, noise bool) []float32 {
	n := numel(shape)
	b := shape[0]
	per := n / b
	out := make([]float32, n)
	for bi := 0; bi < b; bi++ {
		for j := 0; j < per; j++ {
			idx := j*b + bi
			num := idx
			if noise {
				num = n - 1 - idx
			}
			out[bi*per+j] = float32(num) / float32(n)
		}
	}
	return out
}

// dummyModel is sample * t / (t + 1) in float32 with one t per batch element.
func dummyModel(sample []float32, shape []int, ts []float64) []float32 {
	b := shape[0]
	per := len(sample) / b
	out := make([]float32, len(sample))
	for i := range out {
		t := float32(ts[0])
		if len(ts) > 1 {
			t = float32(ts[i/per])
		}
		out[i] = (sample[i] * t) / (t + 1)
	}
	return out
}

func absSumMean(x []float32) (float64, float64) {
	abs := make([]float32, len(x))
	for i, v := range x {
		abs[i] = float32(math.Abs(float64(v)))
	}
	sum := torchSumF32(abs, sumVecWidth)
	return float64(sum), float64(sum / float32(len(x)))
}

// sumVecWidth is the float32 lane count of the torch build that produced
// the expected values (8 for AVX2, 16 for AVX512).
var sumVecWidth = 8

// torchSumF32 reproduces the summation order of torch.sum over a contiguous
// float32 CPU tensor (ATen's vectorized_inner_sum: 4-way ILP over vectors
// of w lanes, a 4-level cascade, then a horizontal sum), so that result
// sums match the recorded ones to the last bit instead of within an ULP.
func torchSumF32(x []float32, w int) float32 {
	const ilp, levels = 4, 4
	vecSize := len(x) / w
	sizeILP := vecSize / ilp
	ceilLog2 := 0
	for (1 << ceilLog2) < sizeILP {
		ceilLog2++
	}
	levelPower := max(4, ceilLog2/levels)
	levelStep := 1 << levelPower
	levelMask := levelStep - 1
	type vec []float32
	newVec := func() vec { return make(vec, w) }
	load := func(v int) vec { return vec(x[v*w : (v+1)*w]) }
	addTo := func(a, b vec) {
		for l := range a {
			a[l] += b[l]
		}
	}
	var acc [levels][ilp]vec
	for j := range acc {
		for k := range acc[j] {
			acc[j][k] = newVec()
		}
	}
	i := 0
	for i+levelStep <= sizeILP {
		for j := 0; j < levelStep; j, i = j+1, i+1 {
			for k := 0; k < ilp; k++ {
				addTo(acc[0][k], load(i*ilp+k))
			}
		}
		for j := 1; j < levels; j++ {
			for k := 0; k < ilp; k++ {
				addTo(acc[j][k], acc[j-1][k])
				acc[j-1][k] = newVec()
			}
			if i&(levelMask<<(j*levelPower)) != 0 {
				break
			}
		}
	}
	for ; i < sizeILP; i++ {
		for k := 0; k < ilp; k++ {
			addTo(acc[0][k], load(i*ilp+k))
		}
	}
	for j := 1; j < levels; j++ {
		for k := 0; k < ilp; k++ {
			addTo(acc[0][k], acc[j][k])
		}
	}
	partial := acc[0]
	for v := sizeILP * ilp; v < vecSize; v++ {
		addTo(partial[0], load(v))
	}
	for k := 1; k < ilp; k++ {
		addTo(partial[0], partial[k])
	}
	var final float32
	for k := vecSize * w; k < len(x); k++ {
		final += x[k]
	}
	for _, v := range partial[0] {
		final += v
	}
	return final
}

// ---- loop parsing ------------------------------------------------------------

// code strips a trailing comment from a loop line.
func code(line string) string {
	if i := strings.Index(line, "#"); i >= 0 {
		line = line[:i]
	}
	return strings.TrimSpace(line)
}

var callRe = regexp.MustCompile(`set_timesteps\(([^)]*)\)`)

// parseArgs splits "a, b=[1, 2], c=3" into positional and keyword args.
func parseArgs(s string) (pos []string, kw map[string]string) {
	kw = map[string]string{}
	depth, start := 0, 0
	var parts []string
	for i, c := range s {
		switch c {
		case '[', '(':
			depth++
		case ']', ')':
			depth--
		case ',':
			if depth == 0 {
				parts = append(parts, s[start:i])
				start = i + 1
			}
		}
	}
	parts = append(parts, s[start:])
	for _, p := range parts {
		p = strings.TrimSpace(p)
		if p == "" {
			continue
		}
		if k, v, ok := strings.Cut(p, "="); ok && !strings.ContainsAny(k, "[(") {
			kw[strings.TrimSpace(k)] = strings.TrimSpace(v)
		} else {
			pos = append(pos, p)
		}
	}
	return pos, kw
}

func parseList(s string) ([]float64, error) {
	s = strings.TrimSpace(s)
	s = strings.TrimPrefix(s, "[")
	s = strings.TrimSuffix(s, "]")
	var out []float64
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		v, err := strconv.ParseFloat(f, 64)
		if err != nil {
			return nil, fmt.Errorf("list element %q: %v", f, err)
		}
		out = append(out, v)
	}
	return out, nil
}

// evalInt evaluates small integer expressions such as "N - 2" or "1000 - 2".
func evalInt(expr string, vars map[string]int) (int, error) {
	// The tests' own names for the step count and the scheduler order.
	for _, alias := range []string{"self.num_inference_steps", "num_inference_steps"} {
		if _, ok := vars["N"]; ok {
			expr = strings.ReplaceAll(expr, alias, "N")
		}
	}
	expr = strings.ReplaceAll(expr, "scheduler.order", "order")
	expr = strings.ReplaceAll(expr, "len(scheduler)", "num_train_timesteps")
	toks := regexp.MustCompile(`\d+|[A-Za-z_]\w*|//|[-+*()]`).FindAllString(expr, -1)
	pos := 0
	var parseExpr, parseTerm, parseAtom func() (int, error)
	parseAtom = func() (int, error) {
		if pos >= len(toks) {
			return 0, fmt.Errorf("bad expression %q", expr)
		}
		tok := toks[pos]
		pos++
		switch {
		case tok == "(":
			v, err := parseExpr()
			if err != nil {
				return 0, err
			}
			pos++ // ")"
			return v, nil
		case tok == "-":
			v, err := parseAtom()
			return -v, err
		case tok[0] >= '0' && tok[0] <= '9':
			return strconv.Atoi(tok)
		default:
			v, ok := vars[tok]
			if !ok {
				return 0, fmt.Errorf("unknown name %q in %q", tok, expr)
			}
			return v, nil
		}
	}
	parseTerm = func() (int, error) {
		v, err := parseAtom()
		for err == nil && pos < len(toks) && (toks[pos] == "*" || toks[pos] == "//") {
			op := toks[pos]
			pos++
			var w int
			w, err = parseAtom()
			if op == "*" {
				v *= w
			} else if w != 0 {
				v /= w
			}
		}
		return v, err
	}
	parseExpr = func() (int, error) {
		v, err := parseTerm()
		for err == nil && pos < len(toks) && (toks[pos] == "+" || toks[pos] == "-") {
			op := toks[pos]
			pos++
			var w int
			w, err = parseTerm()
			if op == "+" {
				v += w
			} else {
				v -= w
			}
		}
		return v, err
	}
	return parseExpr()
}

// listVars holds list literals assigned in the loop ("timesteps = [106, 0]")
// so that set_timesteps(timesteps=timesteps) can be resolved.
var listVars = map[string]string{}

func collectListVars(lines []string) {
	clear(listVars)
	re := regexp.MustCompile(`^(\w+)\s*=\s*(\[[^\]]*\])`)
	for _, l := range lines {
		if m := re.FindStringSubmatch(code(l)); m != nil {
			listVars[m[1]] = m[2]
		}
	}
}

// timestepOptions turns the arguments of a set_timesteps call into options.
func timestepOptions(args string, n int) (TimestepOptions, error) {
	var o TimestepOptions
	pos, kw := parseArgs(args)
	vars := map[string]int{"N": n}
	if len(pos) > 0 {
		v, err := evalInt(pos[0], vars)
		if err != nil {
			return o, err
		}
		o.NumInferenceSteps = v
	}
	for k, v := range kw {
		switch k {
		case "num_inference_steps":
			x, err := evalInt(v, vars)
			if err != nil {
				return o, err
			}
			o.NumInferenceSteps = x
		case "timesteps", "sigmas":
			if lit, ok := listVars[v]; ok {
				v = lit
			}
			l, err := parseList(v)
			if err != nil {
				return o, err
			}
			if k == "timesteps" {
				o.Timesteps = l
			} else {
				o.Sigmas = l
			}
		case "device":
		default:
			return o, skipf("set_timesteps argument %q not handled by the harness", k)
		}
	}
	return o, nil
}

func applyTimesteps(s Scheduler, o TimestepOptions) error {
	if o.Timesteps == nil && o.Sigmas == nil && o.Mu == nil {
		return s.SetTimesteps(o.NumInferenceSteps)
	}
	ts, ok := s.(TimestepSetter)
	if !ok {
		return fmt.Errorf("%s does not accept custom timesteps/sigmas", s.Name())
	}
	return ts.SetTimestepsWith(o)
}

// ---- full loops ----------------------------------------------------------------

func runFullLoop(t *testing.T, v *vector, byID map[string]*vector) error {
	loop := v.Loop
	if len(loop) == 1 && strings.HasPrefix(loop[0], "same as ") {
		ref := byID[strings.TrimSpace(strings.TrimPrefix(loop[0], "same as "))]
		if ref == nil {
			return skipf("loop refers to unknown vector %q", loop[0])
		}
		loop = ref.Loop
	}
	var lines []string
	for _, l := range loop {
		for _, part := range strings.Split(code(l), ";") {
			if p := strings.TrimSpace(part); p != "" {
				lines = append(lines, p)
			}
		}
	}
	joined := strings.Join(lines, "\n")
	collectListVars(lines)
	shape := v.SampleShape
	if len(shape) == 0 {
		shape = []int{4, 3, 8, 8}
		if strings.Contains(v.SampleInit, "1d") {
			shape = []int{4, 3, 8}
		}
	}
	s, err := New(v.Class, v.EffectiveConfig)
	if err != nil {
		return fmt.Errorf("New: %w", err)
	}
	n := 0
	if v.NumInferenceSteps != nil {
		n = *v.NumInferenceSteps
	}
	if strings.Contains(joined, "step_correct") {
		sample, err := runScoreSdeVeLoopSample(s, n, shape, v)
		if err != nil {
			return err
		}
		return checkResult(t, v, sample)
	}
	// set_timesteps
	for _, l := range lines {
		if m := callRe.FindStringSubmatch(l); m != nil && strings.Contains(l, "scheduler.set_timesteps") {
			o, err := timestepOptions(m[1], n)
			if err != nil {
				return err
			}
			if err := applyTimesteps(s, o); err != nil {
				return fmt.Errorf("set_timesteps: %w", err)
			}
			break
		}
	}
	gen := vectorGenerator()
	sample := dummySample(shape, false)
	if strings.Contains(joined, "init_noise_sigma") {
		c := float32(s.InitNoiseSigma())
		for i := range sample {
			sample[i] *= c
		}
	}
	timesteps := s.Timesteps()
	vars := map[string]int{"N": n, "order": s.Order()}
	if strings.Contains(joined, "add_noise(") {
		start := -1
		for _, l := range lines {
			if strings.HasPrefix(l, "t_start =") {
				x, err := evalInt(strings.TrimPrefix(l, "t_start ="), vars)
				if err != nil {
					return err
				}
				vars["t_start"] = x
			}
		}
		sliceRe := regexp.MustCompile(`timesteps = scheduler\.timesteps\[([^:\]]+):\]`)
		for _, l := range lines {
			if m := sliceRe.FindStringSubmatch(l); m != nil {
				expr := strings.ReplaceAll(m[1], "scheduler.order", "order")
				x, err := evalInt(expr, vars)
				if err != nil {
					return err
				}
				start = x
			}
		}
		if start < 0 {
			return skipf("add_noise loop without a timesteps slice")
		}
		if start >= len(timesteps) {
			return fmt.Errorf("slice start %d beyond %d timesteps", start, len(timesteps))
		}
		timesteps = timesteps[start:]
		noise := dummySample(shape, true)
		sample, err = s.AddNoise(sample, noise, shape, timesteps[0])
		if err != nil {
			return fmt.Errorf("add_noise: %w", err)
		}
	}
	// A loop over a slice of the schedule without add_noise
	// ("for t in scheduler.timesteps[3:]").
	forSliceRe := regexp.MustCompile(`^for (?:i, )?t in (?:enumerate\()?scheduler\.timesteps\[(\d+):\]`)
	for _, l := range lines {
		if m := forSliceRe.FindStringSubmatch(l); m != nil && !strings.Contains(joined, "add_noise(") {
			k, _ := strconv.Atoi(m[1])
			if k > len(timesteps) {
				return fmt.Errorf("slice start %d beyond %d timesteps", k, len(timesteps))
			}
			timesteps = timesteps[k:]
		}
	}
	// How the loop uses scale_model_input.
	reassign, separate := false, false
	for _, l := range lines {
		if strings.Contains(l, "scale_model_input(") {
			if strings.HasPrefix(l, "sample = ") {
				reassign = true
			} else {
				separate = true
			}
		}
	}
	// Explicit step arguments.
	var opts *StepOptions
	stepRe := regexp.MustCompile(`scheduler\.step\((.*)\)`)
	for _, l := range lines {
		if m := stepRe.FindStringSubmatch(l); m != nil {
			pos, kw := parseArgs(m[1])
			if e, ok := kw["eta"]; ok {
				f, err := strconv.ParseFloat(e, 64)
				if err != nil {
					return fmt.Errorf("eta %q: %v", e, err)
				}
				opts = &StepOptions{Eta: f}
			}
			if len(pos) > 3 {
				if f, err := strconv.ParseFloat(pos[3], 64); err == nil {
					opts = &StepOptions{Eta: f}
				}
			}
		}
	}
	usePrev := strings.Contains(joined, "prev_timestep=")
	passes := 0
	for _, l := range lines {
		if strings.HasPrefix(l, "for t in") || strings.HasPrefix(l, "for i, t in") {
			passes++
		}
	}
	if strings.Contains(joined, "prk_timesteps") {
		passes = 1 // PNDM: prk then plms timesteps is one pass over all timesteps
	}
	if passes == 0 {
		passes = 1
	}
	resetBetween := strings.Contains(joined, "_step_index = None")
	for p := 0; p < passes; p++ {
		if p > 0 && resetBetween {
			si, ok := s.(StepIndexer)
			if !ok {
				return fmt.Errorf("%s cannot reset its step index", s.Name())
			}
			si.ResetStepIndex()
		}
		for ti, ts := range timesteps {
			modelIn := sample
			if reassign || separate {
				scaled, err := s.ScaleModelInput(sample, ts)
				if err != nil {
					return fmt.Errorf("scale_model_input(t=%v): %w", ts, err)
				}
				modelIn = scaled
				if reassign {
					sample = scaled
				}
			}
			out := dummyModel(modelIn, shape, []float64{ts})
			var next []float32
			stepOpts := opts
			if usePrev {
				o := StepOptions{}
				if opts != nil {
					o = *opts
				}
				if ti+1 < len(timesteps) {
					p := timesteps[ti+1]
					o.PrevTimestep = &p
				}
				stepOpts = &o
			}
			if stepOpts != nil {
				os, ok := s.(OptionStepper)
				if !ok {
					return fmt.Errorf("%s takes no step options", s.Name())
				}
				next, err = os.StepWithOptions(out, ts, sample, shape, gen, *stepOpts)
			} else {
				next, err = s.Step(out, ts, sample, shape, gen)
			}
			if err != nil {
				return fmt.Errorf("step(t=%v): %w", ts, err)
			}
			sample = next
		}
	}
	return checkResult(t, v, sample)
}

// checkResult compares |sample| sum and mean with the expected values.
func checkResult(t *testing.T, v *vector, sample []float32) error {
	var exp struct {
		Sum  *float64 `json:"result_sum"`
		Mean *float64 `json:"result_mean"`
	}
	if err := json.Unmarshal(v.Expected, &exp); err != nil {
		return skipf("expected values not in result_sum/result_mean form: %s", v.Expected)
	}
	var tol map[string]any
	_ = json.Unmarshal(v.Tolerance, &tol)
	sum, mean := absSumMean(sample)
	t.Logf("%s: sum %.6f mean %.8f (expected sum %v mean %v)", v.ID, sum, mean, deref(exp.Sum), deref(exp.Mean))
	check := func(name string, got float64, want *float64) error {
		if want == nil {
			return nil
		}
		switch tv := tol[name].(type) {
		case float64:
			if !(math.Abs(got-*want) < tv) {
				return fmt.Errorf("%s = %.6f, want %.6f ± %g (off by %.3g)", name, got, *want, tv, got-*want)
			}
		case string:
			if f, err := strconv.ParseFloat(strings.TrimSpace(tv), 64); err == nil {
				if !(math.Abs(got-*want) < f) {
					return fmt.Errorf("%s = %.6f, want %.6f ± %g (off by %.3g)", name, got, *want, f, got-*want)
				}
				return nil
			}
			if !strings.Contains(tv, "isclose") {
				return skipf("tolerance %q not understood", tv)
			}
			if !(math.Abs(got-*want) <= 1e-8+1e-5*math.Abs(*want)) {
				return fmt.Errorf("%s = %.6f, want %.6f (np.isclose rtol 1e-5)", name, got, *want)
			}
		default:
			return skipf("no tolerance for %s", name)
		}
		return nil
	}
	if err := check("result_sum", sum, exp.Sum); err != nil {
		return err
	}
	return check("result_mean", mean, exp.Mean)
}

func deref(p *float64) any {
	if p == nil {
		return nil
	}
	return *p
}

// ---- batch steps -----------------------------------------------------------

func runBatchStep(t *testing.T, v *vector) error {
	s, err := New(v.Class, v.EffectiveConfig)
	if err != nil {
		return fmt.Errorf("New: %w", err)
	}
	bs, ok := s.(BatchStepper)
	if !ok {
		return fmt.Errorf("%s has no batch_step_no_noise", v.Class)
	}
	var ts []float64
	eta := 0.0
	for _, l := range v.Loop {
		c := code(l)
		if m := callRe.FindStringSubmatch(c); m != nil && strings.Contains(c, "scheduler.set_timesteps") {
			o, err := timestepOptions(m[1], deref0(v.NumInferenceSteps))
			if err != nil {
				return err
			}
			if err := applyTimesteps(s, o); err != nil {
				return err
			}
		}
		if strings.HasPrefix(c, "timesteps = [") {
			if ts, err = parseList(strings.TrimPrefix(c, "timesteps = ")); err != nil {
				return err
			}
		}
		if m := regexp.MustCompile(`batch_step_no_noise\((.*)\)`).FindStringSubmatch(c); m != nil {
			if _, kw := parseArgs(m[1]); kw["eta"] != "" {
				if eta, err = strconv.ParseFloat(kw["eta"], 64); err != nil {
					return err
				}
			}
		}
	}
	if ts == nil {
		return skipf("batch_step loop without a timesteps list")
	}
	x := dummySample([]int{4, 3, 8, 8}, false)
	var samples []float32
	for _, d := range []float32{0, 0.1, -0.1} {
		for _, e := range x {
			samples = append(samples, e+d)
		}
	}
	shape := []int{12, 3, 8, 8}
	if len(ts) != 12 {
		return fmt.Errorf("want 12 timesteps, got %d", len(ts))
	}
	residual := dummyModel(samples, shape, ts)
	out, err := bs.BatchStepNoNoise(residual, ts, samples, shape, eta)
	if err != nil {
		return err
	}
	return checkResult(t, v, out)
}

func deref0(p *int) int {
	if p == nil {
		return 0
	}
	return *p
}

// ---- set_timesteps -------------------------------------------------------------

func runSetTimesteps(t *testing.T, v *vector) error {
	if strings.Contains(v.Call, " for ") || strings.Contains(v.Call, ";") {
		return runSetTimestepsScript(t, v)
	}
	s, err := New(v.Class, v.EffectiveConfig)
	if err != nil {
		return fmt.Errorf("New: %w", err)
	}
	m := callRe.FindStringSubmatch(v.Call)
	if m == nil {
		return skipf("call %q not understood", v.Call)
	}
	o, err := timestepOptions(m[1], 0)
	if err != nil {
		return err
	}
	err = applyTimesteps(s, o)
	var expStr string
	_ = json.Unmarshal(v.Expected, &expStr)
	if strings.Contains(expStr, "Error") || v.Comparison == "raises" {
		if err == nil {
			return fmt.Errorf("%s: want an error (%s), got timesteps %v", v.Call, expStr, s.Timesteps())
		}
		t.Logf("%s: error as expected: %v", v.Call, err)
		return nil
	}
	if err != nil {
		return fmt.Errorf("%s: %w", v.Call, err)
	}
	checked := false
	if v.ExpectedTimesteps != nil {
		got := s.Timesteps()
		if !equalFloats(got, v.ExpectedTimesteps, 0, 0) {
			return fmt.Errorf("timesteps = %v, want %v", got, v.ExpectedTimesteps)
		}
		checked = true
	}
	if v.ExpectedSigmas != nil {
		sp, ok := s.(SigmaProvider)
		if !ok {
			return fmt.Errorf("%s has no sigmas", v.Class)
		}
		if got := sp.Sigmas(); !equalFloats(got, v.ExpectedSigmas, 1e-5, 1e-8) {
			return fmt.Errorf("sigmas = %v, want %v", got, v.ExpectedSigmas)
		}
		checked = true
	}
	if v.ExpectedPreviousTimestep != nil {
		pt, ok := s.(PreviousTimesteper)
		if !ok {
			return fmt.Errorf("%s has no previous_timestep", v.Class)
		}
		ts := s.Timesteps()
		if len(ts) != len(v.ExpectedPreviousTimestep) {
			return fmt.Errorf("%d timesteps, want %d", len(ts), len(v.ExpectedPreviousTimestep))
		}
		for i, tt := range ts {
			p, err := pt.PreviousTimestep(tt)
			if err != nil {
				return err
			}
			if p != v.ExpectedPreviousTimestep[i] {
				return fmt.Errorf("previous_timestep(%v) = %v, want %v", tt, p, v.ExpectedPreviousTimestep[i])
			}
		}
		checked = true
	}
	if !checked {
		return skipf("no expected_timesteps/sigmas/previous_timestep to compare")
	}
	return nil
}

// equalFloats is torch.equal (rtol = atol = 0) or torch.allclose.
func equalFloats(got, want []float64, rtol, atol float64) bool {
	if len(got) != len(want) {
		return false
	}
	for i := range got {
		if math.Abs(got[i]-want[i]) > atol+rtol*math.Abs(want[i]) {
			return false
		}
	}
	return true
}

// runSetTimestepsScript handles multi-call set_timesteps vectors such as
// "set_timesteps(num_inference_steps=nfe) for nfe in [1,2]; set_timesteps(
// sigmas=[...])" with expected values keyed by expressions like
// "len(timesteps)", "timesteps[0]" or "custom_sigmas -> sigmas".
func runSetTimestepsScript(t *testing.T, v *vector) error {
	var exp map[string]any
	if err := json.Unmarshal(v.Expected, &exp); err != nil {
		return skipf("expected %s not understood", v.Expected)
	}
	type state struct {
		timesteps, sigmas []float64
		vars              map[string]int
	}
	run := func(args string, vars map[string]int) (*state, error) {
		s, err := New(v.Class, v.EffectiveConfig)
		if err != nil {
			return nil, err
		}
		pos, kw := parseArgs(args)
		o := TimestepOptions{}
		for _, p := range pos {
			x, err := evalInt(p, vars)
			if err != nil {
				return nil, err
			}
			o.NumInferenceSteps = x
		}
		for k, val := range kw {
			switch k {
			case "num_inference_steps":
				x, err := evalInt(val, vars)
				if err != nil {
					return nil, err
				}
				o.NumInferenceSteps = x
			case "sigmas":
				if o.Sigmas, err = parseList(val); err != nil {
					return nil, err
				}
			case "timesteps":
				if o.Timesteps, err = parseList(val); err != nil {
					return nil, err
				}
			default:
				return nil, skipf("argument %q not handled", k)
			}
		}
		if err := applyTimesteps(s, o); err != nil {
			return nil, err
		}
		st := &state{timesteps: s.Timesteps(), vars: vars}
		if sp, ok := s.(SigmaProvider); ok {
			st.sigmas = sp.Sigmas()
		}
		return st, nil
	}
	// Collect runs: plain ones (checked against the generic expectations,
	// once per loop value) and named ones (custom_sigmas, custom_timesteps).
	var plain []*state
	named := map[string]*state{}
	for _, part := range strings.Split(v.Call, ";") {
		part = strings.TrimSpace(part)
		m := callRe.FindStringSubmatch(part)
		if m == nil {
			return skipf("call %q not understood", part)
		}
		if fm := regexp.MustCompile(`for (\w+) in \[([^\]]*)\]`).FindStringSubmatch(part); fm != nil {
			vals, err := parseList(fm[2])
			if err != nil {
				return err
			}
			for _, val := range vals {
				st, err := run(m[1], map[string]int{fm[1]: int(val)})
				if err != nil {
					return fmt.Errorf("%s with %s=%v: %w", m[0], fm[1], val, err)
				}
				plain = append(plain, st)
			}
			continue
		}
		st, err := run(m[1], map[string]int{})
		if err != nil {
			return fmt.Errorf("%s: %w", m[0], err)
		}
		switch {
		case strings.Contains(m[1], "sigmas="):
			named["custom_sigmas"] = st
		case strings.Contains(m[1], "timesteps="):
			named["custom_timesteps"] = st
		default:
			plain = append(plain, st)
		}
	}
	exprRe := regexp.MustCompile(`^(len\()?(timesteps|sigmas)\)?(\[(-?\d+)?(:)?(-?\d+)?\])?$`)
	eval := func(st *state, expr string) (any, error) {
		m := exprRe.FindStringSubmatch(strings.TrimSpace(expr))
		if m == nil {
			return nil, skipf("expression %q not understood", expr)
		}
		arr := st.timesteps
		if m[2] == "sigmas" {
			arr = st.sigmas
		}
		if m[1] != "" {
			return float64(len(arr)), nil
		}
		if m[3] == "" {
			return arr, nil
		}
		idx := func(s string, def int) int {
			if s == "" {
				return def
			}
			i, _ := strconv.Atoi(s)
			if i < 0 {
				i += len(arr)
			}
			return i
		}
		if m[5] == "" {
			i := idx(m[4], 0)
			if i < 0 || i >= len(arr) {
				return nil, fmt.Errorf("%s out of range", expr)
			}
			return arr[i], nil
		}
		lo, hi := idx(m[4], 0), idx(m[6], len(arr))
		if lo < 0 || hi > len(arr) || lo > hi {
			return nil, fmt.Errorf("%s out of range", expr)
		}
		return arr[lo:hi], nil
	}
	places := 4
	if pm := regexp.MustCompile(`places=(\d)`).FindStringSubmatch(v.Comparison); pm != nil {
		places, _ = strconv.Atoi(pm[1])
	}
	tolAbs := 0.5 * math.Pow(10, -float64(places))
	compare := func(key string, got any, want any, vars map[string]int) error {
		switch w := want.(type) {
		case float64:
			g, ok := got.(float64)
			if !ok {
				return fmt.Errorf("%s: got %v, want a number %v", key, got, w)
			}
			if math.Abs(g-w) > tolAbs {
				return fmt.Errorf("%s = %v, want %v", key, g, w)
			}
		case string:
			x, err := evalInt(w, vars)
			if err != nil {
				return skipf("expected %q not understood", w)
			}
			if g, ok := got.(float64); !ok || g != float64(x) {
				return fmt.Errorf("%s = %v, want %s = %d", key, got, w, x)
			}
		case []any:
			g, ok := got.([]float64)
			if !ok || len(g) != len(w) {
				return fmt.Errorf("%s = %v, want %v", key, got, w)
			}
			for i := range w {
				wf, _ := w[i].(float64)
				if math.Abs(g[i]-wf) > 1e-5 {
					return fmt.Errorf("%s = %v, want %v", key, g, w)
				}
			}
		default:
			return skipf("expected value %v not understood", want)
		}
		return nil
	}
	keys := make([]string, 0, len(exp))
	for k := range exp {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, key := range keys {
		want := exp[key]
		if name, expr, ok := strings.Cut(key, "->"); ok {
			st := named[strings.TrimSpace(name)]
			if st == nil {
				return skipf("no run named %q", name)
			}
			got, err := eval(st, expr)
			if err != nil {
				return err
			}
			if err := compare(key, got, want, st.vars); err != nil {
				return err
			}
			continue
		}
		for _, st := range plain {
			got, err := eval(st, key)
			if err != nil {
				return err
			}
			if err := compare(key, got, want, st.vars); err != nil {
				return fmt.Errorf("%v (vars %v)", err, st.vars)
			}
		}
	}
	return nil
}

// ---- scalar calls ----------------------------------------------------------------

func runScalar(t *testing.T, v *vector) error {
	s, err := New(v.Class, v.EffectiveConfig)
	if err != nil {
		return fmt.Errorf("New: %w", err)
	}
	vc, ok := s.(VarianceCalculator)
	if !ok {
		return fmt.Errorf("%s has no _get_variance", v.Class)
	}
	tol := 1e-5
	var tolStr string
	if json.Unmarshal(v.Tolerance, &tolStr) == nil {
		if m := regexp.MustCompile(`<\s*([0-9.eE+-]+)`).FindStringSubmatch(tolStr); m != nil {
			tol, _ = strconv.ParseFloat(m[1], 64)
		}
	}
	re := regexp.MustCompile(`^_get_variance\((.*)\)$`)
	for _, c := range v.Calls {
		m := re.FindStringSubmatch(strings.TrimSpace(c.Call))
		if m == nil {
			return skipf("call %q not understood", c.Call)
		}
		pos, kw := parseArgs(m[1])
		var args []float64
		for _, p := range pos {
			f, err := strconv.ParseFloat(p, 64)
			if err != nil {
				return skipf("argument %q not understood", p)
			}
			args = append(args, f)
		}
		var pv *float64
		for k, val := range kw {
			switch k {
			case "predicted_variance":
				f, err := strconv.ParseFloat(val, 64)
				if err != nil {
					return skipf("predicted_variance %q not understood", val)
				}
				pv = &f
			case "prev_timestep":
				f, err := strconv.ParseFloat(val, 64)
				if err != nil {
					return err
				}
				args = append(args, f)
			default:
				return skipf("argument %q not handled", k)
			}
		}
		got, err := vc.Variance(args, pv)
		if err != nil {
			return fmt.Errorf("%s: %w", c.Call, err)
		}
		if !(math.Abs(got-c.Expected) < tol) {
			return fmt.Errorf("%s = %.8g, want %.8g ± %g", c.Call, got, c.Expected, tol)
		}
	}
	return nil
}

// scoreSdeVe's predictor-corrector loop (step_correct then step_pred, the
// model evaluated at sigma_t = scheduler.sigmas[i]).
type predictorCorrector interface {
	SetSigmas(n int)
	CorrectSteps() int
	StepCorrect(modelOutput, sample []float32, shape []int, gen *torchrand.Generator) ([]float32, error)
	SigmaProvider
}

func runScoreSdeVeLoopSample(s Scheduler, n int, shape []int, v *vector) ([]float32, error) {
	pc, ok := s.(predictorCorrector)
	if !ok {
		return nil, fmt.Errorf("%s has no step_correct", s.Name())
	}
	setRe := regexp.MustCompile(`scheduler\.(set_sigmas|set_timesteps)\(([^)]*)\)`)
	for _, l := range v.Loop {
		for _, m := range setRe.FindAllStringSubmatch(code(l), -1) {
			k, err := evalInt(m[2], map[string]int{"N": n})
			if err != nil {
				return nil, err
			}
			if m[1] == "set_sigmas" {
				pc.SetSigmas(k)
			} else if err := s.SetTimesteps(k); err != nil {
				return nil, err
			}
		}
	}
	gen := vectorGenerator()
	sample := dummySample(shape, false)
	sigmas := pc.Sigmas()
	for i, t := range s.Timesteps() {
		sigmaT := []float64{sigmas[i]}
		var err error
		for k := 0; k < pc.CorrectSteps(); k++ {
			if sample, err = pc.StepCorrect(dummyModel(sample, shape, sigmaT), sample, shape, gen); err != nil {
				return nil, err
			}
		}
		if sample, err = s.Step(dummyModel(sample, shape, sigmaT), t, sample, shape, gen); err != nil {
			return nil, err
		}
	}
	return sample, nil
}
