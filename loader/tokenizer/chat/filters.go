package chat

import (
	"errors"
	"fmt"
	"math"
	"math/big"
	"sort"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// ---------------------------------------------------------------------------
// Filters. Each checks its result's size against the budget before it
// builds it, and charges the work it does.

type filterFn func(st *state, v any, args []any, kw map[string]any) (any, error)

var filters map[string]filterFn

func kwOrArg(args []any, kw map[string]any, i int, name string) (any, bool) {
	if v, ok := kw[name]; ok {
		return v, true
	}
	if i < len(args) {
		return args[i], true
	}
	return nil, false
}

// kwFlag is a boolean argument that defaults to false (reverse,
// case_sensitive, ...): position i or keyword name, as Python's truth.
func kwFlag(args []any, kw map[string]any, i int, name string) bool {
	v, ok := kwOrArg(args, kw, i, name)
	return ok && truthy(v)
}

// strFilter applies a string operation to str(v).
func strFilter(f func(st *state, s string, args []any, kw map[string]any) (any, error)) filterFn {
	return func(st *state, v any, args []any, kw map[string]any) (any, error) {
		s, err := st.str(v)
		if err != nil {
			return nil, err
		}
		return f(st, s, args, kw)
	}
}

func caseFilter(m caseMapping) filterFn {
	return strFilter(func(st *state, s string, _ []any, _ map[string]any) (any, error) { return st.mapCase(s, m) })
}

func init() {
	filters = map[string]filterFn{
		"trim": strFilter(func(st *state, s string, args []any, kw map[string]any) (any, error) {
			if err := st.spend(int64(len(s))); err != nil {
				return nil, err
			}
			if c, ok := kwOrArg(args, kw, 0, "chars"); ok && !isNilOrUndef(c) {
				cut, err := strArgOf("trim", c)
				if err != nil {
					return nil, err
				}
				return strings.Trim(s, cut), nil
			}
			return strings.TrimFunc(s, pyIsSpace), nil
		}),
		"length":     filterLength,
		"count":      filterLength,
		"string":     func(st *state, v any, _ []any, _ map[string]any) (any, error) { return st.str(v) },
		"lower":      caseFilter(lowerRunes),
		"upper":      caseFilter(upperRunes),
		"title":      caseFilter(jinjaTitleRunes),
		"capitalize": caseFilter(capitalizeRunes),
		"safe":       func(_ *state, v any, _ []any, _ map[string]any) (any, error) { return v, nil },
		"escape":     filterEscape,
		"e":          filterEscape,
		"int":        filterInt,
		"float": func(st *state, v any, args []any, _ map[string]any) (any, error) {
			if f, ok := asFloat(v); ok {
				return f, nil
			}
			if s, ok := v.(string); ok {
				if err := st.spend(int64(len(s))); err != nil {
					return nil, err
				}
				if f, err := strconv.ParseFloat(strings.TrimSpace(s), 64); err == nil || errors.Is(err, strconv.ErrRange) {
					return f, nil
				}
			}
			if len(args) > 0 {
				return args[0], nil
			}
			return 0.0, nil
		},
		"abs": func(_ *state, v any, _ []any, _ map[string]any) (any, error) {
			switch x := v.(type) {
			case int64:
				if x == math.MinInt64 {
					return nil, errOverflow("abs ", x, nil)
				}
				if x < 0 {
					return -x, nil
				}
				return x, nil
			case bool:
				return b2i(x), nil
			case float64:
				return math.Abs(x), nil
			}
			return nil, fmt.Errorf("abs: expected a number, got %s", typeName(v))
		},
		"default": filterDefault,
		"d":       filterDefault,
		"first":   func(st *state, v any, _ []any, _ map[string]any) (any, error) { return st.firstLast(v, true) },
		"last":    func(st *state, v any, _ []any, _ map[string]any) (any, error) { return st.firstLast(v, false) },
		"list": func(st *state, v any, _ []any, _ map[string]any) (any, error) {
			items, err := st.iterate(v)
			if err != nil {
				return nil, err
			}
			if l, ok := v.(*list); ok {
				// iterate returns the list's own items: copy them.
				if err := st.newList(int64(len(l.items)), "list"); err != nil {
					return nil, err
				}
				items = append([]any(nil), items...)
			}
			return &list{items: items}, nil
		},
		"reverse": filterReverse,
		"join": func(st *state, v any, args []any, kw map[string]any) (any, error) {
			items, err := st.iterate(v)
			if err != nil {
				return nil, err
			}
			sep, attr := "", ""
			if s, ok := kwOrArg(args, kw, 0, "d"); ok {
				if sep, err = st.str(s); err != nil {
					return nil, err
				}
			}
			if a, ok := kwOrArg(args, kw, 1, "attribute"); ok {
				if attr, err = st.str(a); err != nil {
					return nil, err
				}
			}
			return st.join(items, sep, attr)
		},
		"replace": strFilter(func(st *state, s string, args []any, _ map[string]any) (any, error) { return st.replace(s, args) }),
		"tojson":  filterToJSON,
		"items": func(st *state, v any, _ []any, _ map[string]any) (any, error) {
			d, ok := v.(*dict)
			if !ok {
				if isNilOrUndef(v) {
					return &list{}, nil
				}
				return nil, fmt.Errorf("items: expected a mapping, got %s", typeName(v))
			}
			return st.dictItems(d, d.keys)
		},
		"dictsort":   filterDictsort,
		"unique":     filterUnique,
		"sort":       filterSort,
		"map":        filterMap,
		"select":     selectFilter(false, false),
		"reject":     selectFilter(true, false),
		"selectattr": selectFilter(false, true),
		"rejectattr": selectFilter(true, true),
		"indent":     filterIndent,
		// wordcount counts matches of Python's \w+ (letters, digits, _).
		"wordcount": strFilter(func(st *state, s string, _ []any, _ map[string]any) (any, error) {
			n, in := int64(0), false
			for _, r := range s {
				w := r == '_' || unicode.IsLetter(r) || unicode.IsNumber(r)
				if w && !in {
					n++
				}
				in = w
			}
			return n, st.spend(int64(len(s)))
		}),
		"sum":      filterSum,
		"round":    filterRound,
		"min":      minMaxFilter(false),
		"max":      minMaxFilter(true),
		"batch":    filterBatch,
		"truncate": strFilter(filterTruncate),
		"format": strFilter(func(st *state, s string, args []any, kw map[string]any) (any, error) {
			if len(args) > 0 && len(kw) > 0 {
				return nil, fmt.Errorf("format: can't handle positional and keyword arguments at the same time")
			}
			if len(kw) > 0 {
				if err := st.newDict(int64(len(kw)), "format's arguments"); err != nil {
					return nil, err
				}
				d := newDict()
				setSorted(d, kw)
				return st.pyPercent(s, d)
			}
			return st.pyPercent(s, &list{items: args, tuple: true})
		}),
	}
}

// filterSum is Jinja's sum(iterable, attribute=None, start=0): start plus
// each item (or its attribute), with +.
func filterSum(st *state, v any, args []any, kw map[string]any) (any, error) {
	items, err := st.iterate(v)
	if err != nil {
		return nil, err
	}
	attr, _ := kwOrArg(args, kw, 0, "attribute")
	total := any(int64(0))
	if s, ok := kwOrArg(args, kw, 1, "start"); ok {
		total = s
	}
	if _, ok := total.(string); ok {
		return nil, fmt.Errorf("sum: can't sum strings (use join)")
	}
	for _, it := range items {
		if err := st.step(); err != nil {
			return nil, err
		}
		if !isNilOrUndef(attr) {
			if it, err = st.getAttrOrItem(it, scalarStr(attr)); err != nil {
				return nil, err
			}
		}
		if total, err = st.arith("+", total, it); err != nil {
			return nil, fmt.Errorf("sum: %w", err)
		}
	}
	return total, nil
}

// filterRound is Jinja's round(value, precision=0, method='common'):
// 'common' is Python's round (half to even on the exact binary value; an
// integer stays an integer), 'ceil' and 'floor' give a float.
func filterRound(_ *state, v any, args []any, kw map[string]any) (any, error) {
	prec := int64(0)
	if p, ok := kwOrArg(args, kw, 0, "precision"); ok {
		n, ok := asIntStrict(p)
		if !ok {
			return nil, fmt.Errorf("round: precision must be an integer, got %s", typeName(p))
		}
		prec = n
	}
	method := "common"
	if m, ok := kwOrArg(args, kw, 1, "method"); ok {
		method, _ = m.(string)
	}
	if method != "common" && method != "ceil" && method != "floor" {
		return nil, fmt.Errorf("round: method must be common, ceil or floor")
	}
	if _, ok := asFloat(v); !ok {
		return nil, fmt.Errorf("round: expected a number, got %s", typeName(v))
	}
	if method == "common" {
		if n, ok := asIntStrict(v); ok {
			return roundInt(n, prec), nil
		}
		return roundFloat(v.(float64), prec)
	}
	x, _ := asFloat(v)
	scale, _ := strconv.ParseFloat("1e"+strconv.FormatInt(max(min(prec, 400), -400), 10), 64)
	y := x * scale
	if method == "ceil" {
		y = math.Ceil(y)
	} else {
		y = math.Floor(y)
	}
	if math.IsInf(y, 0) || math.IsNaN(y) {
		return nil, fmt.Errorf("round: cannot convert %s to an integer", pyFloat(y))
	}
	return y / scale, nil
}

// roundInt is Python's round(n, prec) for an integer: prec >= 0 keeps n,
// a negative one rounds half to even to a multiple of 10**-prec.
func roundInt(n, prec int64) int64 {
	if prec >= 0 {
		return n
	}
	if prec < -18 {
		return 0
	}
	p := int64(1)
	for range -prec {
		p *= 10
	}
	r := n % p
	if r < 0 {
		r += p
	}
	q := n - r // a multiple of p, at most n
	if r > p-r || r == p-r && (q/p)%2 != 0 {
		if q > math.MaxInt64-p {
			return q // saturate rather than overflow
		}
		q += p
	}
	return q
}

// roundFloat is Python's round(x, prec) for a float: exact, half to even.
func roundFloat(x float64, prec int64) (any, error) {
	if math.IsNaN(x) || math.IsInf(x, 0) || x == 0 || prec > 330 {
		return x, nil
	}
	if prec < -330 {
		return math.Copysign(0, x), nil
	}
	r := new(big.Rat).SetFloat64(x)
	scale := new(big.Rat).SetInt(new(big.Int).Exp(big.NewInt(10), big.NewInt(abs64(prec)), nil))
	if prec >= 0 {
		r.Mul(r, scale)
	} else {
		r.Quo(r, scale)
	}
	// Half to even: floor, then compare the remainder with one half.
	q, m := new(big.Int).DivMod(r.Num(), r.Denom(), new(big.Int))
	twice := new(big.Int).Lsh(m, 1)
	if c := twice.Cmp(r.Denom()); c > 0 || c == 0 && q.Bit(0) == 1 {
		q.Add(q, big.NewInt(1))
	}
	res := new(big.Rat).SetInt(q)
	if prec >= 0 {
		res.Quo(res, scale)
	} else {
		res.Mul(res, scale)
	}
	f, _ := res.Float64()
	if math.IsInf(f, 0) {
		return nil, fmt.Errorf("round: overflow")
	}
	if f == 0 {
		f = math.Copysign(0, x)
	}
	return f, nil
}

func abs64(n int64) int64 {
	if n < 0 {
		return -n
	}
	return n
}

// minMaxFilter is Jinja's min and max(case_sensitive=False,
// attribute=None): the first smallest or largest item, undefined when
// there is none.
func minMaxFilter(isMax bool) filterFn {
	return func(st *state, v any, args []any, kw map[string]any) (any, error) {
		items, err := st.iterate(v)
		if err != nil {
			return nil, err
		}
		caseSensitive := kwFlag(args, kw, 0, "case_sensitive")
		attr, _ := kwOrArg(args, kw, 1, "attribute")
		var best, bestKey any = undefined{}, nil
		for i, it := range items {
			if err := st.spend(itemCost); err != nil {
				return nil, err
			}
			k, err := st.itemKey(it, attr, caseSensitive)
			if err != nil {
				return nil, err
			}
			if i > 0 {
				c, err := compare(k, bestKey)
				if err != nil {
					return nil, err
				}
				if isMax && c <= 0 || !isMax && c >= 0 {
					continue
				}
			}
			best, bestKey = it, k
		}
		return best, nil
	}
}

// filterBatch is Jinja's batch(linecount, fill_with=None): lists of
// linecount items, the last filled up with fill_with when it is given.
func filterBatch(st *state, v any, args []any, kw map[string]any) (any, error) {
	items, err := st.iterate(v)
	if err != nil {
		return nil, err
	}
	lc, ok := kwOrArg(args, kw, 0, "linecount")
	n, isInt := asInt(lc)
	if !ok || !isInt {
		return nil, fmt.Errorf("batch: linecount must be an integer")
	}
	fill, _ := kwOrArg(args, kw, 1, "fill_with")
	if err := st.newList(2*int64(len(items)), "batch's result"); err != nil {
		return nil, err
	}
	out := &list{}
	var cur []any
	for _, it := range items {
		if int64(len(cur)) == n {
			out.items = append(out.items, &list{items: cur})
			cur = nil
		}
		cur = append(cur, it)
	}
	if len(cur) > 0 {
		if fill != nil && int64(len(cur)) < n {
			if err := st.newList(n-int64(len(cur)), "batch's fill"); err != nil {
				return nil, err
			}
			for int64(len(cur)) < n {
				cur = append(cur, fill)
			}
		}
		out.items = append(out.items, &list{items: cur})
	}
	return out, nil
}

// filterTruncate is Jinja's truncate(length=255, killwords=False,
// end='...', leeway=5): a string longer than length+leeway characters is
// cut to length-len(end) (at the last space unless killwords) plus end.
func filterTruncate(st *state, s string, args []any, kw map[string]any) (any, error) {
	length, killwords, end, leeway := int64(255), false, "...", int64(5)
	if v, ok := kwOrArg(args, kw, 0, "length"); ok {
		if length, ok = asIntStrict(v); !ok {
			return nil, fmt.Errorf("truncate: length must be an integer")
		}
	}
	killwords = kwFlag(args, kw, 1, "killwords")
	if v, ok := kwOrArg(args, kw, 2, "end"); ok {
		var err error
		if end, err = strArgOf("truncate", v); err != nil {
			return nil, err
		}
	}
	if v, ok := kwOrArg(args, kw, 3, "leeway"); ok && v != nil {
		if leeway, ok = asIntStrict(v); !ok {
			return nil, fmt.Errorf("truncate: leeway must be an integer")
		}
	}
	endLen := int64(utf8.RuneCountInString(end))
	if length < endLen {
		return nil, fmt.Errorf("truncate: expected length >= %d, got %d", endLen, length)
	}
	if leeway < 0 {
		return nil, fmt.Errorf("truncate: expected leeway >= 0, got %d", leeway)
	}
	if err := st.spend(int64(len(s))); err != nil {
		return nil, err
	}
	if int64(utf8.RuneCountInString(s)) <= addSize(length, leeway) {
		return s, nil
	}
	head := s[:runeOffset(s, int(length-endLen))]
	if !killwords {
		if i := strings.LastIndexByte(head, ' '); i >= 0 {
			head = head[:i]
		}
	}
	if err := st.newStr(int64(len(head))+int64(len(end)), "truncate's result"); err != nil {
		return nil, err
	}
	return head + end, nil
}

// filterToJSON is transformers' tojson(x, ensure_ascii=False, indent=None,
// separators=None, sort_keys=False), which is json.dumps with those
// arguments: the first positional argument is ensure_ascii, not indent.
func filterToJSON(st *state, v any, args []any, kw map[string]any) (any, error) {
	o := jsonOptions{itemSep: ", ", keySep: ": "}
	o.ascii = kwFlag(args, kw, 0, "ensure_ascii")
	if iv, ok := kwOrArg(args, kw, 1, "indent"); ok && !isNilOrUndef(iv) {
		o.pretty, o.itemSep = true, ","
		if s, ok := iv.(string); ok {
			o.indent = s
		} else if n, ok := asIntStrict(iv); ok {
			if err := st.newStr(max(n, 0), "tojson's indent"); err != nil {
				return nil, err
			}
			o.indent = strings.Repeat(" ", int(max(n, 0)))
		} else {
			return nil, fmt.Errorf("tojson: indent must be an integer or a string, got %s", typeName(iv))
		}
	}
	if sv, ok := kwOrArg(args, kw, 2, "separators"); ok && !isNilOrUndef(sv) {
		l, ok := sv.(*list)
		if !ok || len(l.items) != 2 {
			return nil, fmt.Errorf("tojson: separators must be a pair of strings, got %s", typeName(sv))
		}
		item, ok1 := l.items[0].(string)
		key, ok2 := l.items[1].(string)
		if !ok1 || !ok2 {
			return nil, fmt.Errorf("tojson: separators must be a pair of strings")
		}
		o.itemSep, o.keySep = item, key
	}
	o.sortKeys = kwFlag(args, kw, 3, "sort_keys")
	p := printer{st: st, what: "tojson's result"}
	if err := p.toJSON(v, &o, 0); err != nil {
		return nil, err
	}
	return p.b.String(), p.flush()
}

func filterLength(st *state, v any, _ []any, _ map[string]any) (any, error) {
	switch x := v.(type) {
	case string:
		return int64(utf8.RuneCountInString(x)), st.spend(int64(len(x)))
	case *list:
		return int64(len(x.items)), nil
	case *dict:
		return int64(len(x.keys)), nil
	case undefined, nil:
		return int64(0), nil
	}
	return nil, fmt.Errorf("length: %s has no length", typeName(v))
}

var htmlEscaper = strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", "\"", "&#34;", "'", "&#39;")

