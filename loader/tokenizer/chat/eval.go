package chat

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"
)

type scope struct {
	vars   map[string]any
	parent *scope
}

func (s *scope) lookup(name string) (any, bool) {
	for c := s; c != nil; c = c.parent {
		if v, ok := c.vars[name]; ok {
			return v, true
		}
	}
	return nil, false
}

func (s *scope) set(name string, v any) {
	if s.vars == nil {
		s.vars = map[string]any{}
	}
	s.vars[name] = v
}

type state struct {
	ctx      context.Context
	out      strings.Builder
	steps    int64
	maxSteps int64
	maxOut   int
	deadline time.Time
	depth    int
}

var errBreak = errors.New("break")
var errContinue = errors.New("continue")

// ErrLimit is wrapped by the error returned when a template exceeds its step,
// time, output or recursion limits.
var ErrLimit = errors.New("chat template limit exceeded")

const (
	maxMacroDepth = 64
	maxListItems  = 1 << 20
)

func (st *state) step() error {
	st.steps++
	if st.steps > st.maxSteps {
		return fmt.Errorf("%w: more than %d steps (a loop bomb?)", ErrLimit, st.maxSteps)
	}
	if st.steps&1023 == 0 {
		if err := st.ctx.Err(); err != nil {
			return fmt.Errorf("chat template: %w", err)
		}
		if !st.deadline.IsZero() && time.Now().After(st.deadline) {
			return fmt.Errorf("%w: rendering took longer than the time limit", ErrLimit)
		}
	}
	return nil
}

func (st *state) checkSize(n int) error {
	if n > st.maxOut {
		return fmt.Errorf("%w: a value or the output is larger than %d bytes", ErrLimit, st.maxOut)
	}
	return nil
}

func (st *state) exec(nodes []node, sc *scope) error {
	for _, n := range nodes {
		if err := st.step(); err != nil {
			return err
		}
		if err := st.execOne(n, sc); err != nil {
			return err
		}
	}
	return nil
}

func (st *state) write(s string) error {
	st.out.WriteString(s)
	return st.checkSize(st.out.Len())
}

func (st *state) execOne(n node, sc *scope) error {
	switch x := n.(type) {
	case *textNode:
		return st.write(x.s)
	case *outputNode:
		v, err := st.eval(x.e, sc)
		if err != nil {
			return fmt.Errorf("line %d: %w", x.line, err)
		}
		return st.write(toStr(v))
	case *ifNode:
		for i, c := range x.conds {
			v, err := st.eval(c, sc)
			if err != nil {
				return err
			}
			if truthy(v) {
				return st.exec(x.bodies[i], sc)
			}
		}
		return st.exec(x.els, sc)
	case *forNode:
		return st.execFor(x, sc)
	case *setNode:
		v, err := st.eval(x.value, sc)
		if err != nil {
			return err
		}
		if len(x.targets) == 1 {
			return st.assign(x.targets[0], v, sc)
		}
		items, err := st.iterate(v)
		if err != nil {
			return err
		}
		if len(items) != len(x.targets) {
			return fmt.Errorf("cannot unpack %d values into %d names", len(items), len(x.targets))
		}
		for i, t := range x.targets {
			if err := st.assign(t, items[i], sc); err != nil {
				return err
			}
		}
		return nil
	case *setBlockNode:
		saved := st.out
		st.out = strings.Builder{}
		err := st.exec(x.body, sc)
		body := st.out.String()
		st.out = saved
		if err != nil {
			return err
		}
		sc.set(x.name, body)
		return nil
	case *macroNode:
		sc.set(x.name, &macro{node: x, defScope: sc})
		return nil
	case *breakNode:
		return errBreak
	case *continueNode:
		return errContinue
	}
	return fmt.Errorf("internal: unknown node %T", n)
}

