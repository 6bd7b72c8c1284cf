package safetensors

import (
	"fmt"
	"slices"
	"sort"
	"strings"
)

// Shapes is what Strict checks a model's tensors against: a checkpoint's
// tensor names and shapes. *Checkpoint satisfies it.
type Shapes interface {
	// Names lists every tensor.
	Names() []string
	// Shape returns the tensor's shape and whether it exists.
	Shape(name string) ([]int, bool)
}

// Strict is the bookkeeping of a strict load, shared by the text models
// (pipeline/lm) and the diffusion components (pipeline/diffusion/blocks):
// a model declares every tensor it reads with the shape its configuration
// implies (Expect), names the tensors it may find and not read (Ignore,
// IgnoreIf) and the older names a tensor may be stored under (Alias), and
// Problems then lists each missing, misshapen or unused tensor by name,
// so that a checkpoint that does not match its configuration is an error
// naming the tensors, never a model with random or zero weights.
type Strict struct {
	src      Shapes
	expected []expected
	byName   map[string]int
	aliases  map[string]string
	ignored  map[string][]int // name -> shape to check (nil: any)
	ignoreIf []func(name string) bool
	dtypes   []DType
	dtypeOf  map[string][]DType // tensors of their own dtypes (RequireDType)
	// LinearAsConv accepts a linear weight [out, in] stored as a 1x1
	// convolution [out, in, 1, 1] and the reverse, which diffusers
	// converts silently for attention projections.
	LinearAsConv bool
	problems     []Problem // configuration problems, in the order reported
}

type expected struct {
	name  string
	shape []int
}

// NewStrict starts checking src.
func NewStrict(src Shapes) *Strict {
	return &Strict{src: src, byName: map[string]int{}, aliases: map[string]string{}, ignored: map[string][]int{}}
}

// Expect declares a tensor the model reads with its shape and returns its
// index in declaration order. Declaring a name again returns the first
// index; a different shape the second time is reported as a bug in the
// model code.
func (s *Strict) Expect(name string, shape ...int) int {
	if i, ok := s.byName[name]; ok {
		if want := s.expected[i].shape; !slices.Equal(want, shape) {
			s.Errorf("tensor %q declared twice with shapes %v and %v (bug in the model code)", name, want, shape)
		}
		return i
	}
	i := len(s.expected)
	s.expected = append(s.expected, expected{name: name, shape: slices.Clone(shape)})
	s.byName[name] = i
	return i
}

// Expected reports whether name was declared.
func (s *Strict) Expected(name string) bool { _, ok := s.byName[name]; return ok }

// Alias lets the tensor declared as name be read from old when the
// checkpoint has no tensor called name (deprecated layouts).
func (s *Strict) Alias(name, old string) { s.aliases[name] = old }

// Ignore marks a checkpoint tensor that may be present but is not read
// (a non-persistent buffer that older exports saved). Its shape is still
// checked when shape is not empty.
func (s *Strict) Ignore(name string, shape ...int) { s.ignored[name] = slices.Clone(shape) }

// IgnoreIf marks every checkpoint tensor for which skip returns true as
// one that may be present and is not read.
func (s *Strict) IgnoreIf(skip func(name string) bool) { s.ignoreIf = append(s.ignoreIf, skip) }

// RequireDTypes makes a declared tensor stored in any other dtype a
// problem. It needs a source that also describes dtypes (Info, as
// *Checkpoint does); with any other it checks nothing.
func (s *Strict) RequireDTypes(allowed ...DType) { s.dtypes = allowed }

// RequireDType makes the declared tensor name a problem unless it is
// stored as one of allowed (an encoded tensor's bytes: MXFP4 blocks are
// U8, FP8 weights F8_E4M3 or F8_E5M2), whatever RequireDTypes allows the
// others.
func (s *Strict) RequireDType(name string, allowed ...DType) {
	if s.dtypeOf == nil {
		s.dtypeOf = map[string][]DType{}
	}
	s.dtypeOf[name] = allowed
}

// Errorf records a configuration problem found while the model is built.
func (s *Strict) Errorf(format string, args ...any) {
	s.problems = append(s.problems, Problem{Text: fmt.Sprintf(format, args...)})
}

// Stored returns the name the i-th declared tensor is stored under: its
// own, or its alias when only the alias is in the checkpoint.
func (s *Strict) Stored(i int) string {
	name := s.expected[i].name
	if _, ok := s.src.Shape(name); !ok {
		if old, ok := s.aliases[name]; ok {
			if _, ok := s.src.Shape(old); ok {
				return old
			}
		}
	}
	return name
}

// Problems lists what does not match: the configuration problems
// (Errorf), then for each declared tensor in order whether it is missing,
// misshapen or of a refused dtype, then the ignored tensors of the wrong
// shape, then the unused tensors in name order. It is empty when the
// checkpoint holds exactly the declared tensors (and ignored ones).
func (s *Strict) Problems() Problems {
	out := slices.Clone(s.problems)
	info, _ := s.src.(interface {
		Info(name string) (TensorInfo, bool)
	})
	used := make(map[string]bool, len(s.expected))
	for i, e := range s.expected {
		stored := s.Stored(i)
		used[stored] = true
		got, ok := s.src.Shape(stored)
		switch {
		case !ok:
			out = append(out, Problem{Kind: Missing, Name: e.name, Want: e.shape})
			continue
		case !s.sameShape(got, e.shape):
			out = append(out, Problem{Kind: Misshapen, Name: stored, Shape: got, Want: e.shape})
		}
		allowed := s.dtypes
		if d, ok := s.dtypeOf[e.name]; ok {
			allowed = d
		}
		if len(allowed) > 0 && info != nil {
			if t, _ := info.Info(stored); !slices.Contains(allowed, t.DType) {
				out = append(out, Problem{Kind: BadDType, Name: stored, DType: t.DType, Allowed: allowed})
			}
		}
	}
	var ignored []string
	for name := range s.ignored {
		ignored = append(ignored, name)
	}
	sort.Strings(ignored)
	for _, name := range ignored {
		want := s.ignored[name]
		if got, ok := s.src.Shape(name); ok && len(want) > 0 && !slices.Equal(got, want) {
			out = append(out, Problem{Kind: Misshapen, Name: name, Shape: got, Want: want})
		}
	}
	names := slices.Clone(s.src.Names())
	sort.Strings(names)
	for _, name := range names {
		if !used[name] && !s.isIgnored(name) {
			out = append(out, Problem{Kind: Unused, Name: name})
		}
	}
	return out
}