func filterEscape(st *state, v any, _ []any, _ map[string]any) (any, error) {
	s, err := st.str(v)
	if err != nil {
		return nil, err
	}
	size := int64(len(s))
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '&', '<', '>':
			size += 3
		case '"', '\'':
			size += 4
		}
	}
	if size == int64(len(s)) {
		return s, st.spend(size)
	}
	if err := st.newStr(size, "escape's result"); err != nil {
		return nil, err
	}
	return htmlEscaper.Replace(s), nil
}

// filterInt is Jinja's int(value, default=0, base=10): a string is
// Python's int(s, base) (base 0 or 16 accept prefixes like 0x), or else
// int(float(s)); a value that cannot be converted gives the default; one
// that does not fit in 64 bits is an overflow error.
func filterInt(st *state, v any, args []any, kw map[string]any) (any, error) {
	def := any(int64(0))
	if d, ok := kwOrArg(args, kw, 0, "default"); ok {
		def = d
	}
	base := int64(10)
	if b, ok := kwOrArg(args, kw, 1, "base"); ok {
		n, ok := asIntStrict(b)
		if !ok || n != 0 && (n < 2 || n > 36) {
			return nil, fmt.Errorf("int: base must be 0 or 2 to 36")
		}
		base = n
	}
	fromFloat := func(f float64) (any, error) {
		if math.IsNaN(f) || math.IsInf(f, 0) {
			return def, nil
		}
		if f >= -(1<<63) && f < 1<<63 {
			return int64(f), nil
		}
		return nil, limitf("integer overflow: int(%s) does not fit in 64 bits (chat templates use 64-bit integers)", pyFloat(f))
	}
	switch x := v.(type) {
	case int64:
		return x, nil
	case float64:
		return fromFloat(x)
	case bool:
		return b2i(x), nil
	case string:
		if err := st.spend(int64(len(x))); err != nil {
			return nil, err
		}
		t := strings.TrimFunc(x, pyIsSpace)
		n, err := pyParseInt(t, int(base))
		if err == nil {
			return n, nil
		}
		if errors.Is(err, strconv.ErrRange) {
			return nil, limitf("integer overflow: int(%.40q) does not fit in 64 bits (chat templates use 64-bit integers)", t)
		}
		if f, ok := pyParseFloat(t); ok {
			return fromFloat(f)
		}
	}
	return def, nil
}