func (st *state) assign(t expr, v any, sc *scope) error {
	switch x := t.(type) {
	case *nameExpr:
		sc.set(x.name, v)
		return nil
	case *attrExpr:
		obj, err := st.eval(x.obj, sc)
		if err != nil {
			return err
		}
		d, ok := obj.(*dict)
		if !ok {
			return fmt.Errorf("cannot set attribute %q on %s (use namespace())", x.name, typeName(obj))
		}
		d.set(x.name, v)
		return nil
	}
	return fmt.Errorf("cannot assign to this expression")
}

func (st *state) iterate(v any) ([]any, error) {
	switch x := v.(type) {
	case *list:
		return x.items, nil
	case *dict:
		out := make([]any, len(x.keys))
		for i, k := range x.keys {
			out[i] = k
		}
		return out, nil
	case string:
		var out []any
		for _, r := range x {
			out = append(out, string(r))
		}
		return out, nil
	case undefined, nil:
		return nil, nil
	}
	return nil, fmt.Errorf("%s is not iterable", typeName(v))
}

func (st *state) execFor(x *forNode, sc *scope) error {
	iv, err := st.eval(x.iter, sc)
	if err != nil {
		return err
	}
	items, err := st.iterate(iv)
	if err != nil {
		return fmt.Errorf("line %d: %w", x.line, err)
	}
	bind := func(s *scope, item any) error {
		if len(x.targets) == 1 {
			s.set(x.targets[0], item)
			return nil
		}
		parts, err := st.iterate(item)
		if err != nil {
			return err
		}
		if len(parts) != len(x.targets) {
			return fmt.Errorf("line %d: cannot unpack %d values into %s", x.line, len(parts), joinNames(x.targets))
		}
		for i, t := range x.targets {
			s.set(t, parts[i])
		}
		return nil
	}
	if x.cond != nil {
		var kept []any
		for _, it := range items {
			if err := st.step(); err != nil {
				return err
			}
			s := &scope{parent: sc}
			if err := bind(s, it); err != nil {
				return err
			}
			c, err := st.eval(x.cond, s)
			if err != nil {
				return err
			}
			if truthy(c) {
				kept = append(kept, it)
			}
		}
		items = kept
	}
	if len(items) == 0 {
		return st.exec(x.els, sc)
	}
	n := int64(len(items))
	for i, it := range items {
		if err := st.step(); err != nil {
			return err
		}
		loop := newDict()
		loop.set("index0", int64(i))
		loop.set("index", int64(i+1))
		loop.set("revindex0", n-int64(i)-1)
		loop.set("revindex", n-int64(i))
		loop.set("first", i == 0)
		loop.set("last", int64(i) == n-1)
		loop.set("length", n)
		if i > 0 {
			loop.set("previtem", items[i-1])
		} else {
			loop.set("previtem", undefined{})
		}
		if int64(i) < n-1 {
			loop.set("nextitem", items[i+1])
		} else {
			loop.set("nextitem", undefined{})
		}
		idx := i
		loop.set("cycle", fn(func(_ *state, args []any, _ map[string]any) (any, error) {
			if len(args) == 0 {
				return nil, fmt.Errorf("loop.cycle needs arguments")
			}
			return args[idx%len(args)], nil
		}))
		s := &scope{parent: sc}
		s.set("loop", loop)
		if err := bind(s, it); err != nil {
			return err
		}
		err := st.exec(x.body, s)
		if errors.Is(err, errBreak) {
			break
		}
		if err != nil && !errors.Is(err, errContinue) {
			return err
		}
	}
	return nil
}

// ---------------------------------------------------------------------------
// Expressions

