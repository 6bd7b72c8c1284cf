package chat

import (
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode"
)

// ErrRaised is wrapped by errors from the template's raise_exception().
var ErrRaised = errors.New("chat template raised an exception")

const maxRange = 1 << 20

var globals map[string]any

func init() {
	globals = map[string]any{
		"raise_exception": fn(func(_ *state, args []any, _ map[string]any) (any, error) {
			msg := ""
			if len(args) > 0 {
				msg = toStr(args[0])
			}
			return nil, fmt.Errorf("%w: %s", ErrRaised, msg)
		}),
		"namespace": fn(func(_ *state, args []any, kw map[string]any) (any, error) {
			d := newDict()
			if len(args) == 1 {
				if src, ok := args[0].(*dict); ok {
					for _, k := range src.keys {
						d.set(k, src.m[k])
					}
				}
			}
			setSorted(d, kw)
			return d, nil
		}),
		"dict": fn(func(_ *state, args []any, kw map[string]any) (any, error) {
			d := newDict()
			setSorted(d, kw)
			return d, nil
		}),
		"range": fn(func(_ *state, args []any, _ map[string]any) (any, error) {
			var start, stop, step int64 = 0, 0, 1
			ints := make([]int64, len(args))
			for i, a := range args {
				n, ok := asInt(a)
				if !ok {
					return nil, fmt.Errorf("range: expected integers")
				}
				ints[i] = n
			}
			switch len(ints) {
			case 1:
				stop = ints[0]
			case 2:
				start, stop = ints[0], ints[1]
			case 3:
				start, stop, step = ints[0], ints[1], ints[2]
			default:
				return nil, fmt.Errorf("range: expected 1 to 3 arguments")
			}
			if step == 0 {
				return nil, fmt.Errorf("range: step must not be zero")
			}
			n := int64(0)
			if step > 0 && stop > start {
				n = (stop - start + step - 1) / step
			} else if step < 0 && start > stop {
				n = (start - stop - step - 1) / -step
			}
			if n > maxRange {
				return nil, fmt.Errorf("%w: range of %d items (limit %d)", ErrLimit, n, maxRange)
			}
			l := &list{items: make([]any, 0, n)}
			for i := int64(0); i < n; i++ {
				l.items = append(l.items, start+i*step)
			}
			return l, nil
		}),
		"strftime_now": fn(func(st *state, args []any, _ map[string]any) (any, error) {
			if len(args) != 1 {
				return nil, fmt.Errorf("strftime_now: expected a format")
			}
			return strftime(time.Now(), toStr(args[0])), nil
		}),
	}
}

func setSorted(d *dict, kw map[string]any) {
	keys := make([]string, 0, len(kw))
	for k := range kw {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		d.set(k, kw[k])
	}
}

func strftime(t time.Time, f string) string {
	var b strings.Builder
	for i := 0; i < len(f); i++ {
		if f[i] != '%' || i+1 >= len(f) {
			b.WriteByte(f[i])
			continue
		}
		i++
		switch f[i] {
		case 'Y':
			b.WriteString(t.Format("2006"))
		case 'm':
			b.WriteString(t.Format("01"))
		case 'd':
			b.WriteString(t.Format("02"))
		case 'B':
			b.WriteString(t.Format("January"))
		case 'b':
			b.WriteString(t.Format("Jan"))
		case 'H':
			b.WriteString(t.Format("15"))
		case 'M':
			b.WriteString(t.Format("04"))
		case 'S':
			b.WriteString(t.Format("05"))
		case 'A':
			b.WriteString(t.Format("Monday"))
		case 'a':
			b.WriteString(t.Format("Mon"))
		case '%':
			b.WriteByte('%')
		default:
			b.WriteByte('%')
			b.WriteByte(f[i])
		}
	}
	return b.String()
}

// ---------------------------------------------------------------------------
// Methods

func method(f func(args []any, kw map[string]any) (any, error)) fn {
	return fn(func(_ *state, args []any, kw map[string]any) (any, error) { return f(args, kw) })
}