// pyParseInt is Python's int(s, base) on a stripped string: a sign, "_"
// between digits, and for base 0 (or a matching base) a 0x/0o/0b prefix;
// base 0 also refuses leading zeros ("010").
func pyParseInt(s string, base int) (int64, error) {
	body, neg := s, false
	if body != "" && (body[0] == '+' || body[0] == '-') {
		neg, body = body[0] == '-', body[1:]
	}
	if len(body) > 1 && body[0] == '0' {
		pb := 0
		switch body[1] | 0x20 {
		case 'x':
			pb = 16
		case 'o':
			pb = 8
		case 'b':
			pb = 2
		}
		if pb != 0 && (base == 0 || base == pb) {
			body, base = body[2:], pb
			if strings.HasPrefix(body, "_") {
				body = body[1:]
			}
		}
	}
	if base == 0 {
		if len(body) > 1 && body[0] == '0' && strings.Trim(body, "0_") != "" {
			return 0, strconv.ErrSyntax
		}
		base = 10
	}
	if body == "" || body[0] == '_' || body[len(body)-1] == '_' || strings.Contains(body, "__") {
		return 0, strconv.ErrSyntax
	}
	u, err := strconv.ParseUint(strings.ReplaceAll(body, "_", ""), base, 64)
	if err != nil {
		if errors.Is(err, strconv.ErrRange) {
			return 0, strconv.ErrRange
		}
		return 0, strconv.ErrSyntax
	}
	if neg {
		if u > 1<<63 {
			return 0, strconv.ErrRange
		}
		return -int64(u), nil
	}
	if u > math.MaxInt64 {
		return 0, strconv.ErrRange
	}
	return int64(u), nil
}

