package elementwisegen

// An op is one row of the table: a backends.OpType<Name> op, with its Builder
// method, and its code for each class of element type it takes.
//
// A unary op's code is statements that set dst[i] from v. A binary op's or
// comparison's code is an expression of x and y. An empty class means the op
// does not take that class.
type op struct {
	Name string
	// Float is the code for float32 and float64 (bf16 and f16 are computed
	// in f32).
	Float string
	// F32 replaces Float for float32: a float32 routine where one exists,
	// faster than going through float64.
	F32 string
	// F32Slice names a whole-slice float32 kernel tried before the F32
	// loop: func(dst, src []float32) bool, false when it did not run
	// (kernels.Logistic, Erf and Tanh below AVX-512).
	F32Slice string
	// Int is the code for the integer types: signed ones for unary ops, all
	// of them for binary ops and comparisons.
	Int  string
	Bool string
	// Fast gives a binary op whole-slice loops without a per-element switch
	// (the others go element by element through binaryScalar). With
	// IntZeroY they cover floats only.
	Fast bool
	// IntZeroY makes an integer y of 0 give 0 instead of Go's panic.
	IntZeroY bool
}

// set is the unary code that stores expr.
func set(expr string) string { return "dst[i] = " + expr }

// viaF64 is the unary code that applies a float64 function.
func viaF64(fn string) string { return set("T(" + fn + "(float64(v)))") }

// sign keeps 0, -0 and NaN as they are.
const sign = `switch {
case v > 0:
	dst[i] = 1
case v < 0:
	dst[i] = -1
default:
	dst[i] = v
}`

var unaryTable = []op{
	{Name: "Abs", Float: viaF64("math.Abs"), Int: "if v < 0 {\nv = -v\n}\ndst[i] = v"},
	{Name: "Neg", Float: set("-v"), Int: set("-v")},
	{Name: "Sign", Float: sign, Int: sign},
	{Name: "Exp", Float: viaF64("math.Exp"), F32: set("expf(v)")},
	{Name: "Expm1", Float: viaF64("math.Expm1")},
	{Name: "Log", Float: viaF64("math.Log")},
	{Name: "Log1p", Float: viaF64("math.Log1p")},
	{Name: "Sqrt", Float: viaF64("math.Sqrt")},
	{Name: "Rsqrt", Float: set("T(1 / math.Sqrt(float64(v)))")},
	{Name: "Tanh", Float: viaF64("math.Tanh"), F32: set("float32(math.Tanh(float64(v)))"), F32Slice: "kernels.Tanh"},
	{Name: "Logistic", Float: viaF64("logistic"), F32: set("logisticf(v)"), F32Slice: "kernels.Logistic"},
	{Name: "Sin", Float: viaF64("math.Sin")},
	{Name: "Cos", Float: viaF64("math.Cos")},
	{Name: "Erf", Float: viaF64("math.Erf"), F32: set("erff(v)"), F32Slice: "kernels.Erf"},
	{Name: "Floor", Float: viaF64("math.Floor")},
	{Name: "Ceil", Float: viaF64("math.Ceil")},
	{Name: "Round", Float: viaF64("math.Round")},
	{Name: "LogicalNot", Bool: set("!v")},
}

var binaryTable = []op{
	{Name: "Add", Float: "x + y", Int: "x + y", Fast: true},
	{Name: "Sub", Float: "x - y", Int: "x - y", Fast: true},
	{Name: "Mul", Float: "x * y", Int: "x * y", Fast: true},
	{Name: "Div", Float: "x / y", Int: "x / y", Fast: true, IntZeroY: true},
	{Name: "Max", Float: "max(x, y)", Int: "max(x, y)", Fast: true},
	{Name: "Min", Float: "min(x, y)", Int: "min(x, y)", Fast: true},
	{Name: "Pow", Float: "T(math.Pow(float64(x), float64(y)))", Int: "intPow(x, y)"},
	{Name: "Rem", Float: "T(math.Mod(float64(x), float64(y)))", Int: "intRem(x, y)", IntZeroY: true},
	{Name: "LogicalAnd", Bool: "x && y"},
	{Name: "LogicalOr", Bool: "x || y"},
	{Name: "LogicalXor", Bool: "x != y"},
}

// compareTable's Float and Int must be the same: compareLoop is one
// generic loop over all number types.
var compareTable = []op{
	{Name: "Equal", Float: "x == y", Int: "x == y", Bool: "x == y"},
	{Name: "NotEqual", Float: "x != y", Int: "x != y", Bool: "x != y"},
	{Name: "LessThan", Float: "x < y", Int: "x < y"},
	{Name: "LessOrEqual", Float: "x <= y", Int: "x <= y"},
	{Name: "GreaterThan", Float: "x > y", Int: "x > y"},
	{Name: "GreaterOrEqual", Float: "x >= y", Int: "x >= y"},
}

// numberTypes are the Go types of the generic loops (the number
// constraint), in the order the type switches test them.
var numberTypes = []string{
	"float32", "float64",
	"int8", "int16", "int32", "int64",
	"uint8", "uint16", "uint32", "uint64",
}

// A half is a 16-bit float type, computed in f32.
type half struct {
	Type   string // Go type
	Widen  string // func(dst []float32, src []Type): exact widening
	Narrow string // func(dst []Type, src []float32): rounding to Type
}

var halfTypes = []half{
	{Type: "bfloat16.BFloat16", Widen: "widenBF16s", Narrow: "narrowBF16s"},
	{Type: "float16.Float16", Widen: "widenF16s", Narrow: "narrowF16s"},
}