func strArg(args []any, i int, def string) string {
	if i < len(args) && !isNilOrUndef(args[i]) {
		return toStr(args[i])
	}
	return def
}

func strMethod(s, name string) fn {
	switch name {
	case "startswith", "endswith":
		return method(func(args []any, _ map[string]any) (any, error) {
			var prefixes []string
			if len(args) > 0 {
				if l, ok := args[0].(*list); ok {
					for _, it := range l.items {
						prefixes = append(prefixes, toStr(it))
					}
				} else {
					prefixes = []string{toStr(args[0])}
				}
			}
			for _, p := range prefixes {
				if name == "startswith" && strings.HasPrefix(s, p) || name == "endswith" && strings.HasSuffix(s, p) {
					return true, nil
				}
			}
			return false, nil
		})
	case "strip", "lstrip", "rstrip":
		return method(func(args []any, _ map[string]any) (any, error) {
			if len(args) > 0 && !isNilOrUndef(args[0]) {
				cut := toStr(args[0])
				switch name {
				case "strip":
					return strings.Trim(s, cut), nil
				case "lstrip":
					return strings.TrimLeft(s, cut), nil
				}
				return strings.TrimRight(s, cut), nil
			}
			switch name {
			case "strip":
				return strings.TrimSpace(s), nil
			case "lstrip":
				return strings.TrimLeftFunc(s, unicode.IsSpace), nil
			}
			return strings.TrimRightFunc(s, unicode.IsSpace), nil
		})
	case "split", "rsplit":
		return method(func(args []any, kw map[string]any) (any, error) {
			sep := strArg(args, 0, "")
			if v, ok := kw["sep"]; ok && !isNilOrUndef(v) {
				sep = toStr(v)
			}
			maxSplit := int64(-1)
			if len(args) > 1 {
				maxSplit, _ = asInt(args[1])
			}
			if v, ok := kw["maxsplit"]; ok {
				maxSplit, _ = asInt(v)
			}
			var parts []string
			switch {
			case sep == "" && maxSplit < 0:
				parts = strings.Fields(s)
			case sep == "":
				parts = strings.Fields(s) // maxsplit with whitespace: approximate
			case maxSplit < 0:
				parts = strings.Split(s, sep)
			case name == "split":
				parts = strings.SplitN(s, sep, int(maxSplit)+1)
			default:
				all := strings.Split(s, sep)
				if int64(len(all)) > maxSplit+1 {
					head := strings.Join(all[:int64(len(all))-maxSplit], sep)
					parts = append([]string{head}, all[int64(len(all))-maxSplit:]...)
				} else {
					parts = all
				}
			}
			l := &list{}
			for _, p := range parts {
				l.items = append(l.items, p)
			}
			return l, nil
		})
	case "lower":
		return method(func([]any, map[string]any) (any, error) { return strings.ToLower(s), nil })
	case "upper":
		return method(func([]any, map[string]any) (any, error) { return strings.ToUpper(s), nil })
	case "title":
		return method(func([]any, map[string]any) (any, error) { return titleCase(s), nil })
	case "capitalize":
		return method(func([]any, map[string]any) (any, error) { return capitalize(s), nil })
	case "replace":
		return method(func(args []any, _ map[string]any) (any, error) {
			if len(args) < 2 {
				return nil, fmt.Errorf("replace: expected 2 arguments")
			}
			n := -1
			if len(args) > 2 {
				c, _ := asInt(args[2])
				n = int(c)
			}
			return strings.Replace(s, toStr(args[0]), toStr(args[1]), n), nil
		})
	case "find", "index", "rfind":
		return method(func(args []any, _ map[string]any) (any, error) {
			sub := strArg(args, 0, "")
			var i int
			if name == "rfind" {
				i = strings.LastIndex(s, sub)
			} else {
				i = strings.Index(s, sub)
			}
			if i < 0 {
				if name == "index" {
					return nil, fmt.Errorf("substring not found")
				}
				return int64(-1), nil
			}
			return int64(len([]rune(s[:i]))), nil
		})
	case "count":
		return method(func(args []any, _ map[string]any) (any, error) {
			return int64(strings.Count(s, strArg(args, 0, ""))), nil
		})
	case "join":
		return method(func(args []any, _ map[string]any) (any, error) {
			if len(args) == 0 {
				return "", nil
			}
			l, ok := args[0].(*list)
			if !ok {
				return nil, fmt.Errorf("join: expected a list")
			}
			parts := make([]string, len(l.items))
			for i, it := range l.items {
				parts[i] = toStr(it)
			}
			return strings.Join(parts, s), nil
		})
	case "isdigit", "isalpha", "isspace", "isalnum", "islower", "isupper":
		return method(func([]any, map[string]any) (any, error) { return strIs(s, name), nil })
	}
	return nil
}