// pyParseFloat is Python's float(s) on a stripped string: decimal and
// exponent forms with "_" between digits, inf, infinity and nan; not Go's
// hex floats.
func pyParseFloat(s string) (float64, bool) {
	t := strings.ToLower(strings.TrimLeft(s, "+-"))
	switch t {
	case "inf", "infinity", "nan":
	default:
		if t == "" || strings.ContainsAny(t, "xp") || strings.Contains(t, "__") || t[0] == '_' || t[len(t)-1] == '_' {
			return 0, false
		}
		for i := 1; i < len(t)-1; i++ {
			if t[i] == '_' && !(t[i-1] >= '0' && t[i-1] <= '9' && t[i+1] >= '0' && t[i+1] <= '9') {
				return 0, false
			}
		}
	}
	f, err := strconv.ParseFloat(strings.ReplaceAll(s, "_", ""), 64)
	return f, err == nil || errors.Is(err, strconv.ErrRange)
}

func filterDefault(_ *state, v any, args []any, kw map[string]any) (any, error) {
	def := any("")
	if len(args) > 0 {
		def = args[0]
	}
	boolean := kwFlag(args, kw, 1, "boolean")
	if isUndef(v) || (boolean && !truthy(v)) {
		return def, nil
	}
	return v, nil
}

