// Package elementwisegen renders tpu/cpu's elementwise_gen.go: the
// per-op and per-dtype loops of the cpu backend's elementwise ops, from
// the op table in table.go and the template elementwise.go.tmpl. Each op
// gets its own loop with the op chosen before the loop, as hand-written
// code would; nothing is called through a function value per element.
//
// To add or change an elementwise op, edit the table and run
// `go generate ./tpu/cpu`.
package elementwisegen

import (
	"bytes"
	_ "embed"
	"fmt"
	"go/format"
	"strings"
	"text/template"
)

// FileName is the generated file, in tpu/cpu.
const FileName = "elementwise_gen.go"

//go:embed elementwise.go.tmpl
var tmplText string

// A layout is one operand layout binaryLoop has whole-slice loops for:
// Cond selects it, Pre runs once, and Loop opens the loop, with x and y set
// for element i.
type layout struct {
	Cond, Pre, Loop string
}

var layouts = []layout{
	{Cond: "len(a) == n && len(c) == n", Pre: "a, c = a[:n], c[:n]", Loop: "for i := range dst {\nx, y := a[i], c[i]"},
	{Cond: "len(c) == 1 && len(a) == n", Pre: "y := c[0]", Loop: "for i, x := range a {"},
	{Cond: "len(a) == 1 && len(c) == n", Pre: "x := a[0]", Loop: "for i, y := range c {"},
}

// SameForInt reports whether the op's integer code is its float code with
// nothing extra for integers.
func (o op) SameForInt() bool { return o.Int == o.Float && !o.IntZeroY }

type data struct {
	Unary, Binary, Compare []op
	BinaryAndCompare       []op
	Numbers                []string
	Ints                   []string
	SignedInts             []string
	Halves                 []half
	Layouts                []layout
}

// Render returns the contents of elementwise_gen.go, gofmt'ed.
func Render() ([]byte, error) {
	if err := check(); err != nil {
		return nil, err
	}
	d := data{
		Unary:            unaryTable,
		Binary:           binaryTable,
		Compare:          compareTable,
		BinaryAndCompare: append(append([]op{}, binaryTable...), compareTable...),
		Numbers:          numberTypes,
		Halves:           halfTypes,
		Layouts:          layouts,
	}
	for _, t := range numberTypes {
		if !strings.HasPrefix(t, "float") {
			d.Ints = append(d.Ints, t)
		}
		if strings.HasPrefix(t, "int") {
			d.SignedInts = append(d.SignedInts, t)
		}
	}
	tmpl, err := template.New(FileName).Funcs(template.FuncMap{"join": strings.Join}).Parse(tmplText)
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	if err := tmpl.Execute(&buf, d); err != nil {
		return nil, err
	}
	src, err := format.Source(buf.Bytes())
	if err != nil {
		return nil, fmt.Errorf("generated code does not parse: %w\n%s", err, buf.Bytes())
	}
	return src, nil
}

// check rejects rows the template cannot render.
func check() error {
	for _, o := range unaryTable {
		if o.IntZeroY || o.Fast {
			return fmt.Errorf("unary op %s: IntZeroY and Fast are for binary ops", o.Name)
		}
		if o.F32 != "" && o.Float == "" {
			return fmt.Errorf("unary op %s: F32 without Float", o.Name)
		}
		if o.F32Slice != "" && o.F32 == "" {
			return fmt.Errorf("unary op %s: F32Slice without F32", o.Name)
		}
	}
	for _, o := range binaryTable {
		if (o.Float == "") != (o.Int == "") {
			return fmt.Errorf("binary op %s: binaryScalar is generic over all numbers, so it needs both Float and Int or neither", o.Name)
		}
		if o.Fast && o.Float == "" {
			return fmt.Errorf("binary op %s: Fast without Float", o.Name)
		}
		if o.Fast && !o.IntZeroY && o.Int != o.Float {
			return fmt.Errorf("binary op %s: Fast loops are generic over all numbers, so Int must equal Float", o.Name)
		}
		if o.F32 != "" || o.F32Slice != "" {
			return fmt.Errorf("binary op %s: F32 and F32Slice are for unary ops", o.Name)
		}
	}
	for _, o := range compareTable {
		if o.Int != o.Float || o.Float == "" {
			return fmt.Errorf("comparison %s: compareLoop is generic over all numbers, so it needs Float, equal to Int", o.Name)
		}
		if o.F32 != "" || o.F32Slice != "" || o.Fast || o.IntZeroY {
			return fmt.Errorf("comparison %s: F32, Fast and IntZeroY are not for comparisons", o.Name)
		}
	}
	return nil
}