func strIs(s, name string) bool {
	if s == "" {
		return false
	}
	switch name {
	case "islower":
		return s == strings.ToLower(s) && s != strings.ToUpper(s)
	case "isupper":
		return s == strings.ToUpper(s) && s != strings.ToLower(s)
	}
	for _, r := range s {
		ok := false
		switch name {
		case "isdigit":
			ok = unicode.IsDigit(r)
		case "isalpha":
			ok = unicode.IsLetter(r)
		case "isspace":
			ok = unicode.IsSpace(r)
		case "isalnum":
			ok = unicode.IsLetter(r) || unicode.IsDigit(r)
		}
		if !ok {
			return false
		}
	}
	return true
}

func titleCase(s string) string {
	var b strings.Builder
	prev := false
	for _, r := range s {
		if unicode.IsLetter(r) {
			if prev {
				b.WriteRune(unicode.ToLower(r))
			} else {
				b.WriteRune(unicode.ToUpper(r))
			}
			prev = true
		} else {
			b.WriteRune(r)
			prev = false
		}
	}
	return b.String()
}

func capitalize(s string) string {
	r := []rune(strings.ToLower(s))
	if len(r) > 0 {
		r[0] = unicode.ToUpper(r[0])
	}
	return string(r)
}

func dictMethod(d *dict, name string) fn {
	switch name {
	case "items":
		return method(func([]any, map[string]any) (any, error) {
			l := &list{}
			for _, k := range d.keys {
				l.items = append(l.items, &list{items: []any{k, d.m[k]}})
			}
			return l, nil
		})
	case "keys":
		return method(func([]any, map[string]any) (any, error) {
			l := &list{}
			for _, k := range d.keys {
				l.items = append(l.items, k)
			}
			return l, nil
		})
	case "values":
		return method(func([]any, map[string]any) (any, error) {
			l := &list{}
			for _, k := range d.keys {
				l.items = append(l.items, d.m[k])
			}
			return l, nil
		})
	case "get":
		return method(func(args []any, _ map[string]any) (any, error) {
			if len(args) == 0 {
				return nil, fmt.Errorf("get: expected a key")
			}
			if v, ok := d.get(toStr(args[0])); ok {
				return v, nil
			}
			if len(args) > 1 {
				return args[1], nil
			}
			return nil, nil
		})
	case "update":
		return method(func(args []any, kw map[string]any) (any, error) {
			if len(args) > 0 {
				if o, ok := args[0].(*dict); ok {
					for _, k := range o.keys {
						d.set(k, o.m[k])
					}
				}
			}
			setSorted(d, kw)
			return nil, nil
		})
	}
	return nil
}

