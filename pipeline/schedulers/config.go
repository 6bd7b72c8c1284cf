package schedulers

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"sort"
	"strings"

	"github.com/tputool/tputool/internal/errs"
)

// Config is a scheduler configuration with the field names of diffusers'
// scheduler_config.json. Values are JSON-like: float64 for numbers, bool,
// string, nil for null, []any for lists. A resolved Config (what
// Scheduler.Config returns) holds the class defaults overlaid with the
// caller's fields; fields the class does not know are kept but ignored, as
// diffusers does. Infinite numbers may be written as the strings "inf" and
// "-inf".
type Config map[string]any

// ClassName returns the "_class_name" field, or "" when absent.
func (c Config) ClassName() string {
	s, _ := c["_class_name"].(string)
	return s
}

// Clone returns a deep copy of c.
func (c Config) Clone() Config {
	out := make(Config, len(c))
	for k, v := range c {
		out[k] = cloneValue(v)
	}
	return out
}

func cloneValue(v any) any {
	switch x := v.(type) {
	case []any:
		out := make([]any, len(x))
		for i := range x {
			out[i] = cloneValue(x[i])
		}
		return out
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[k] = cloneValue(e)
		}
		return out
	default:
		return v
	}
}

// Keys returns the field names in sorted order.
func (c Config) Keys() []string {
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// normalizeValue converts Go numeric types and slices to the JSON-like
// representation used in Config.
func normalizeValue(v any) any {
	switch x := v.(type) {
	case int:
		return float64(x)
	case int32:
		return float64(x)
	case int64:
		return float64(x)
	case float32:
		return float64(x)
	case []float64:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = e
		}
		return out
	case []float32:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = float64(e)
		}
		return out
	case []int:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = float64(e)
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = normalizeValue(e)
		}
		return out
	case json.Number:
		f, err := x.Float64()
		if err != nil {
			return x.String()
		}
		return f
	default:
		return v
	}
}

// resolveConfig overlays user fields on the class defaults.
func resolveConfig(class string, user map[string]any) Config {
	cfg := Config{}
	for k, v := range classDefaults[class] {
		cfg[k] = cloneValue(v)
	}
	for k, v := range user {
		cfg[k] = normalizeValue(cloneValue(v))
	}
	return cfg
}

// cfgReader reads typed fields from a resolved config, remembering the first
// error so that constructors can read everything and check once.
type cfgReader struct {
	class string
	cfg   Config
	err   error
}

func (r *cfgReader) fail(key, want string, got any) {
	if r.err == nil {
		r.err = fmt.Errorf("%s config: field %q: want %s, got %s", r.class, key, want, describe(got))
	}
}

func describe(v any) string {
	if v == nil {
		return "null"
	}
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprintf("%v", v)
	}
	return string(b)
}

// number returns a numeric field; ok is false for null or absent fields.
func (r *cfgReader) number(key string) (float64, bool) {
	v, present := r.cfg[key]
	if !present || v == nil {
		return 0, false
	}
	switch x := v.(type) {
	case float64:
		return x, true
	case bool:
		if x {
			return 1, true
		}
		return 0, true
	case string:
		switch strings.ToLower(strings.TrimSpace(x)) {
		case "inf", "+inf", "infinity", "+infinity":
			return math.Inf(1), true
		case "-inf", "-infinity":
			return math.Inf(-1), true
		case "nan":
			return math.NaN(), true
		}
	}
	r.fail(key, "a number", v)
	return 0, false
}

func (r *cfgReader) float(key string) float64 {
	f, ok := r.number(key)
	if !ok && r.err == nil {
		r.fail(key, "a number", r.cfg[key])
	}
	return f
}

func (r *cfgReader) optFloat(key string) (float64, bool) { return r.number(key) }

func (r *cfgReader) int(key string) int {
	f := r.float(key)
	if f != math.Trunc(f) || math.IsInf(f, 0) {
		r.fail(key, "an integer", r.cfg[key])
		return 0
	}
	return int(f)
}

// bool reads a flag with Python truthiness for numbers; null is false.
func (r *cfgReader) bool(key string) bool {
	v := r.cfg[key]
	switch x := v.(type) {
	case nil:
		return false
	case bool:
		return x
	case float64:
		return x != 0
	}
	r.fail(key, "true or false", v)
	return false
}

func (r *cfgReader) str(key string) string {
	s, ok := r.optStr(key)
	if !ok && r.err == nil {
		r.fail(key, "a string", r.cfg[key])
	}
	return s
}