func (st *state) firstLast(v any, first bool) (any, error) {
	switch x := v.(type) {
	case *list:
		if len(x.items) == 0 {
			return undefined{}, nil
		}
		if first {
			return x.items[0], nil
		}
		return x.items[len(x.items)-1], nil
	case *dict:
		if len(x.keys) == 0 {
			return undefined{}, nil
		}
		if first {
			return x.keys[0], nil
		}
		return x.keys[len(x.keys)-1], nil
	case string:
		if x == "" {
			return undefined{}, nil
		}
		if first {
			_, w := utf8.DecodeRuneInString(x)
			return x[:w], nil
		}
		_, w := utf8.DecodeLastRuneInString(x)
		return x[len(x)-w:], nil
	case undefined, nil:
		return undefined{}, nil
	}
	return nil, fmt.Errorf("%s is not iterable", typeName(v))
}

func filterReverse(st *state, v any, _ []any, _ map[string]any) (any, error) {
	if s, ok := v.(string); ok {
		if err := st.newStr(int64(len(s)), "reverse's result"); err != nil {
			return nil, err
		}
		// Character by character, copying each one's bytes as they are.
		var b strings.Builder
		b.Grow(len(s))
		for j := len(s); j > 0; {
			_, w := utf8.DecodeLastRuneInString(s[:j])
			b.WriteString(s[j-w : j])
			j -= w
		}
		return b.String(), nil
	}
	items, err := st.iterate(v)
	if err != nil {
		return nil, err
	}
	if err := st.newList(int64(len(items)), "reverse's result"); err != nil {
		return nil, err
	}
	out := make([]any, len(items))
	for i, it := range items {
		out[len(items)-1-i] = it
	}
	return &list{items: out}, nil
}

// sortKey is what sort, dictsort and unique compare: strings lower-cased
// unless case_sensitive (Jinja's default is case-insensitive).
func (st *state) sortKey(v any, caseSensitive bool) (any, error) {
	if s, ok := v.(string); ok && !caseSensitive {
		return st.mapCase(s, lowerRunes)
	}
	return v, nil
}