func listMethod(l *list, name string) fn {
	switch name {
	case "append":
		return method(func(args []any, _ map[string]any) (any, error) {
			if len(l.items) >= maxListItems {
				return nil, fmt.Errorf("%w: list longer than %d", ErrLimit, maxListItems)
			}
			if len(args) == 1 {
				l.items = append(l.items, args[0])
			}
			return nil, nil
		})
	case "pop":
		return method(func(args []any, _ map[string]any) (any, error) {
			if len(l.items) == 0 {
				return nil, fmt.Errorf("pop from empty list")
			}
			i := int64(len(l.items) - 1)
			if len(args) > 0 {
				i, _ = asInt(args[0])
				if i < 0 {
					i += int64(len(l.items))
				}
				if i < 0 || i >= int64(len(l.items)) {
					return nil, fmt.Errorf("pop index out of range")
				}
			}
			v := l.items[i]
			l.items = append(l.items[:i], l.items[i+1:]...)
			return v, nil
		})
	case "index":
		return method(func(args []any, _ map[string]any) (any, error) {
			for i, it := range l.items {
				if len(args) > 0 && equal(it, args[0]) {
					return int64(i), nil
				}
			}
			return nil, fmt.Errorf("value not in list")
		})
	case "count":
		return method(func(args []any, _ map[string]any) (any, error) {
			n := int64(0)
			for _, it := range l.items {
				if len(args) > 0 && equal(it, args[0]) {
					n++
				}
			}
			return n, nil
		})
	}
	return nil
}

// ---------------------------------------------------------------------------
// Filters

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