func (r *cfgReader) optStr(key string) (string, bool) {
	v := r.cfg[key]
	switch x := v.(type) {
	case nil:
		return "", false
	case string:
		return x, true
	}
	r.fail(key, "a string", v)
	return "", false
}

// floats reads an optional list of numbers (trained_betas).
func (r *cfgReader) floats(key string) ([]float64, bool) {
	v := r.cfg[key]
	if v == nil {
		return nil, false
	}
	list, ok := v.([]any)
	if !ok {
		r.fail(key, "a list of numbers", v)
		return nil, false
	}
	out := make([]float64, len(list))
	for i, e := range list {
		f, ok := e.(float64)
		if !ok {
			r.fail(key, "a list of numbers", v)
			return nil, false
		}
		out[i] = f
	}
	return out, true
}

// ints reads an optional list of integers (disable_corrector).
func (r *cfgReader) ints(key string) []int {
	fs, _ := r.floats(key)
	out := make([]int, len(fs))
	for i, f := range fs {
		out[i] = int(f)
	}
	return out
}

// oneOf checks that a string field takes one of the allowed values; other
// values are unsupported (diffusers raises NotImplementedError or
// ValueError for them).
func (r *cfgReader) oneOf(key, val string, allowed ...string) {
	for _, a := range allowed {
		if val == a {
			return
		}
	}
	if r.err == nil {
		r.err = errs.Unsupportedf("%s config: %s %q is not supported (want one of %s)", r.class, key, val, strings.Join(allowed, ", "))
	}
}

// unsupported records an unsupported option.
func (r *cfgReader) unsupported(format string, args ...any) {
	if r.err == nil {
		r.err = errs.Unsupportedf("%s config: %s", r.class, fmt.Sprintf(format, args...))
	}
}

// invalid records an invalid combination of options (diffusers' ValueError).
func (r *cfgReader) invalid(format string, args ...any) {
	if r.err == nil {
		r.err = fmt.Errorf("%s config: %s", r.class, fmt.Sprintf(format, args...))
	}
}

// ---- scheduler_config.json ---------------------------------------------------

// ParseConfigJSON parses a diffusers scheduler_config.json document. Python's
// json module writes non-finite floats as the bare tokens Infinity,
// -Infinity and NaN (for example lambda_min_clipped); they are accepted and
// stored as "inf", "-inf" and "nan" strings.
func ParseConfigJSON(data []byte) (Config, error) {
	dec := json.NewDecoder(bytes.NewReader(replaceNonFinite(data)))
	dec.UseNumber()
	var raw map[string]any
	if err := dec.Decode(&raw); err != nil {
		return nil, fmt.Errorf("scheduler config: %w", err)
	}
	cfg := Config{}
	for k, v := range raw {
		cfg[k] = normalizeValue(v)
	}
	return cfg, nil
}

// replaceNonFinite rewrites the bare tokens NaN, Infinity and -Infinity that
// appear outside strings into JSON strings.
func replaceNonFinite(data []byte) []byte {
	var out bytes.Buffer
	inString, escaped := false, false
	for i := 0; i < len(data); i++ {
		c := data[i]
		if inString {
			out.WriteByte(c)
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
			}
			continue
		}
		if c == '"' {
			inString = true
			out.WriteByte(c)
			continue
		}
		if tok, repl, ok := nonFiniteToken(data[i:]); ok {
			out.WriteString(repl)
			i += len(tok) - 1
			continue
		}
		out.WriteByte(c)
	}
	return out.Bytes()
}

// nonFiniteToken reports whether data starts with one of Python's
// non-finite JSON tokens, and its replacement.
func nonFiniteToken(data []byte) (tok, repl string, ok bool) {
	for _, t := range [...]struct{ in, out string }{
		{"-Infinity", `"-inf"`}, {"Infinity", `"inf"`}, {"NaN", `"nan"`},
	} {
		if bytes.HasPrefix(data, []byte(t.in)) {
			return t.in, t.out, true
		}
	}
	return "", "", false
}

// FromConfigFile builds the scheduler named by "_class_name" in a diffusers
// scheduler_config.json.
func FromConfigFile(path string) (Scheduler, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read scheduler config: %w", err)
	}
	cfg, err := ParseConfigJSON(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	class := cfg.ClassName()
	if class == "" {
		return nil, fmt.Errorf("%s: no \"_class_name\" field naming the scheduler class", path)
	}
	s, err := New(class, cfg)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return s, nil
}