func (st *state) eval(e expr, sc *scope) (any, error) {
	switch x := e.(type) {
	case *litExpr:
		return x.v, nil
	case *nameExpr:
		if v, ok := sc.lookup(x.name); ok {
			return v, nil
		}
		if f, ok := globals[x.name]; ok {
			return f, nil
		}
		return undefined{}, nil
	case *attrExpr:
		obj, err := st.eval(x.obj, sc)
		if err != nil {
			return nil, err
		}
		return getAttr(obj, x.name), nil
	case *indexExpr:
		obj, err := st.eval(x.obj, sc)
		if err != nil {
			return nil, err
		}
		idx, err := st.eval(x.idx, sc)
		if err != nil {
			return nil, err
		}
		return getItem(obj, idx), nil
	case *sliceExpr:
		return st.evalSlice(x, sc)
	case *callExpr:
		return st.evalCall(x, sc)
	case *filterExpr:
		return st.evalFilter(x, sc)
	case *testExpr:
		v, err := st.eval(x.arg, sc)
		if err != nil {
			return nil, err
		}
		args, err := st.evalList(x.args, sc)
		if err != nil {
			return nil, err
		}
		t, ok := tests[x.name]
		if !ok {
			return nil, fmt.Errorf("unknown test %q", x.name)
		}
		r, err := t(v, args)
		if err != nil {
			return nil, err
		}
		return r != x.neg, nil
	case *binExpr:
		return st.evalBin(x, sc)
	case *unaryExpr:
		v, err := st.eval(x.e, sc)
		if err != nil {
			return nil, err
		}
		switch x.op {
		case "not":
			return !truthy(v), nil
		case "-":
			switch n := v.(type) {
			case int64:
				return -n, nil
			case float64:
				return -n, nil
			case bool:
				return -b2i(n), nil
			}
			return nil, fmt.Errorf("bad operand for unary -: %s", typeName(v))
		case "+":
			return v, nil
		}
	case *condExpr:
		c, err := st.eval(x.cond, sc)
		if err != nil {
			return nil, err
		}
		if truthy(c) {
			return st.eval(x.a, sc)
		}
		return st.eval(x.b, sc)
	case *listExpr:
		items, err := st.evalList(x.items, sc)
		if err != nil {
			return nil, err
		}
		return &list{items: items}, nil
	case *dictExpr:
		d := newDict()
		for i := range x.keys {
			k, err := st.eval(x.keys[i], sc)
			if err != nil {
				return nil, err
			}
			v, err := st.eval(x.vals[i], sc)
			if err != nil {
				return nil, err
			}
			d.set(toStr(k), v)
		}
		return d, nil
	}
	return nil, fmt.Errorf("internal: unknown expression %T", e)
}