func init() {
	filters = map[string]filterFn{
		"trim": func(_ *state, v any, args []any, _ map[string]any) (any, error) {
			if len(args) > 0 {
				return strings.Trim(toStr(v), toStr(args[0])), nil
			}
			return strings.TrimSpace(toStr(v)), nil
		},
		"length": filterLength,
		"count":  filterLength,
		"string": func(_ *state, v any, _ []any, _ map[string]any) (any, error) { return toStr(v), nil },
		"lower":  func(_ *state, v any, _ []any, _ map[string]any) (any, error) { return strings.ToLower(toStr(v)), nil },
		"upper":  func(_ *state, v any, _ []any, _ map[string]any) (any, error) { return strings.ToUpper(toStr(v)), nil },
		"title":  func(_ *state, v any, _ []any, _ map[string]any) (any, error) { return titleCase(toStr(v)), nil },
		"capitalize": func(_ *state, v any, _ []any, _ map[string]any) (any, error) {
			return capitalize(toStr(v)), nil
		},
		"safe":   func(_ *state, v any, _ []any, _ map[string]any) (any, error) { return v, nil },
		"escape": filterEscape,
		"e":      filterEscape,
		"int": func(_ *state, v any, args []any, _ map[string]any) (any, error) {
			switch x := v.(type) {
			case int64:
				return x, nil
			case float64:
				return int64(x), nil
			case bool:
				return b2i(x), nil
			case string:
				if n, err := strconv.ParseInt(strings.TrimSpace(x), 10, 64); err == nil {
					return n, nil
				}
				if f, err := strconv.ParseFloat(strings.TrimSpace(x), 64); err == nil {
					return int64(f), nil
				}
			}
			if len(args) > 0 {
				return args[0], nil
			}
			return int64(0), nil
		},
		"float": func(_ *state, v any, args []any, _ map[string]any) (any, error) {
			if f, ok := asFloat(v); ok {
				return f, nil
			}
			if s, ok := v.(string); ok {
				if f, err := strconv.ParseFloat(strings.TrimSpace(s), 64); err == nil {
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
				if x < 0 {
					return -x, nil
				}
				return x, nil
			case float64:
				if x < 0 {
					return -x, nil
				}
				return x, nil
			}
			return nil, fmt.Errorf("abs: expected a number")
		},
		"default": filterDefault,
		"d":       filterDefault,
		"first": func(st *state, v any, _ []any, _ map[string]any) (any, error) {
			items, err := st.iterate(v)
			if err != nil || len(items) == 0 {
				return undefined{}, err
			}
			return items[0], nil
		},
		"last": func(st *state, v any, _ []any, _ map[string]any) (any, error) {
			items, err := st.iterate(v)
			if err != nil || len(items) == 0 {
				return undefined{}, err
			}
			return items[len(items)-1], nil
		},
		"list": func(st *state, v any, _ []any, _ map[string]any) (any, error) {
			items, err := st.iterate(v)
			if err != nil {
				return nil, err
			}
			return &list{items: append([]any(nil), items...)}, nil
		},
		"reverse": func(st *state, v any, _ []any, _ map[string]any) (any, error) {
			if s, ok := v.(string); ok {
				r := []rune(s)
				for i, j := 0, len(r)-1; i < j; i, j = i+1, j-1 {
					r[i], r[j] = r[j], r[i]
				}
				return string(r), nil
			}
			items, err := st.iterate(v)
			if err != nil {
				return nil, err
			}
			out := make([]any, len(items))
			for i, it := range items {
				out[len(items)-1-i] = it
			}
			return &list{items: out}, nil
		},
		"join": func(st *state, v any, args []any, kw map[string]any) (any, error) {
			items, err := st.iterate(v)
			if err != nil {
				return nil, err
			}
			sep := ""
			if s, ok := kwOrArg(args, kw, 0, "d"); ok {
				sep = toStr(s)
			}
			attr, hasAttr := kwOrArg(args, kw, 1, "attribute")
			parts := make([]string, len(items))
			total := 0
			for i, it := range items {
				if hasAttr {
					it = getAttrOrItem(it, toStr(attr))
				}
				parts[i] = toStr(it)
				total += len(parts[i]) + len(sep)
			}
			if err := st.checkSize(total); err != nil {
				return nil, err
			}
			return strings.Join(parts, sep), nil
		},
		"replace": func(st *state, v any, args []any, _ map[string]any) (any, error) {
			if len(args) < 2 {
				return nil, fmt.Errorf("replace: expected 2 arguments")
			}
			n := -1
			if len(args) > 2 {
				c, _ := asInt(args[2])
				n = int(c)
			}
			out := strings.Replace(toStr(v), toStr(args[0]), toStr(args[1]), n)
			return out, st.checkSize(len(out))
		},
		"tojson": func(st *state, v any, args []any, kw map[string]any) (any, error) {
			indent := -1
			if iv, ok := kwOrArg(args, kw, 0, "indent"); ok && !isNilOrUndef(iv) {
				n, _ := asInt(iv)
				indent = int(min(max(n, 0), 32))
			}
			sortKeys := false
			if sv, ok := kw["sort_keys"]; ok {
				sortKeys = truthy(sv)
			}
			var b strings.Builder
			if err := toJSON(&b, v, indent, 0, sortKeys); err != nil {
				return nil, err
			}
			return b.String(), st.checkSize(b.Len())
		},
		"items": func(_ *state, v any, _ []any, _ map[string]any) (any, error) {
			d, ok := v.(*dict)
			if !ok {
				if isNilOrUndef(v) {
					return &list{}, nil
				}
				return nil, fmt.Errorf("items: expected a mapping, got %s", typeName(v))
			}
			return dictMethod(d, "items")(nil, nil, nil)
		},
		"dictsort": func(_ *state, v any, _ []any, _ map[string]any) (any, error) {
			d, ok := v.(*dict)
			if !ok {
				return nil, fmt.Errorf("dictsort: expected a mapping")
			}
			keys := append([]string(nil), d.keys...)
			sort.Strings(keys)
			l := &list{}
			for _, k := range keys {
				l.items = append(l.items, &list{items: []any{k, d.m[k]}})
			}
			return l, nil
		},
		"unique": func(st *state, v any, _ []any, _ map[string]any) (any, error) {
			items, err := st.iterate(v)
			if err != nil {
				return nil, err
			}
			l := &list{}
			for _, it := range items {
				dup := false
				for _, seen := range l.items {
					if equal(seen, it) {
						dup = true
						break
					}
				}
				if !dup {
					l.items = append(l.items, it)
				}
			}
			return l, nil
		},
		"sort": func(st *state, v any, args []any, kw map[string]any) (any, error) {
			items, err := st.iterate(v)
			if err != nil {
				return nil, err
			}
			out := append([]any(nil), items...)
			rev := false
			if r, ok := kwOrArg(args, kw, 0, "reverse"); ok {
				rev = truthy(r)
			}
			attr, hasAttr := kw["attribute"]
			var cmpErr error
			sort.SliceStable(out, func(i, j int) bool {
				a, b := out[i], out[j]
				if hasAttr {
					a, b = getAttrOrItem(a, toStr(attr)), getAttrOrItem(b, toStr(attr))
				}
				c, err := compare(a, b)
				if err != nil && cmpErr == nil {
					cmpErr = err
				}
				if rev {
					return c > 0
				}
				return c < 0
			})
			return &list{items: out}, cmpErr
		},
		"map": func(st *state, v any, args []any, kw map[string]any) (any, error) {
			items, err := st.iterate(v)
			if err != nil {
				return nil, err
			}
			l := &list{}
			if attr, ok := kw["attribute"]; ok {
				for _, it := range items {
					val := getAttrOrItem(it, toStr(attr))
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
			f, ok := filters[toStr(args[0])]
			if !ok {
				return nil, fmt.Errorf("map: unknown filter %q", toStr(args[0]))
			}
			for _, it := range items {
				r, err := f(st, it, args[1:], nil)
				if err != nil {
					return nil, err
				}
				l.items = append(l.items, r)
			}
			return l, nil
		},
		"select":     selectFilter(false, false),
		"reject":     selectFilter(true, false),
		"selectattr": selectFilter(false, true),
		"rejectattr": selectFilter(true, true),
		"indent": func(_ *state, v any, args []any, kw map[string]any) (any, error) {
			width := "    "
			if w, ok := kwOrArg(args, kw, 0, "width"); ok {
				if n, ok := asInt(w); ok {
					width = strings.Repeat(" ", int(min(max(n, 0), 64)))
				} else {
					width = toStr(w)
				}
			}
			first := false
			if f, ok := kwOrArg(args, kw, 1, "first"); ok {
				first = truthy(f)
			}
			lines := strings.Split(toStr(v), "\n")
			for i := range lines {
				if (i > 0 || first) && lines[i] != "" {
					lines[i] = width + lines[i]
				}
			}
			return strings.Join(lines, "\n"), nil
		},
		"wordcount": func(_ *state, v any, _ []any, _ map[string]any) (any, error) {
			return int64(len(strings.Fields(toStr(v)))), nil
		},
	}
}

func filterLength(_ *state, v any, _ []any, _ map[string]any) (any, error) {
	switch x := v.(type) {
	case string:
		return int64(len([]rune(x))), nil
	case *list:
		return int64(len(x.items)), nil
	case *dict:
		return int64(len(x.keys)), nil
	case undefined, nil:
		return int64(0), nil
	}
	return nil, fmt.Errorf("length: %s has no length", typeName(v))
}

func filterEscape(_ *state, v any, _ []any, _ map[string]any) (any, error) {
	r := strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", "\"", "&#34;", "'", "&#39;")
	return r.Replace(toStr(v)), nil
}

func filterDefault(_ *state, v any, args []any, kw map[string]any) (any, error) {
	def := any("")
	if len(args) > 0 {
		def = args[0]
	}
	boolean := false
	if b, ok := kwOrArg(args, kw, 1, "boolean"); ok {
		boolean = truthy(b)
	}
	if isUndef(v) || (boolean && !truthy(v)) {
		return def, nil
	}
	return v, nil
}

func getAttrOrItem(v any, name string) any {
	cur := v
	for _, part := range strings.Split(name, ".") {
		if d, ok := cur.(*dict); ok {
			if x, ok := d.get(part); ok {
				cur = x
				continue
			}
			return undefined{}
		}
		cur = getItem(cur, part)
		if n, err := strconv.Atoi(part); err == nil {
			cur = getItem(v, int64(n))
		}
	}
	return cur
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
			attr, args = toStr(args[0]), args[1:]
		}
		var test testFn
		if len(args) > 0 {
			t, ok := tests[toStr(args[0])]
			if !ok {
				return nil, fmt.Errorf("unknown test %q", toStr(args[0]))
			}
			test, args = t, args[1:]
		}
		l := &list{}
		for _, it := range items {
			val := it
			if byAttr {
				val = getAttrOrItem(it, attr)
			}
			ok := truthy(val)
			if test != nil {
				if ok, err = test(val, args); err != nil {
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

type testFn func(v any, args []any) (bool, error)

var tests map[string]testFn

func init() {
	arg0 := func(args []any) any {
		if len(args) > 0 {
			return args[0]
		}
		return undefined{}
	}
	tests = map[string]testFn{
		"defined":   func(v any, _ []any) (bool, error) { return !isUndef(v), nil },
		"undefined": func(v any, _ []any) (bool, error) { return isUndef(v), nil },
		"none":      func(v any, _ []any) (bool, error) { return v == nil, nil },
		"string":    func(v any, _ []any) (bool, error) { _, ok := v.(string); return ok, nil },
		"number": func(v any, _ []any) (bool, error) {
			switch v.(type) {
			case int64, float64:
				return true, nil
			}
			return false, nil
		},
		"integer": func(v any, _ []any) (bool, error) { _, ok := v.(int64); return ok, nil },
		"float":   func(v any, _ []any) (bool, error) { _, ok := v.(float64); return ok, nil },
		"boolean": func(v any, _ []any) (bool, error) { _, ok := v.(bool); return ok, nil },
		"true":    func(v any, _ []any) (bool, error) { b, ok := v.(bool); return ok && b, nil },
		"false":   func(v any, _ []any) (bool, error) { b, ok := v.(bool); return ok && !b, nil },
		"mapping": func(v any, _ []any) (bool, error) { _, ok := v.(*dict); return ok, nil },
		"iterable": func(v any, _ []any) (bool, error) {
			switch v.(type) {
			case string, *list, *dict:
				return true, nil
			}
			return false, nil
		},
		"sequence": func(v any, _ []any) (bool, error) {
			switch v.(type) {
			case string, *list, *dict:
				return true, nil
			}
			return false, nil
		},
		"callable": func(v any, _ []any) (bool, error) {
			switch v.(type) {
			case fn, *macro:
				return true, nil
			}
			return false, nil
		},
		"odd": func(v any, _ []any) (bool, error) {
			n, ok := asInt(v)
			return ok && n%2 != 0, nil
		},
		"even": func(v any, _ []any) (bool, error) {
			n, ok := asInt(v)
			return ok && n%2 == 0, nil
		},
		"divisibleby": func(v any, args []any) (bool, error) {
			n, ok1 := asInt(v)
			d, ok2 := asInt(arg0(args))
			if !ok1 || !ok2 || d == 0 {
				return false, fmt.Errorf("divisibleby: expected integers")
			}
			return n%d == 0, nil
		},
		"eq":          func(v any, args []any) (bool, error) { return equal(v, arg0(args)), nil },
		"equalto":     func(v any, args []any) (bool, error) { return equal(v, arg0(args)), nil },
		"sameas":      func(v any, args []any) (bool, error) { return equal(v, arg0(args)), nil },
		"ne":          func(v any, args []any) (bool, error) { return !equal(v, arg0(args)), nil },
		"in":          func(v any, args []any) (bool, error) { return contains(arg0(args), v) },
		"lower":       func(v any, _ []any) (bool, error) { s, ok := v.(string); return ok && s == strings.ToLower(s), nil },
		"upper":       func(v any, _ []any) (bool, error) { s, ok := v.(string); return ok && s == strings.ToUpper(s), nil },
		"gt":          cmpTest(func(c int) bool { return c > 0 }),
		"ge":          cmpTest(func(c int) bool { return c >= 0 }),
		"lt":          cmpTest(func(c int) bool { return c < 0 }),
		"le":          cmpTest(func(c int) bool { return c <= 0 }),
		"greaterthan": cmpTest(func(c int) bool { return c > 0 }),
		"lessthan":    cmpTest(func(c int) bool { return c < 0 }),
	}
}

func cmpTest(ok func(int) bool) testFn {
	return func(v any, args []any) (bool, error) {
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