func (s *Strict) isIgnored(name string) bool {
	if _, ok := s.ignored[name]; ok {
		return true
	}
	for _, skip := range s.ignoreIf {
		if skip(name) {
			return true
		}
	}
	return false
}

func (s *Strict) sameShape(got, want []int) bool {
	if slices.Equal(got, want) {
		return true
	}
	if !s.LinearAsConv {
		return false
	}
	squeeze := func(d []int) []int {
		if len(d) == 4 && d[2] == 1 && d[3] == 1 {
			return d[:2]
		}
		return d
	}
	return slices.Equal(squeeze(got), squeeze(want))
}

// ProblemKind says what is wrong with a tensor.
type ProblemKind int

// The kinds of Problem.
const (
	// Config is a problem of the configuration, not of one tensor (Text).
	Config ProblemKind = iota
	// Missing is a declared tensor the checkpoint lacks (Want: its shape).
	Missing
	// Misshapen is a tensor stored with Shape where the model wants Want.
	Misshapen
	// BadDType is a tensor stored as DType, not one of Allowed.
	BadDType
	// Unused is a checkpoint tensor the model does not read.
	Unused
)

// Problem is one mismatch between a checkpoint and a model.
type Problem struct {
	Kind    ProblemKind
	Name    string // the tensor (as stored, except when Missing)
	Shape   []int  // the stored shape (Misshapen)
	Want    []int  // the declared shape (Missing, Misshapen)
	DType   DType  // the stored dtype (BadDType)
	Allowed []DType
	Text    string // the message of a Config problem
}

// String describes the problem in a sentence that quotes the tensor's
// name: `missing tensor "x" (shape [4])`, `tensor "x" has shape [7], want
// [16]`, `unused tensor "x"`.
func (p Problem) String() string {
	switch p.Kind {
	case Missing:
		return fmt.Sprintf("missing tensor %q (shape %v)", p.Name, p.Want)
	case Misshapen:
		return fmt.Sprintf("tensor %q has shape %v, want %v", p.Name, p.Shape, p.Want)
	case BadDType:
		return fmt.Sprintf("tensor %q has dtype %s (want %s)", p.Name, p.DType, dtypeList(p.Allowed))
	case Unused:
		return fmt.Sprintf("unused tensor %q", p.Name)
	}
	return p.Text
}

// brief describes the problem within its kind's group (see Grouped).
func (p Problem) brief() string {
	switch p.Kind {
	case Missing, Unused:
		return p.Name
	case Misshapen:
		return fmt.Sprintf("%s: shape %v, want %v", p.Name, p.Shape, p.Want)
	case BadDType:
		return fmt.Sprintf("%s: dtype %s (want %s)", p.Name, p.DType, dtypeList(p.Allowed))
	}
	return p.Text
}

// dtypeList spells dtypes as "F32, F16 or BF16".
func dtypeList(ds []DType) string {
	s := make([]string, len(ds))
	for i, d := range ds {
		s[i] = string(d)
	}
	if len(s) < 2 {
		return strings.Join(s, "")
	}
	return strings.Join(s[:len(s)-1], ", ") + " or " + s[len(s)-1]
}

// Problems are the mismatches Strict found.
type Problems []Problem

// Lines returns one line per problem (Problem.String), at most max of
// them and then "... and N more".
func (ps Problems) Lines(max int) []string {
	out := make([]string, 0, min(len(ps), max)+1)
	for i, p := range ps {
		if i == max {
			out = append(out, fmt.Sprintf("... and %d more", len(ps)-max))
			break
		}
		out = append(out, p.String())
	}
	return out
}

// groupNames names the groups of Grouped, by kind.
var groupNames = map[ProblemKind]string{
	Config:    "configuration problems",
	Missing:   "missing tensors",
	Misshapen: "misshapen tensors",
	BadDType:  "tensors of unsupported dtype",
	Unused:    "unused tensors (this architecture does not read them)",
}

// Grouped summarizes the problems by kind, in the order configuration,
// missing, misshapen, dtype, unused: "2 missing tensors: a; b", listing at
// most max names per kind and then "and N more".
func (ps Problems) Grouped(max int) []string {
	var out []string
	for _, kind := range []ProblemKind{Config, Missing, Misshapen, BadDType, Unused} {
		var items []string
		for _, p := range ps {
			if p.Kind == kind {
				items = append(items, p.brief())
			}
		}
		if len(items) == 0 {
			continue
		}
		what := groupNames[kind]
		shown := items[:min(len(items), max)]
		msg := fmt.Sprintf("%d %s: %s", len(items), what, strings.Join(shown, "; "))
		if len(items) > max {
			msg += fmt.Sprintf("; and %d more", len(items)-max)
		}
		out = append(out, msg)
	}
	return out
}