func (st *state) evalList(es []expr, sc *scope) ([]any, error) {
	out := make([]any, 0, len(es))
	for _, e := range es {
		v, err := st.eval(e, sc)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, nil
}

func (st *state) evalKwargs(kws []kwarg, sc *scope) (map[string]any, error) {
	if len(kws) == 0 {
		return nil, nil
	}
	m := make(map[string]any, len(kws))
	for _, k := range kws {
		v, err := st.eval(k.v, sc)
		if err != nil {
			return nil, err
		}
		m[k.name] = v
	}
	return m, nil
}

func b2i(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

func getAttr(obj any, name string) any {
	switch x := obj.(type) {
	case *dict:
		if m := dictMethod(x, name); m != nil {
			return m
		}
		if v, ok := x.get(name); ok {
			return v
		}
	case string:
		if m := strMethod(x, name); m != nil {
			return m
		}
	case *list:
		if m := listMethod(x, name); m != nil {
			return m
		}
	}
	return undefined{}
}

func getItem(obj any, idx any) any {
	switch x := obj.(type) {
	case *dict:
		if v, ok := x.get(toStr(idx)); ok {
			return v
		}
	case *list:
		if i, ok := asInt(idx); ok {
			if i < 0 {
				i += int64(len(x.items))
			}
			if i >= 0 && i < int64(len(x.items)) {
				return x.items[i]
			}
		}
	case string:
		if i, ok := asInt(idx); ok {
			r := []rune(x)
			if i < 0 {
				i += int64(len(r))
			}
			if i >= 0 && i < int64(len(r)) {
				return string(r[i])
			}
		}
	}
	return undefined{}
}

func asInt(v any) (int64, bool) {
	switch x := v.(type) {
	case int64:
		return x, true
	case bool:
		return b2i(x), true
	case float64:
		if x == math.Trunc(x) {
			return int64(x), true
		}
	}
	return 0, false
}

func asFloat(v any) (float64, bool) {
	switch x := v.(type) {
	case int64:
		return float64(x), true
	case float64:
		return x, true
	case bool:
		return float64(b2i(x)), true
	}
	return 0, false
}

// sliceBounds applies Python slice semantics.
func sliceBounds(n int, lo, hi, step any) (start, stop, stp int, err error) {
	stp = 1
	if !isNilOrUndef(step) {
		s, ok := asInt(step)
		if !ok || s == 0 {
			return 0, 0, 0, fmt.Errorf("slice step must be a non-zero integer")
		}
		stp = int(s)
	}
	norm := func(v any, def int) (int, error) {
		if isNilOrUndef(v) {
			return def, nil
		}
		i, ok := asInt(v)
		if !ok {
			return 0, fmt.Errorf("slice indices must be integers")
		}
		x := int(i)
		if x < 0 {
			x += n
		}
		if stp > 0 {
			x = max(0, min(x, n))
		} else {
			x = max(-1, min(x, n-1))
		}
		return x, nil
	}
	if stp > 0 {
		if start, err = norm(lo, 0); err != nil {
			return
		}
		stop, err = norm(hi, n)
	} else {
		if start, err = norm(lo, n-1); err != nil {
			return
		}
		stop, err = norm(hi, -1)
	}
	return
}

func isNilOrUndef(v any) bool { return v == nil || isUndef(v) }

func (st *state) evalSlice(x *sliceExpr, sc *scope) (any, error) {
	obj, err := st.eval(x.obj, sc)
	if err != nil {
		return nil, err
	}
	var parts [3]any
	for i, e := range []expr{x.lo, x.hi, x.step} {
		if e != nil {
			if parts[i], err = st.eval(e, sc); err != nil {
				return nil, err
			}
		}
	}
	var items []any
	var runes []rune
	isStr := false
	switch o := obj.(type) {
	case *list:
		items = o.items
	case string:
		runes, isStr = []rune(o), true
	default:
		return nil, fmt.Errorf("cannot slice %s", typeName(obj))
	}
	n := len(items)
	if isStr {
		n = len(runes)
	}
	start, stop, step, err := sliceBounds(n, parts[0], parts[1], parts[2])
	if err != nil {
		return nil, err
	}
	var idx []int
	for i := start; (step > 0 && i < stop) || (step < 0 && i > stop); i += step {
		idx = append(idx, i)
	}
	if isStr {
		out := make([]rune, len(idx))
		for k, i := range idx {
			out[k] = runes[i]
		}
		return string(out), nil
	}
	out := &list{items: make([]any, len(idx))}
	for k, i := range idx {
		out.items[k] = items[i]
	}
	return out, nil
}

func (st *state) evalCall(x *callExpr, sc *scope) (any, error) {
	f, err := st.eval(x.fn, sc)
	if err != nil {
		return nil, err
	}
	args, err := st.evalList(x.args, sc)
	if err != nil {
		return nil, err
	}
	kwargs, err := st.evalKwargs(x.kwargs, sc)
	if err != nil {
		return nil, err
	}
	return st.call(f, args, kwargs, x.fn)
}

func (st *state) call(f any, args []any, kwargs map[string]any, what expr) (any, error) {
	switch c := f.(type) {
	case fn:
		return c(st, args, kwargs)
	case *macro:
		return st.callMacro(c, args, kwargs)
	}
	name := "value"
	switch w := what.(type) {
	case *nameExpr:
		name = w.name
	case *attrExpr:
		name = w.name
	}
	return nil, fmt.Errorf("%s is not callable (%s)", name, typeName(f))
}

func (st *state) callMacro(m *macro, args []any, kwargs map[string]any) (any, error) {
	st.depth++
	defer func() { st.depth-- }()
	if st.depth > maxMacroDepth {
		return nil, fmt.Errorf("%w: macro calls nested deeper than %d", ErrLimit, maxMacroDepth)
	}
	s := &scope{parent: m.defScope}
	for i, p := range m.node.params {
		switch {
		case i < len(args):
			s.set(p.name, args[i])
		case kwargs != nil && kwargs[p.name] != nil:
			s.set(p.name, kwargs[p.name])
		case p.def != nil:
			v, err := st.eval(p.def, m.defScope)
			if err != nil {
				return nil, err
			}
			s.set(p.name, v)
		default:
			s.set(p.name, undefined{})
		}
	}
	if kwargs != nil {
		for k, v := range kwargs {
			if _, ok := s.vars[k]; !ok {
				s.set(k, v)
			}
		}
	}
	saved := st.out
	st.out = strings.Builder{}
	err := st.exec(m.node.body, s)
	body := st.out.String()
	st.out = saved
	if err != nil {
		return nil, err
	}
	return body, nil
}

func (st *state) evalFilter(x *filterExpr, sc *scope) (any, error) {
	v, err := st.eval(x.arg, sc)
	if err != nil {
		return nil, err
	}
	args, err := st.evalList(x.args, sc)
	if err != nil {
		return nil, err
	}
	kwargs, err := st.evalKwargs(x.kwargs, sc)
	if err != nil {
		return nil, err
	}
	f, ok := filters[x.name]
	if !ok {
		return nil, fmt.Errorf("unknown filter %q", x.name)
	}
	return f(st, v, args, kwargs)
}

func (st *state) evalBin(x *binExpr, sc *scope) (any, error) {
	l, err := st.eval(x.l, sc)
	if err != nil {
		return nil, err
	}
	switch x.op {
	case "and":
		if !truthy(l) {
			return l, nil
		}
		return st.eval(x.r, sc)
	case "or":
		if truthy(l) {
			return l, nil
		}
		return st.eval(x.r, sc)
	}
	r, err := st.eval(x.r, sc)
	if err != nil {
		return nil, err
	}
	switch x.op {
	case "==":
		return equal(l, r), nil
	case "!=":
		return !equal(l, r), nil
	case "<", ">", "<=", ">=":
		c, err := compare(l, r)
		if err != nil {
			return nil, err
		}
		switch x.op {
		case "<":
			return c < 0, nil
		case ">":
			return c > 0, nil
		case "<=":
			return c <= 0, nil
		}
		return c >= 0, nil
	case "in", "not in":
		in, err := contains(r, l)
		if err != nil {
			return nil, err
		}
		return in == (x.op == "in"), nil
	case "~":
		s := toStr(l) + toStr(r)
		return s, st.checkSize(len(s))
	}
	return st.arith(x.op, l, r)
}

func (st *state) arith(op string, l, r any) (any, error) {
	if op == "+" {
		if ls, ok := l.(string); ok {
			if rs, ok := r.(string); ok {
				s := ls + rs
				return s, st.checkSize(len(s))
			}
		}
		if ll, ok := l.(*list); ok {
			if rl, ok := r.(*list); ok {
				if len(ll.items)+len(rl.items) > maxListItems {
					return nil, fmt.Errorf("%w: list longer than %d", ErrLimit, maxListItems)
				}
				items := append(append([]any(nil), ll.items...), rl.items...)
				return &list{items: items}, nil
			}
		}
	}
	if op == "*" {
		s, isStr := l.(string)
		n, isInt := asInt(r)
		if !isStr {
			s, isStr = r.(string)
			n, isInt = asInt(l)
		}
		if isStr && isInt {
			if n <= 0 {
				return "", nil
			}
			if int64(len(s))*n > int64(st.maxOut) {
				return nil, fmt.Errorf("%w: string repetition larger than %d bytes", ErrLimit, st.maxOut)
			}
			return strings.Repeat(s, int(n)), nil
		}
	}
	li, lInt := l.(int64)
	ri, rInt := r.(int64)
	if lb, ok := l.(bool); ok {
		li, lInt = b2i(lb), true
	}
	if rb, ok := r.(bool); ok {
		ri, rInt = b2i(rb), true
	}
	if lInt && rInt {
		switch op {
		case "+":
			return li + ri, nil
		case "-":
			return li - ri, nil
		case "*":
			return li * ri, nil
		case "/":
			if ri == 0 {
				return nil, fmt.Errorf("division by zero")
			}
			return float64(li) / float64(ri), nil
		case "//":
			if ri == 0 {
				return nil, fmt.Errorf("division by zero")
			}
			q := li / ri
			if (li%ri != 0) && ((li < 0) != (ri < 0)) {
				q--
			}
			return q, nil
		case "%":
			if ri == 0 {
				return nil, fmt.Errorf("modulo by zero")
			}
			m := li % ri
			if m != 0 && ((m < 0) != (ri < 0)) {
				m += ri
			}
			return m, nil
		case "**":
			if ri >= 0 && ri < 64 {
				res := int64(1)
				for k := int64(0); k < ri; k++ {
					res *= li
				}
				return res, nil
			}
			return math.Pow(float64(li), float64(ri)), nil
		}
	}
	lf, ok1 := asFloat(l)
	rf, ok2 := asFloat(r)
	if !ok1 || !ok2 {
		return nil, fmt.Errorf("unsupported operand types for %s: %s and %s", op, typeName(l), typeName(r))
	}
	switch op {
	case "+":
		return lf + rf, nil
	case "-":
		return lf - rf, nil
	case "*":
		return lf * rf, nil
	case "/":
		if rf == 0 {
			return nil, fmt.Errorf("division by zero")
		}
		return lf / rf, nil
	case "//":
		if rf == 0 {
			return nil, fmt.Errorf("division by zero")
		}
		return math.Floor(lf / rf), nil
	case "%":
		if rf == 0 {
			return nil, fmt.Errorf("modulo by zero")
		}
		m := math.Mod(lf, rf)
		if m != 0 && (m < 0) != (rf < 0) {
			m += rf
		}
		return m, nil
	case "**":
		return math.Pow(lf, rf), nil
	}
	return nil, fmt.Errorf("unknown operator %q", op)
}

func equal(a, b any) bool {
	if af, ok := asFloat(a); ok {
		if bf, ok := asFloat(b); ok {
			return af == bf
		}
		return false
	}
	switch x := a.(type) {
	case nil:
		return b == nil
	case undefined:
		return isUndef(b)
	case string:
		y, ok := b.(string)
		return ok && x == y
	case *list:
		y, ok := b.(*list)
		if !ok || len(x.items) != len(y.items) {
			return false
		}
		for i := range x.items {
			if !equal(x.items[i], y.items[i]) {
				return false
			}
		}
		return true
	case *dict:
		y, ok := b.(*dict)
		if !ok || len(x.keys) != len(y.keys) {
			return false
		}
		for _, k := range x.keys {
			v, ok := y.m[k]
			if !ok || !equal(x.m[k], v) {
				return false
			}
		}
		return true
	}
	return false
}

func compare(a, b any) (int, error) {
	if af, ok := asFloat(a); ok {
		if bf, ok := asFloat(b); ok {
			switch {
			case af < bf:
				return -1, nil
			case af > bf:
				return 1, nil
			}
			return 0, nil
		}
	}
	if as, ok := a.(string); ok {
		if bs, ok := b.(string); ok {
			return strings.Compare(as, bs), nil
		}
	}
	return 0, fmt.Errorf("cannot compare %s and %s", typeName(a), typeName(b))
}

func contains(container, item any) (bool, error) {
	switch c := container.(type) {
	case string:
		s, ok := item.(string)
		if !ok {
			return false, fmt.Errorf("'in <string>' requires a string, got %s", typeName(item))
		}
		return strings.Contains(c, s), nil
	case *list:
		for _, it := range c.items {
			if equal(it, item) {
				return true, nil
			}
		}
		return false, nil
	case *dict:
		_, ok := c.m[toStr(item)]
		return ok, nil
	case undefined, nil:
		return false, nil
	}
	return false, fmt.Errorf("argument of type %s is not iterable", typeName(container))
}