// itemKey is the key sort, unique, min and max compare an item by (Jinja's
// make_attrgetter with ignore_case): its attribute when attr is given, then
// sortKey.
func (st *state) itemKey(it, attr any, caseSensitive bool) (any, error) {
	if !isNilOrUndef(attr) {
		var err error
		if it, err = st.getAttrOrItem(it, scalarStr(attr)); err != nil {
			return nil, err
		}
	}
	return st.sortKey(it, caseSensitive)
}

// sortBy sorts items stably by keys, charging n log n comparisons first.
func (st *state) sortBy(items, keys []any, reverse bool) error {
	if err := st.spend(itemCost * sortCost(len(items))); err != nil {
		return err
	}
	idx := make([]int, len(items))
	for i := range idx {
		idx[i] = i
	}
	var cmpErr error
	sort.SliceStable(idx, func(a, b int) bool {
		if cmpErr != nil {
			return false
		}
		c, err := compare(keys[idx[a]], keys[idx[b]])
		if err != nil {
			cmpErr = fmt.Errorf("sort: %w", err)
			return false
		}
		if reverse {
			return c > 0
		}
		return c < 0
	})
	if cmpErr != nil {
		return cmpErr
	}
	sorted := make([]any, len(items))
	for i, j := range idx {
		sorted[i] = items[j]
	}
	copy(items, sorted)
	return nil
}

func filterSort(st *state, v any, args []any, kw map[string]any) (any, error) {
	items, err := st.iterate(v)
	if err != nil {
		return nil, err
	}
	n := int64(len(items))
	// The copy, the keys, the order and its result.
	if err := st.newList(4*n, "sort's working lists"); err != nil {
		return nil, err
	}
	out := append([]any(nil), items...)
	rev := kwFlag(args, kw, 0, "reverse")
	caseSensitive := kwFlag(args, kw, 1, "case_sensitive")
	attr, _ := kwOrArg(args, kw, 2, "attribute")
	keys := make([]any, len(out))
	for i, it := range out {
		if keys[i], err = st.itemKey(it, attr, caseSensitive); err != nil {
			return nil, err
		}
	}
	if err := st.sortBy(out, keys, rev); err != nil {
		return nil, err
	}
	return &list{items: out}, nil
}

// filterDictsort is Jinja's dictsort(case_sensitive=False, by='key',
// reverse=False): the [key, value] pairs sorted by key or value.
func filterDictsort(st *state, v any, args []any, kw map[string]any) (any, error) {
	d, ok := v.(*dict)
	if !ok {
		return nil, fmt.Errorf("dictsort: expected a mapping, got %s", typeName(v))
	}
	caseSensitive, byValue := kwFlag(args, kw, 0, "case_sensitive"), false
	if b, ok := kwOrArg(args, kw, 1, "by"); ok {
		switch b {
		case "key":
		case "value":
			byValue = true
		default:
			return nil, fmt.Errorf("dictsort: by must be 'key' or 'value'")
		}
	}
	rev := kwFlag(args, kw, 2, "reverse")
	n := int64(len(d.keys))
	if err := st.newList(3*n, "dictsort's working lists"); err != nil {
		return nil, err
	}
	items := make([]any, n)
	keys := make([]any, n)
	for i, k := range d.keys {
		items[i] = k
		var kv any = k
		if byValue {
			kv = d.m[k]
		}
		var err error
		if keys[i], err = st.sortKey(kv, caseSensitive); err != nil {
			return nil, err
		}
	}
	if err := st.sortBy(items, keys, rev); err != nil {
		return nil, fmt.Errorf("dictsort: %w", err)
	}
	sorted := make([]string, n)
	for i, it := range items {
		sorted[i] = it.(string)
	}
	return st.dictItems(d, sorted)
}

// hashKey is the set key unique uses: equal values (1, 1.0 and True) have
// equal keys, as Python's hash makes them; lists and dicts are unhashable.
type floatKey float64
type noneKey struct{}

func hashKey(v any) (any, error) {
	switch x := v.(type) {
	case string, undefined:
		return x, nil
	case nil:
		return noneKey{}, nil
	case bool:
		return b2i(x), nil
	case int64:
		return x, nil
	case float64:
		if i, ok := asInt(x); ok {
			return i, nil
		}
		return floatKey(x), nil
	}
	return nil, fmt.Errorf("unique: unhashable type: '%s'", typeName(v))
}

// filterUnique is Jinja's unique(case_sensitive=False, attribute=None):
// first occurrences in order, found with a set in one pass.
func filterUnique(st *state, v any, args []any, kw map[string]any) (any, error) {
	items, err := st.iterate(v)
	if err != nil {
		return nil, err
	}
	caseSensitive := kwFlag(args, kw, 0, "case_sensitive")
	attr, _ := kwOrArg(args, kw, 1, "attribute")
	// The set and the result.
	if err := st.newDict(int64(len(items)), "unique's set"); err != nil {
		return nil, err
	}
	seen := make(map[any]struct{})
	l := &list{}
	for _, it := range items {
		if err := st.spend(itemCost); err != nil {
			return nil, err
		}
		kv, err := st.itemKey(it, attr, caseSensitive)
		if err != nil {
			return nil, err
		}
		k, err := hashKey(kv)
		if err != nil {
			return nil, err
		}
		if _, dup := seen[k]; !dup {
			seen[k] = struct{}{}
			l.items = append(l.items, it)
		}
	}
	return l, nil
}

