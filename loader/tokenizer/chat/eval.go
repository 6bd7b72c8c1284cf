package chat

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"unicode/utf8"
)

// scope holds variables: the few a loop iteration or macro call binds in a
// slice (no map to allocate), more in a map.
type scope struct {
	names  []string
	values []any
	vars   map[string]any
	parent *scope
}

const smallScope = 8

func (s *scope) own(name string) (any, bool) {
	if s.vars != nil {
		v, ok := s.vars[name]
		return v, ok
	}
	for i, n := range s.names {
		if n == name {
			return s.values[i], true
		}
	}
	return nil, false
}

func (s *scope) lookup(name string) (any, bool) {
	for c := s; c != nil; c = c.parent {
		if v, ok := c.own(name); ok {
			return v, true
		}
	}
	return nil, false
}

func (s *scope) set(name string, v any) {
	if s.vars != nil {
		s.vars[name] = v
		return
	}
	for i, n := range s.names {
		if n == name {
			s.values[i] = v
			return
		}
	}
	if len(s.names) < smallScope {
		s.names = append(s.names, name)
		s.values = append(s.values, v)
		return
	}
	s.vars = make(map[string]any, 2*smallScope)
	for i, n := range s.names {
		s.vars[n] = s.values[i]
	}
	s.names, s.values = nil, nil
	s.vars[name] = v
}

type state struct {
	budget
	out   strings.Builder
	depth int // nested macro calls
}

var errBreak = errors.New("break")
var errContinue = errors.New("continue")

// iterationBytes is charged per macro definition and call: the scope it
// allocates, which a macro defined inside keeps alive.
const iterationBytes = 256

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

// write appends to the output (or to the macro or {% set %} block being
// captured), checking its size before it grows.
func (st *state) write(s string) error {
	if int64(st.out.Len())+int64(len(s)) > st.maxStr {
		return limitf("the output would be over %d bytes (Options.MaxOutputBytes)", st.maxStr)
	}
	// A strings.Builder allocates up to twice what it holds.
	if err := st.charge(2 * int64(len(s))); err != nil {
		return err
	}
	if err := st.spend(int64(len(s))); err != nil {
		return err
	}
	st.out.WriteString(s)
	return nil
}

// capture runs body with a fresh output and returns what it wrote.
func (st *state) capture(body []node, sc *scope) (string, error) {
	saved := st.out
	st.out = strings.Builder{}
	err := st.exec(body, sc)
	text := st.out.String()
	st.out = saved
	return text, err
}

func (st *state) execOne(n node, sc *scope) error {
	switch x := n.(type) {
	case *textNode:
		return st.write(x.s)
	case *outputNode:
		v, err := st.eval(x.e, sc)
		if err == nil {
			var s string
			if s, err = st.str(v); err == nil {
				err = st.write(s)
			}
		}
		return atLine(x.line, err)
	case *ifNode:
		for i, c := range x.conds {
			v, err := st.eval(c, sc)
			if err != nil {
				return atLine(x.line, err)
			}
			if truthy(v) {
				return st.exec(x.bodies[i], sc)
			}
		}
		return st.exec(x.els, sc)
	case *forNode:
		return atLine(x.line, st.execFor(x, sc))
	case *setNode:
		return atLine(x.line, st.execSet(x, sc))
	case *setBlockNode:
		body, err := st.capture(x.body, sc)
		if err != nil {
			return err
		}
		sc.set(x.name, body)
		return nil
	case *macroNode:
		if err := st.charge(iterationBytes); err != nil {
			return err
		}
		sc.set(x.name, &macro{node: x, defScope: sc})
		return nil
	case *callBlockNode:
		return atLine(x.line, st.execCallBlock(x, sc))
	case *filterBlockNode:
		body, err := st.capture(x.body, sc)
		if err != nil {
			return err
		}
		var v any = body
		for _, f := range x.filters {
			if v, err = st.applyFilter(f, v, sc); err != nil {
				return atLine(x.line, err)
			}
		}
		s, err := st.str(v)
		if err != nil {
			return atLine(x.line, err)
		}
		return st.write(s)
	case *withNode:
		if err := st.charge(iterationBytes); err != nil {
			return err
		}
		inner := &scope{parent: sc}
		vals, err := st.evalList(x.values, sc)
		if err != nil {
			return atLine(x.line, err)
		}
		for i, name := range x.targets {
			inner.set(name, vals[i])
		}
		return st.exec(x.body, inner)
	case *breakNode:
		return errBreak
	case *continueNode:
		return errContinue
	}
	return fmt.Errorf("internal: unknown node %T", n)
}