func filterMap(st *state, v any, args []any, kw map[string]any) (any, error) {
	items, err := st.iterate(v)
	if err != nil {
		return nil, err
	}
	if err := st.newList(int64(len(items)), "map's result"); err != nil {
		return nil, err
	}
	l := &list{items: make([]any, 0, len(items))}
	if attr, ok := kw["attribute"]; ok {
		for _, it := range items {
			val, err := st.getAttrOrItem(it, scalarStr(attr))
			if err != nil {
				return nil, err
			}
			if isUndef(val) {
				if d, ok := kw["default"]; ok {
					val = d
				}
			}
			l.items = append(l.items, val)
		}
		return l, nil
	}
	if len(args) == 0 {
		return nil, fmt.Errorf("map: expected a filter name or attribute=")
	}
	name, ok := args[0].(string)
	if !ok {
		return nil, fmt.Errorf("map: expected a filter name, got %s", typeName(args[0]))
	}
	f, ok := filters[name]
	if !ok {
		return nil, fmt.Errorf("map: unknown filter %q", name)
	}
	for _, it := range items {
		if err := st.step(); err != nil {
			return nil, err
		}
		r, err := f(st, it, args[1:], nil)
		if err != nil {
			return nil, err
		}
		l.items = append(l.items, r)
	}
	return l, nil
}

func filterIndent(st *state, v any, args []any, kw map[string]any) (any, error) {
	s, err := st.str(v)
	if err != nil {
		return nil, err
	}
	width := "    "
	if w, ok := kwOrArg(args, kw, 0, "width"); ok {
		if n, ok := asIntStrict(w); ok {
			n = max(n, 0)
			if err := st.newStr(n, "indent's width"); err != nil {
				return nil, err
			}
			width = strings.Repeat(" ", int(n))
		} else if width, err = st.str(w); err != nil {
			return nil, err
		}
	}
	first := kwFlag(args, kw, 1, "first")
	if err := st.spend(int64(len(s))); err != nil {
		return nil, err
	}
	// Count the lines that get the prefix before building anything.
	indented, i := int64(0), 0
	for line := range strings.SplitSeq(s, "\n") {
		if (i > 0 || first) && line != "" {
			indented++
		}
		i++
	}
	size := addSize(int64(len(s)), mulSize(indented, int64(len(width))))
	if err := st.newStr(size, "indent's result"); err != nil {
		return nil, err
	}
	var b strings.Builder
	b.Grow(int(size))
	i = 0
	for line := range strings.SplitSeq(s, "\n") {
		if i > 0 {
			b.WriteByte('\n')
		}
		if (i > 0 || first) && line != "" {
			b.WriteString(width)
		}
		b.WriteString(line)
		i++
	}
	return b.String(), nil
}

// getAttrOrItem follows a dotted attribute path ("a.b", "items.0") as
// Jinja's attribute= arguments do.
func (st *state) getAttrOrItem(v any, name string) (any, error) {
	cur := v
	for part := range strings.SplitSeq(name, ".") {
		if d, ok := cur.(*dict); ok {
			x, ok := d.get(part)
			if !ok {
				return undefined{}, nil
			}
			cur = x
			continue
		}
		if n, err := strconv.ParseInt(part, 10, 64); err == nil {
			var err error
			if cur, err = st.getItem(cur, n); err != nil {
				return nil, err
			}
			continue
		}
		cur = getAttr(cur, part)
	}
	return cur, nil
}

func selectFilter(reject, byAttr bool) filterFn {
	return func(st *state, v any, args []any, _ map[string]any) (any, error) {
		items, err := st.iterate(v)
		if err != nil {
			return nil, err
		}
		attr := ""
		if byAttr {
			if len(args) == 0 {
				return nil, fmt.Errorf("selectattr: expected an attribute name")
			}
			attr, args = scalarStr(args[0]), args[1:]
		}
		var test testFn
		if len(args) > 0 {
			name, ok := args[0].(string)
			if !ok {
				return nil, fmt.Errorf("select: expected a test name, got %s", typeName(args[0]))
			}
			t, ok := tests[name]
			if !ok {
				return nil, fmt.Errorf("unknown test %q", name)
			}
			test, args = t, args[1:]
		}
		if err := st.newList(int64(len(items)), "select's result"); err != nil {
			return nil, err
		}
		l := &list{}
		for _, it := range items {
			if err := st.spend(itemCost); err != nil {
				return nil, err
			}
			val := it
			if byAttr {
				if val, err = st.getAttrOrItem(it, attr); err != nil {
					return nil, err
				}
			}
			ok := truthy(val)
			if test != nil {
				if ok, err = test(st, val, args); err != nil {
					return nil, err
				}
			}
			if ok != reject {
				l.items = append(l.items, it)
			}
		}
		return l, nil
	}
}