// execCallBlock calls the macro of a {% call %} block with caller, a
// macro that renders the block's body, and writes what it returns.
func (st *state) execCallBlock(x *callBlockNode, sc *scope) error {
	if err := st.charge(iterationBytes); err != nil {
		return err
	}
	f, err := st.eval(x.call.fn, sc)
	if err != nil {
		return err
	}
	args, kwargs, err := st.evalArgs(x.call.callArgs, sc)
	if err != nil {
		return err
	}
	if kwargs == nil {
		kwargs = map[string]any{}
	}
	kwargs["caller"] = &macro{node: x.caller, defScope: sc}
	v, err := st.call(f, args, kwargs, x.call.fn)
	if err != nil {
		return err
	}
	s, err := st.str(v)
	if err != nil {
		return err
	}
	return st.write(s)
}

func (st *state) execSet(x *setNode, sc *scope) error {
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
		if _, exists := d.m[x.name]; !exists {
			if err := st.growDict(d, 1, "a namespace"); err != nil {
				return err
			}
		}
		d.set(x.name, v)
		return nil
	}
	return fmt.Errorf("cannot assign to this expression")
}

// iterate returns the items a for loop or filter walks: a list's own items
// (not copied), a dict's keys, or a string's characters (substrings of it,
// so no character is copied).
func (st *state) iterate(v any) ([]any, error) {
	switch x := v.(type) {
	case *list:
		return x.items, st.spend(int64(len(x.items)))
	case *dict:
		if err := st.newList(int64(len(x.keys)), "the keys of a dict"); err != nil {
			return nil, err
		}
		out := make([]any, len(x.keys))
		for i, k := range x.keys {
			out[i] = k
		}
		return out, nil
	case string:
		if err := st.spend(int64(len(x))); err != nil {
			return nil, err
		}
		if err := st.newList(int64(utf8.RuneCountInString(x)), "the characters of a string"); err != nil {
			return nil, err
		}
		out := make([]any, 0, utf8.RuneCountInString(x))
		for i := 0; i < len(x); {
			_, w := utf8.DecodeRuneInString(x[i:])
			out = append(out, x[i:i+w])
			i += w
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
		return err
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
			return fmt.Errorf("cannot unpack %d values into %s", len(parts), joinNames(x.targets))
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
				if err := st.charge(itemBytes); err != nil {
					return err
				}
				kept = append(kept, it)
			}
		}
		items = kept
	}
	if len(items) == 0 {
		return st.exec(x.els, sc)
	}
	shared := &loopShared{}
	for i, it := range items {
		// The scope and loop object are garbage after the iteration unless
		// a macro defined in the body or a container keeps them, and those
		// charge for what they keep.
		if err := st.step(); err != nil {
			return err
		}
		s := &scope{parent: sc, names: make([]string, 0, 2), values: make([]any, 0, 2)}
		s.set("loop", &loopCtx{i: i, items: items, shared: shared})
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
	// Every expression node is work: one statement can hold thousands.
	if err := st.spend(4); err != nil {
		return nil, err
	}
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
		return st.getItem(obj, idx)
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
		args, _, err := st.evalArgs(x.callArgs, sc)
		if err != nil {
			return nil, err
		}
		t, ok := tests[x.name]
		if !ok {
			return nil, fmt.Errorf("unknown test %q", x.name)
		}
		r, err := t(st, v, args)
		if err != nil {
			return nil, err
		}
		return r != x.neg, nil
	case *binExpr:
		return st.evalBin(x, sc)
	case *compareExpr:
		l, err := st.eval(x.first, sc)
		if err != nil {
			return nil, err
		}
		for i, op := range x.ops {
			r, err := st.eval(x.rest[i], sc)
			if err != nil {
				return nil, err
			}
			ok, err := st.compareOp(op, l, r)
			if err != nil || !ok {
				return false, err
			}
			l = r
		}
		return true, nil
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
				if n == math.MinInt64 {
					return nil, errOverflow("-", n, nil)
				}
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
		if err := st.newList(int64(len(x.items)), "a list literal"); err != nil {
			return nil, err
		}
		items, err := st.evalList(x.items, sc)
		if err != nil {
			return nil, err
		}
		return &list{items: items, tuple: x.tuple}, nil
	case *dictExpr:
		if err := st.newDict(int64(len(x.keys)), "a dict literal"); err != nil {
			return nil, err
		}
		d := newDict()
		for i := range x.keys {
			kv, err := st.eval(x.keys[i], sc)
			if err != nil {
				return nil, err
			}
			k, err := keyOf(kv)
			if err != nil {
				return nil, err
			}
			v, err := st.eval(x.vals[i], sc)
			if err != nil {
				return nil, err
			}
			d.set(k, v)
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

// evalArgs evaluates call arguments: *x adds the items of x to the
// positional ones, **d the entries of d to the keyword ones.
func (st *state) evalArgs(a callArgs, sc *scope) ([]any, map[string]any, error) {
	args, err := st.evalList(a.args, sc)
	if err != nil {
		return nil, nil, err
	}
	if a.star != nil {
		v, err := st.eval(a.star, sc)
		if err != nil {
			return nil, nil, err
		}
		items, err := st.iterate(v)
		if err != nil {
			return nil, nil, err
		}
		if err := st.newList(int64(len(args))+int64(len(items)), "*args"); err != nil {
			return nil, nil, err
		}
		args = append(args, items...)
	}
	if len(a.kwargs) == 0 && a.starStar == nil {
		return args, nil, nil
	}
	m := make(map[string]any, len(a.kwargs))
	for _, k := range a.kwargs {
		v, err := st.eval(k.v, sc)
		if err != nil {
			return nil, nil, err
		}
		m[k.name] = v
	}
	if a.starStar != nil {
		v, err := st.eval(a.starStar, sc)
		if err != nil {
			return nil, nil, err
		}
		d, ok := v.(*dict)
		if !ok {
			return nil, nil, fmt.Errorf("argument after ** must be a mapping, not %s", typeName(v))
		}
		if err := st.newDict(int64(len(d.keys)), "**kwargs"); err != nil {
			return nil, nil, err
		}
		for _, k := range d.keys {
			m[k] = d.m[k]
		}
	}
	return args, m, nil
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
		if x.tuple && (name == "append" || name == "pop") {
			return undefined{} // tuples are immutable
		}
		if m := listMethod(x, name); m != nil {
			return m
		}
	case *loopCtx:
		return x.attr(name)
	}
	return undefined{}
}

// getItem is obj[idx]; a missing key or index is undefined, as in Jinja.
func (st *state) getItem(obj any, idx any) (any, error) {
	switch x := obj.(type) {
	case *dict:
		if k, err := keyOf(idx); err == nil {
			if v, ok := x.get(k); ok {
				return v, nil
			}
		}
	case *list:
		if i, ok := asInt(idx); ok {
			if i < 0 {
				i += int64(len(x.items))
			}
			if i >= 0 && i < int64(len(x.items)) {
				return x.items[i], nil
			}
		}
	case string:
		if i, ok := asInt(idx); ok {
			if err := st.spend(int64(len(x))); err != nil {
				return nil, err
			}
			if i < 0 {
				i += int64(utf8.RuneCountInString(x))
			}
			if i >= 0 {
				if s, ok := runeAt(x, i); ok {
					return s, nil
				}
			}
		}
	case *loopCtx:
		if k, ok := idx.(string); ok {
			return x.attr(k), nil
		}
	}
	return undefined{}, nil
}

// runeAt is the i-th character of s, as a substring.
func runeAt(s string, i int64) (string, bool) {
	for off := 0; off < len(s); i-- {
		_, w := utf8.DecodeRuneInString(s[off:])
		if i == 0 {
			return s[off : off+w], true
		}
		off += w
	}
	return "", false
}

func asInt(v any) (int64, bool) {
	switch x := v.(type) {
	case int64:
		return x, true
	case bool:
		return b2i(x), true
	case float64:
		if x == math.Trunc(x) && x >= -(1<<63) && x < 1<<63 {
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
		stp = int(max(min(s, math.MaxInt32), -math.MaxInt32))
	}
	norm := func(v any, def int) (int, error) {
		if isNilOrUndef(v) {
			return def, nil
		}
		i, ok := asInt(v)
		if !ok {
			return 0, fmt.Errorf("slice indices must be integers")
		}
		x := int(max(min(i, math.MaxInt32), -math.MaxInt32))
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

// sliceLen is the number of items a slice selects.
func sliceLen(start, stop, step int) int {
	switch {
	case step > 0 && stop > start:
		return (stop - start + step - 1) / step
	case step < 0 && start > stop:
		return (start - stop - step - 1) / -step
	}
	return 0
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
	switch o := obj.(type) {
	case *list:
		start, stop, step, err := sliceBounds(len(o.items), parts[0], parts[1], parts[2])
		if err != nil {
			return nil, err
		}
		k := sliceLen(start, stop, step)
		if err := st.newList(int64(k), "a slice"); err != nil {
			return nil, err
		}
		out := &list{items: make([]any, 0, k), tuple: o.tuple}
		for i := start; len(out.items) < k; i += step {
			out.items = append(out.items, o.items[i])
		}
		return out, nil
	case string:
		if err := st.spend(int64(len(o))); err != nil {
			return nil, err
		}
		n := utf8.RuneCountInString(o)
		start, stop, step, err := sliceBounds(n, parts[0], parts[1], parts[2])
		if err != nil {
			return nil, err
		}
		k := sliceLen(start, stop, step)
		if step == 1 {
			// A substring: no copy.
			return o[runeOffset(o, start):runeOffset(o, start+k)], nil
		}
		// Any other step copies k characters: charge the rune table too.
		if err := st.charge(4 * int64(n)); err != nil {
			return nil, err
		}
		if err := st.newStr(int64(4*k), "a string slice"); err != nil {
			return nil, err
		}
		runes := []rune(o)
		out := make([]rune, 0, k)
		for i := start; len(out) < k; i += step {
			out = append(out, runes[i])
		}
		return string(out), nil
	}
	return nil, fmt.Errorf("cannot slice %s", typeName(obj))
}

// runeOffset is the byte offset of the i-th character of s (len(s) past
// the end).
func runeOffset(s string, i int) int {
	off := 0
	for ; i > 0 && off < len(s); i-- {
		_, w := utf8.DecodeRuneInString(s[off:])
		off += w
	}
	return off
}

func (st *state) evalCall(x *callExpr, sc *scope) (any, error) {
	f, err := st.eval(x.fn, sc)
	if err != nil {
		return nil, err
	}
	args, kwargs, err := st.evalArgs(x.callArgs, sc)
	if err != nil {
		return nil, err
	}
	return st.call(f, args, kwargs, x.fn)
}

func (st *state) call(f any, args []any, kwargs map[string]any, what expr) (any, error) {
	switch c := f.(type) {
	case *builtin:
		return c.f(st, args, kwargs)
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
	if st.depth >= maxMacroDepth {
		return nil, limitf("macro %q: calls nested deeper than %d", m.node.name, maxMacroDepth)
	}
	if err := st.charge(iterationBytes); err != nil {
		return nil, err
	}
	st.depth++
	defer func() { st.depth-- }()
	s := &scope{parent: m.defScope}
	for i, p := range m.node.params {
		v, byName := kwargs[p.name]
		switch {
		case i < len(args):
			s.set(p.name, args[i])
		case byName:
			s.set(p.name, v)
		case p.def != nil:
			// Defaults see the parameters before them: m(a, b=a).
			v, err := st.eval(p.def, s)
			if err != nil {
				return nil, err
			}
			s.set(p.name, v)
		default:
			s.set(p.name, undefined{})
		}
	}
	for k, v := range kwargs {
		if _, ok := s.own(k); !ok {
			s.set(k, v)
		}
	}
	return st.capture(m.node.body, s)
}

func (st *state) evalFilter(x *filterExpr, sc *scope) (any, error) {
	v, err := st.eval(x.arg, sc)
	if err != nil {
		return nil, err
	}
	return st.applyFilter(x, v, sc)
}

// applyFilter applies the filter x (evaluating its arguments) to v.
func (st *state) applyFilter(x *filterExpr, v any, sc *scope) (any, error) {
	args, kwargs, err := st.evalArgs(x.callArgs, sc)
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
	case "~":
		ls, err := st.str(l)
		if err != nil {
			return nil, err
		}
		rs, err := st.str(r)
		if err != nil {
			return nil, err
		}
		if err := st.newStr(int64(len(ls))+int64(len(rs)), "a ~ concatenation"); err != nil {
			return nil, err
		}
		return ls + rs, nil
	}
	return st.arith(x.op, l, r)
}

// compareOp is one comparison of a chain: ==, !=, <, >, <=, >=, in, not in.
func (st *state) compareOp(op string, l, r any) (bool, error) {
	switch op {
	case "==", "!=":
		eq, err := st.equal(l, r, 0)
		return eq == (op == "=="), err
	case "in", "not in":
		in, err := st.contains(r, l)
		return in == (op == "in"), err
	}
	c, err := compare(l, r)
	if err != nil {
		return false, err
	}
	switch op {
	case "<":
		return c < 0, nil
	case ">":
		return c > 0, nil
	case "<=":
		return c <= 0, nil
	}
	return c >= 0, nil
}

// errOverflow is the error for integer arithmetic whose result does not
// fit in 64 bits; it is a limit of this interpreter (Jinja has big
// integers), so it wraps ErrLimit.
func errOverflow(op string, l, r any) error {
	if r == nil {
		return limitf("integer overflow: %s%s does not fit in 64 bits (chat templates use 64-bit integers)", op, scalarStr(l))
	}
	return limitf("integer overflow: %s %s %s does not fit in 64 bits (chat templates use 64-bit integers)", scalarStr(l), op, scalarStr(r))
}

func (st *state) arith(op string, l, r any) (any, error) {
	switch op {
	case "%":
		if f, ok := l.(string); ok {
			return st.pyPercent(f, r)
		}
	case "+":
		if ls, ok := l.(string); ok {
			if rs, ok := r.(string); ok {
				if err := st.newStr(int64(len(ls))+int64(len(rs)), "a + concatenation"); err != nil {
					return nil, err
				}
				return ls + rs, nil
			}
		}
		if ll, ok := l.(*list); ok {
			if rl, ok := r.(*list); ok && ll.tuple == rl.tuple {
				if err := st.newList(int64(len(ll.items))+int64(len(rl.items)), "a + of lists"); err != nil {
					return nil, err
				}
				items := make([]any, 0, len(ll.items)+len(rl.items))
				items = append(append(items, ll.items...), rl.items...)
				return &list{items: items, tuple: ll.tuple}, nil
			}
		}
	case "*":
		seq, n := l, r
		switch l.(type) {
		case string, *list:
		default:
			seq, n = r, l
		}
		count, isInt := asIntStrict(n)
		switch s := seq.(type) {
		case string:
			if !isInt {
				break
			}
			if count <= 0 || s == "" {
				return "", nil
			}
			if err := st.newStr(mulSize(int64(len(s)), count), "a string repetition"); err != nil {
				return nil, err
			}
			return strings.Repeat(s, int(count)), nil
		case *list:
			if !isInt {
				break
			}
			if count <= 0 || len(s.items) == 0 {
				return &list{tuple: s.tuple}, nil
			}
			total := mulSize(int64(len(s.items)), count)
			if err := st.newList(total, "a list repetition"); err != nil {
				return nil, err
			}
			items := make([]any, 0, total)
			for range count {
				items = append(items, s.items...)
			}
			return &list{items: items, tuple: s.tuple}, nil
		}
	}
	li, lInt := asIntStrict(l)
	ri, rInt := asIntStrict(r)
	if lInt && rInt {
		return intArith(op, li, ri)
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
		p := math.Pow(lf, rf)
		if math.IsInf(p, 0) && !math.IsInf(lf, 0) && !math.IsInf(rf, 0) {
			if lf == 0 {
				return nil, fmt.Errorf("zero to a negative power")
			}
			return nil, limitf("float overflow: %s ** %s is out of range", pyFloat(lf), pyFloat(rf))
		}
		return p, nil
	}
	return nil, fmt.Errorf("unknown operator %q", op)
}

// asIntStrict accepts integers and booleans (Python's ints), not floats.
func asIntStrict(v any) (int64, bool) {
	switch x := v.(type) {
	case int64:
		return x, true
	case bool:
		return b2i(x), true
	}
	return 0, false
}

// intArith is 64-bit integer arithmetic that reports overflow instead of
// wrapping.
func intArith(op string, li, ri int64) (any, error) {
	switch op {
	case "+":
		if (ri > 0 && li > math.MaxInt64-ri) || (ri < 0 && li < math.MinInt64-ri) {
			return nil, errOverflow(op, li, ri)
		}
		return li + ri, nil
	case "-":
		if (ri < 0 && li > math.MaxInt64+ri) || (ri > 0 && li < math.MinInt64+ri) {
			return nil, errOverflow(op, li, ri)
		}
		return li - ri, nil
	case "*":
		if li == 0 || ri == 0 {
			return int64(0), nil
		}
		p := li * ri
		if p/ri != li || (li == -1 && ri == math.MinInt64) || (ri == -1 && li == math.MinInt64) {
			return nil, errOverflow(op, li, ri)
		}
		return p, nil
	case "/":
		if ri == 0 {
			return nil, fmt.Errorf("division by zero")
		}
		return float64(li) / float64(ri), nil
	case "//":
		if ri == 0 {
			return nil, fmt.Errorf("division by zero")
		}
		if li == math.MinInt64 && ri == -1 {
			return nil, errOverflow(op, li, ri)
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
		if ri == -1 {
			return int64(0), nil
		}
		m := li % ri
		if m != 0 && ((m < 0) != (ri < 0)) {
			m += ri
		}
		return m, nil
	case "**":
		if ri < 0 {
			if li == 0 {
				return nil, fmt.Errorf("zero to a negative power")
			}
			return math.Pow(float64(li), float64(ri)), nil
		}
		switch li {
		case 0:
			if ri == 0 {
				return int64(1), nil
			}
			return int64(0), nil
		case 1:
			return int64(1), nil
		case -1:
			if ri%2 == 0 {
				return int64(1), nil
			}
			return int64(-1), nil
		}
		if ri >= 64 {
			return nil, errOverflow(op, li, ri)
		}
		res := int64(1)
		for range ri {
			r, err := intArith("*", res, li)
			if err != nil {
				return nil, errOverflow(op, li, ri)
			}
			res = r.(int64)
		}
		return res, nil
	}
	return nil, fmt.Errorf("unknown operator %q", op)
}

// equal is Python's ==, within the budget: a container compared with
// itself is equal (Python checks identity first), and comparing values
// nested deeper than maxValueDepth is an error (Python's RecursionError).
func (st *state) equal(a, b any, depth int) (bool, error) {
	if ai, ok := asIntStrict(a); ok {
		if bi, ok := asIntStrict(b); ok {
			return ai == bi, nil
		}
	}
	if af, ok := asFloat(a); ok {
		if bf, ok := asFloat(b); ok {
			return af == bf, nil
		}
		return false, nil
	}
	switch x := a.(type) {
	case nil:
		return b == nil, nil
	case undefined:
		return isUndef(b), nil
	case string:
		y, ok := b.(string)
		return ok && x == y, st.spend(int64(len(x)))
	case *list:
		y, ok := b.(*list)
		if !ok || len(x.items) != len(y.items) || x.tuple != y.tuple {
			return false, nil
		}
		if x == y {
			return true, nil
		}
		if depth >= maxValueDepth {
			return false, limitf("comparing lists and dicts nested deeper than %d (or containing themselves)", maxValueDepth)
		}
		if err := st.spend(itemCost * int64(len(x.items))); err != nil {
			return false, err
		}
		for i := range x.items {
			if eq, err := st.equal(x.items[i], y.items[i], depth+1); !eq || err != nil {
				return false, err
			}
		}
		return true, nil
	case *dict:
		y, ok := b.(*dict)
		if !ok || len(x.keys) != len(y.keys) {
			return false, nil
		}
		if x == y {
			return true, nil
		}
		if depth >= maxValueDepth {
			return false, limitf("comparing lists and dicts nested deeper than %d (or containing themselves)", maxValueDepth)
		}
		if err := st.spend(itemCost * int64(len(x.keys))); err != nil {
			return false, err
		}
		for _, k := range x.keys {
			v, ok := y.m[k]
			if !ok {
				return false, nil
			}
			if eq, err := st.equal(x.m[k], v, depth+1); !eq || err != nil {
				return false, err
			}
		}
		return true, nil
	case *builtin, *macro, *loopCtx:
		return a == b, nil
	}
	return false, nil
}

func compare(a, b any) (int, error) {
	if ai, ok := asIntStrict(a); ok {
		if bi, ok := asIntStrict(b); ok {
			switch {
			case ai < bi:
				return -1, nil
			case ai > bi:
				return 1, nil
			}
			return 0, nil
		}
	}
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

func (st *state) contains(container, item any) (bool, error) {
	switch c := container.(type) {
	case string:
		s, ok := item.(string)
		if !ok {
			return false, fmt.Errorf("'in <string>' requires a string, got %s", typeName(item))
		}
		return strings.Contains(c, s), st.spend(int64(len(c)) + int64(len(s)))
	case *list:
		for _, it := range c.items {
			if err := st.spend(itemCost); err != nil {
				return false, err
			}
			eq, err := st.equal(it, item, 0)
			if err != nil || eq {
				return eq, err
			}
		}
		return false, nil
	case *dict:
		k, err := keyOf(item)
		if err != nil {
			return false, err
		}
		_, ok := c.m[k]
		return ok, nil
	case undefined, nil:
		return false, nil
	}
	return false, fmt.Errorf("argument of type %s is not iterable", typeName(container))
}