// ---------------------------------------------------------------------------
// Tests

type testFn func(st *state, v any, args []any) (bool, error)

var tests map[string]testFn

func simpleTest(f func(v any) bool) testFn {
	return func(_ *state, v any, _ []any) (bool, error) { return f(v), nil }
}

func init() {
	arg0 := func(args []any) any {
		if len(args) > 0 {
			return args[0]
		}
		return undefined{}
	}
	eq := func(st *state, v any, args []any) (bool, error) { return st.equal(v, arg0(args), 0) }
	ne := func(st *state, v any, args []any) (bool, error) {
		e, err := st.equal(v, arg0(args), 0)
		return !e, err
	}
	tests = map[string]testFn{
		"defined":   simpleTest(func(v any) bool { return !isUndef(v) }),
		"undefined": simpleTest(isUndef),
		"none":      simpleTest(func(v any) bool { return v == nil }),
		"string":    simpleTest(func(v any) bool { _, ok := v.(string); return ok }),
		// Python's bool is an int, so true is a number (and not an integer).
		"number": simpleTest(func(v any) bool {
			switch v.(type) {
			case int64, float64, bool:
				return true
			}
			return false
		}),
		"integer": simpleTest(func(v any) bool { _, ok := v.(int64); return ok }),
		"float":   simpleTest(func(v any) bool { _, ok := v.(float64); return ok }),
		"boolean": simpleTest(func(v any) bool { _, ok := v.(bool); return ok }),
		"true":    simpleTest(func(v any) bool { b, ok := v.(bool); return ok && b }),
		"false":   simpleTest(func(v any) bool { b, ok := v.(bool); return ok && !b }),
		"mapping": simpleTest(func(v any) bool { _, ok := v.(*dict); return ok }),
		// Jinja's Undefined iterates as empty, and has a length and
		// __getitem__, so it is iterable and a sequence.
		"iterable": simpleTest(func(v any) bool {
			switch v.(type) {
			case string, *list, *dict, undefined:
				return true
			}
			return false
		}),
		"sequence": simpleTest(func(v any) bool {
			switch v.(type) {
			case string, *list, *dict, undefined:
				return true
			}
			return false
		}),
		"filter": simpleTest(func(v any) bool {
			s, ok := v.(string)
			_, known := filters[s]
			return ok && known
		}),
		"test": simpleTest(func(v any) bool {
			s, ok := v.(string)
			_, known := tests[s]
			return ok && known
		}),
		"escaped": simpleTest(func(any) bool { return false }), // no Markup values
		"callable": simpleTest(func(v any) bool {
			switch v.(type) {
			case *builtin, *macro:
				return true
			}
			return false
		}),
		"odd": simpleTest(func(v any) bool {
			n, ok := asInt(v)
			return ok && n%2 != 0
		}),
		"even": simpleTest(func(v any) bool {
			n, ok := asInt(v)
			return ok && n%2 == 0
		}),
		"divisibleby": func(_ *state, v any, args []any) (bool, error) {
			n, ok1 := asInt(v)
			d, ok2 := asInt(arg0(args))
			if !ok1 || !ok2 || d == 0 {
				return false, fmt.Errorf("divisibleby: expected integers")
			}
			return d == -1 || n%d == 0, nil
		},
		"eq":      eq,
		"equalto": eq,
		"==":      eq,
		"sameas": func(st *state, v any, args []any) (bool, error) {
			switch v.(type) {
			case *list, *dict, *builtin, *macro, *loopCtx:
				return v == arg0(args), nil
			}
			return st.equal(v, arg0(args), 0)
		},
		"ne": ne,
		"!=": ne,
		"in": func(st *state, v any, args []any) (bool, error) { return st.contains(arg0(args), v) },
		"lower": func(st *state, v any, _ []any) (bool, error) {
			s, ok := v.(string)
			return ok && strIs(s, "islower"), st.spend(int64(len(s)))
		},
		"upper": func(st *state, v any, _ []any) (bool, error) {
			s, ok := v.(string)
			return ok && strIs(s, "isupper"), st.spend(int64(len(s)))
		},
		"gt":          cmpTest(func(c int) bool { return c > 0 }),
		">":           cmpTest(func(c int) bool { return c > 0 }),
		"ge":          cmpTest(func(c int) bool { return c >= 0 }),
		">=":          cmpTest(func(c int) bool { return c >= 0 }),
		"lt":          cmpTest(func(c int) bool { return c < 0 }),
		"<":           cmpTest(func(c int) bool { return c < 0 }),
		"le":          cmpTest(func(c int) bool { return c <= 0 }),
		"<=":          cmpTest(func(c int) bool { return c <= 0 }),
		"greaterthan": cmpTest(func(c int) bool { return c > 0 }),
		"lessthan":    cmpTest(func(c int) bool { return c < 0 }),
	}
}

func cmpTest(ok func(int) bool) testFn {
	return func(_ *state, v any, args []any) (bool, error) {
		if len(args) == 0 {
			return false, fmt.Errorf("comparison test needs an argument")
		}
		c, err := compare(v, args[0])
		if err != nil {
			return false, err
		}
		return ok(c), nil
	}
}
