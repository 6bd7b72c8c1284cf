package chat

import (
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// ErrRaised is wrapped by errors from the template's raise_exception().
var ErrRaised = errors.New("chat template raised an exception")

// maxMessage caps the text of raise_exception quoted in an error.
const maxMessage = 1000

var globals map[string]any

func init() {
	globals = map[string]any{
		"raise_exception": newFn("raise_exception", func(st *state, args []any, _ map[string]any) (any, error) {
			msg := ""
			if len(args) > 0 {
				var err error
				if msg, err = st.str(args[0]); err != nil {
					return nil, err
				}
			}
			if len(msg) > maxMessage {
				msg = msg[:maxMessage] + fmt.Sprintf("... (%d bytes)", len(msg))
			}
			return nil, fmt.Errorf("%w: %s", ErrRaised, msg)
		}),
		"namespace": newFn("namespace", func(st *state, args []any, kw map[string]any) (any, error) {
			var src *dict
			if len(args) == 1 {
				src, _ = args[0].(*dict)
			}
			n := len(kw)
			if src != nil {
				n += len(src.keys)
			}
			if err := st.newDict(int64(n), "namespace()"); err != nil {
				return nil, err
			}
			d := newDict()
			if src != nil {
				for _, k := range src.keys {
					d.set(k, src.m[k])
				}
			}
			setSorted(d, kw)
			return d, nil
		}),
		"dict": newFn("dict", func(st *state, args []any, kw map[string]any) (any, error) {
			if err := st.newDict(int64(len(kw)), "dict()"); err != nil {
				return nil, err
			}
			d := newDict()
			setSorted(d, kw)
			return d, nil
		}),
		"range": newFn("range", builtinRange),
		"strftime_now": newFn("strftime_now", func(st *state, args []any, _ map[string]any) (any, error) {
			if len(args) != 1 {
				return nil, fmt.Errorf("strftime_now: expected a format")
			}
			f, ok := args[0].(string)
			if !ok {
				return nil, fmt.Errorf("strftime_now: the format must be a string, got %s", typeName(args[0]))
			}
			// The longest expansion is 9 bytes ("September") for 2.
			if err := st.newStr(mulSize(int64(len(f)), 5), "strftime_now's result"); err != nil {
				return nil, err
			}
			return strftime(time.Now(), f), nil
		}),
	}
}

func builtinRange(st *state, args []any, _ map[string]any) (any, error) {
	var start, stop, step int64 = 0, 0, 1
	ints := make([]int64, len(args))
	for i, a := range args {
		n, ok := asIntStrict(a)
		if !ok {
			return nil, fmt.Errorf("range: expected integers, got %s", typeName(a))
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
	// The count in uint64, which holds any difference of two int64s.
	var n uint64
	switch {
	case step > 0 && stop > start:
		diff, s := uint64(stop)-uint64(start), uint64(step)
		n = diff / s
		if diff%s != 0 {
			n++
		}
	case step < 0 && start > stop:
		diff, s := uint64(start)-uint64(stop), uint64(-(step+1))+1
		n = diff / s
		if diff%s != 0 {
			n++
		}
	}
	if n > maxItems {
		return nil, limitf("range() of %d items, over the %d-item limit on lists", n, maxItems)
	}
	if err := st.newList(int64(n), "range()"); err != nil {
		return nil, err
	}
	l := &list{items: make([]any, 0, n)}
	for i := int64(0); i < int64(n); i++ {
		l.items = append(l.items, start+i*step)
	}
	return l, nil
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

func method(name string, f func(st *state, args []any, kw map[string]any) (any, error)) *builtin {
	return &builtin{name: name, method: true, f: f}
}

// optArg is args[i], or kw[name], or nil when neither is given.
func optArg(args []any, kw map[string]any, i int, name string) any {
	if v, ok := kw[name]; ok {
		return v
	}
	if i < len(args) {
		return args[i]
	}
	return nil
}

// strArgOf is a string argument; a non-string is an error, as in Python.
func strArgOf(fname string, v any) (string, error) {
	s, ok := v.(string)
	if !ok {
		return "", fmt.Errorf("%s: expected a string argument, got %s", fname, typeName(v))
	}
	return s, nil
}

func strMethod(s, name string) *builtin {
	switch name {
	case "startswith", "endswith":
		return method(name, func(st *state, args []any, _ map[string]any) (any, error) {
			if len(args) == 0 {
				return nil, fmt.Errorf("%s: expected an argument", name)
			}
			if len(args) > 1 {
				// s.startswith(prefix, start, end) tests s[start:end]; a
				// start past the end of s matches nothing, not even "".
				var hi any
				if len(args) > 2 {
					hi = args[2]
				}
				if err := st.spend(int64(len(s))); err != nil {
					return nil, err
				}
				n := utf8.RuneCountInString(s)
				start, stop, _, err := sliceBounds(n, args[1], hi, nil)
				if err != nil {
					return nil, fmt.Errorf("%s: %w", name, err)
				}
				if lo, _ := asInt(args[1]); lo > int64(n) || start > stop {
					return false, nil
				}
				s = s[runeOffset(s, start):runeOffset(s, stop)]
			}
			var prefixes []any
			if l, ok := args[0].(*list); ok {
				prefixes = l.items
			} else {
				prefixes = args[:1]
			}
			for _, pv := range prefixes {
				p, err := strArgOf(name, pv)
				if err != nil {
					return nil, err
				}
				if err := st.spend(int64(len(p))); err != nil {
					return nil, err
				}
				if name == "startswith" && strings.HasPrefix(s, p) || name == "endswith" && strings.HasSuffix(s, p) {
					return true, nil
				}
			}
			return false, nil
		})
	case "strip", "lstrip", "rstrip":
		return method(name, func(st *state, args []any, _ map[string]any) (any, error) {
			if err := st.spend(int64(len(s))); err != nil {
				return nil, err
			}
			if len(args) > 0 && !isNilOrUndef(args[0]) {
				cut, err := strArgOf(name, args[0])
				if err != nil {
					return nil, err
				}
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
				return strings.TrimFunc(s, pyIsSpace), nil
			case "lstrip":
				return strings.TrimLeftFunc(s, pyIsSpace), nil
			}
			return strings.TrimRightFunc(s, pyIsSpace), nil
		})
	case "split", "rsplit":
		return method(name, func(st *state, args []any, kw map[string]any) (any, error) {
			return st.split(s, name == "rsplit", optArg(args, kw, 0, "sep"), optArg(args, kw, 1, "maxsplit"))
		})
	case "lower":
		return method(name, func(st *state, _ []any, _ map[string]any) (any, error) { return st.mapCase(s, lowerRunes) })
	case "upper":
		return method(name, func(st *state, _ []any, _ map[string]any) (any, error) { return st.mapCase(s, upperRunes) })
	case "title":
		return method(name, func(st *state, _ []any, _ map[string]any) (any, error) { return st.mapCase(s, titleRunes) })
	case "capitalize":
		return method(name, func(st *state, _ []any, _ map[string]any) (any, error) {
			return st.mapCase(s, capitalizeRunes)
		})
	case "replace":
		return method(name, func(st *state, args []any, _ map[string]any) (any, error) {
			return st.replace(s, args)
		})
	case "find", "index", "rfind":
		return method(name, func(st *state, args []any, _ map[string]any) (any, error) {
			if len(args) == 0 {
				return nil, fmt.Errorf("%s: expected a substring", name)
			}
			sub, err := strArgOf(name, args[0])
			if err != nil {
				return nil, err
			}
			if err := st.spend(int64(len(s)) + int64(len(sub))); err != nil {
				return nil, err
			}
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
			return int64(utf8.RuneCountInString(s[:i])), nil
		})
	case "count":
		return method(name, func(st *state, args []any, _ map[string]any) (any, error) {
			if len(args) == 0 {
				return nil, fmt.Errorf("count: expected a substring")
			}
			sub, err := strArgOf(name, args[0])
			if err != nil {
				return nil, err
			}
			if err := st.spend(int64(len(s)) + int64(len(sub))); err != nil {
				return nil, err
			}
			return int64(strings.Count(s, sub)), nil
		})
	case "join":
		return method(name, func(st *state, args []any, _ map[string]any) (any, error) {
			if len(args) == 0 {
				return nil, fmt.Errorf("join: expected an iterable")
			}
			items, err := st.iterate(args[0])
			if err != nil {
				return nil, fmt.Errorf("join: %w", err)
			}
			return st.join(items, s, "")
		})
	case "splitlines":
		return method(name, func(st *state, args []any, kw map[string]any) (any, error) {
			keep := truthy(optArg(args, kw, 0, "keepends"))
			return st.splitLines(s, keep)
		})
	case "zfill":
		return method(name, func(st *state, args []any, _ map[string]any) (any, error) {
			if len(args) != 1 {
				return nil, fmt.Errorf("zfill: expected a width")
			}
			w, ok := asIntStrict(args[0])
			if !ok {
				return nil, fmt.Errorf("zfill: the width must be an integer, got %s", typeName(args[0]))
			}
			n := int64(utf8.RuneCountInString(s))
			if w <= n {
				return s, st.spend(int64(len(s)))
			}
			if err := st.newStr(int64(len(s))+w-n, "zfill's result"); err != nil {
				return nil, err
			}
			sign := ""
			if s != "" && (s[0] == '+' || s[0] == '-') {
				sign = s[:1]
			}
			return sign + strings.Repeat("0", int(w-n)) + s[len(sign):], nil
		})
	case "partition", "rpartition":
		return method(name, func(st *state, args []any, _ map[string]any) (any, error) {
			if len(args) != 1 {
				return nil, fmt.Errorf("%s: expected a separator", name)
			}
			sep, err := strArgOf(name, args[0])
			if err != nil {
				return nil, err
			}
			if sep == "" {
				return nil, fmt.Errorf("%s: empty separator", name)
			}
			if err := st.spend(int64(len(s))); err != nil {
				return nil, err
			}
			if err := st.newList(3, name); err != nil {
				return nil, err
			}
			i := strings.Index(s, sep)
			if name == "rpartition" {
				i = strings.LastIndex(s, sep)
			}
			switch {
			case i >= 0:
				return &list{items: []any{s[:i], sep, s[i+len(sep):]}, tuple: true}, nil
			case name == "partition":
				return &list{items: []any{s, "", ""}, tuple: true}, nil
			}
			return &list{items: []any{"", "", s}, tuple: true}, nil
		})
	case "isdigit", "isalpha", "isspace", "isalnum", "islower", "isupper":
		return method(name, func(st *state, _ []any, _ map[string]any) (any, error) {
			return strIs(s, name), st.spend(int64(len(s)))
		})
	}
	return nil
}

func strIs(s, name string) bool {
	if s == "" {
		return false
	}
	switch name {
	case "islower", "isupper":
		// Python: every cased character has this case, and there is one.
		cased := false
		for _, r := range s {
			switch {
			case unicode.IsUpper(r) || unicode.IsTitle(r):
				if name == "islower" {
					return false
				}
				cased = true
			case unicode.IsLower(r):
				if name == "isupper" {
					return false
				}
				cased = true
			}
		}
		return cased
	}
	for _, r := range s {
		ok := false
		switch name {
		case "isdigit":
			ok = unicode.IsDigit(r)
		case "isalpha":
			ok = unicode.IsLetter(r)
		case "isspace":
			ok = pyIsSpace(r)
		case "isalnum":
			ok = unicode.IsLetter(r) || unicode.IsDigit(r)
		}
		if !ok {
			return false
		}
	}
	return true
}

// A case mapping calls emit for each output character; mapCase runs it
// once to size the result and once to build it.
type caseMapping func(s string, emit func(rune))

func lowerRunes(s string, emit func(rune)) {
	for _, r := range s {
		emit(unicode.ToLower(r))
	}
}

func upperRunes(s string, emit func(rune)) {
	for _, r := range s {
		emit(unicode.ToUpper(r))
	}
}

// titleRunes is Python's str.title: a letter after a letter is lower case,
// any other letter upper case.
func titleRunes(s string, emit func(rune)) {
	prev := false
	for _, r := range s {
		if unicode.IsLetter(r) {
			if prev {
				emit(unicode.ToLower(r))
			} else {
				emit(unicode.ToUpper(r))
			}
			prev = true
		} else {
			emit(r)
			prev = false
		}
	}
}

// jinjaTitleRunes is Jinja's title filter (do_title), which is not
// str.title: the text is split at runs of whitespace, "-", "(", "{", "["
// and "<", and each piece gets its first character upper-cased and the
// rest lower-cased ("it's"|title is "It's").
func jinjaTitleRunes(s string, emit func(rune)) {
	first := true
	for _, r := range s {
		switch {
		case pyIsSpace(r) || strings.ContainsRune("-({[<", r):
			emit(r)
			first = true
		case first:
			emit(unicode.ToUpper(r))
			first = false
		default:
			emit(unicode.ToLower(r))
		}
	}
}

func capitalizeRunes(s string, emit func(rune)) {
	first := true
	for _, r := range s {
		if first {
			emit(unicode.ToUpper(r))
			first = false
		} else {
			emit(unicode.ToLower(r))
		}
	}
}

func (st *state) mapCase(s string, m caseMapping) (string, error) {
	if err := st.spend(int64(len(s))); err != nil {
		return "", err
	}
	n := 0
	m(s, func(r rune) { n += utf8.RuneLen(r) })
	if err := st.newStr(int64(n), "a case conversion"); err != nil {
		return "", err
	}
	var b strings.Builder
	b.Grow(n)
	m(s, func(r rune) { b.WriteRune(r) })
	return b.String(), nil
}

// replace is str.replace(old, new[, count]); the result's size is known,
// and checked, before it is built.
func (st *state) replace(s string, args []any) (any, error) {
	if len(args) < 2 {
		return nil, fmt.Errorf("replace: expected 2 arguments")
	}
	old, err := strArgOf("replace", args[0])
	if err != nil {
		return nil, err
	}
	repl, err := strArgOf("replace", args[1])
	if err != nil {
		return nil, err
	}
	count := int64(-1)
	if len(args) > 2 && !isNilOrUndef(args[2]) {
		c, ok := asIntStrict(args[2])
		if !ok {
			return nil, fmt.Errorf("replace: count must be an integer, got %s", typeName(args[2]))
		}
		count = c
	}
	if err := st.spend(int64(len(s)) + int64(len(old))); err != nil {
		return nil, err
	}
	m := int64(strings.Count(s, old))
	if count >= 0 && count < m {
		m = count
	}
	if m == 0 {
		return s, nil
	}
	size := int64(len(s)) - m*int64(len(old))
	size = addSize(size, mulSize(m, int64(len(repl))))
	if err := st.newStr(size, "replace's result"); err != nil {
		return nil, err
	}
	return strings.Replace(s, old, repl, int(m)), nil
}

// split is str.split / str.rsplit, with Python's whitespace splitting when
// sep is None. The parts are counted, and the list checked, before it is
// built; they are substrings of s.
func (st *state) split(s string, fromRight bool, sepv, maxv any) (any, error) {
	if err := st.spend(int64(len(s))); err != nil {
		return nil, err
	}
	maxSplit := int64(-1)
	if !isNilOrUndef(maxv) {
		m, ok := asIntStrict(maxv)
		if !ok {
			return nil, fmt.Errorf("split: maxsplit must be an integer, got %s", typeName(maxv))
		}
		maxSplit = m
	}
	var parts []string
	if isNilOrUndef(sepv) {
		n := splitWS(s, maxSplit, fromRight, nil)
		if err := st.newList(int64(n), "split's result"); err != nil {
			return nil, err
		}
		parts = make([]string, 0, n)
		splitWS(s, maxSplit, fromRight, func(p string) { parts = append(parts, p) })
	} else {
		sep, err := strArgOf("split", sepv)
		if err != nil {
			return nil, err
		}
		if sep == "" {
			return nil, fmt.Errorf("split: empty separator")
		}
		n := int64(strings.Count(s, sep)) + 1
		if maxSplit >= 0 && maxSplit+1 < n {
			n = maxSplit + 1
		}
		if err := st.newList(n, "split's result"); err != nil {
			return nil, err
		}
		if !fromRight {
			parts = strings.SplitN(s, sep, int(n))
		} else {
			parts = make([]string, n)
			rest := s
			for i := n - 1; i > 0; i-- {
				j := strings.LastIndex(rest, sep)
				parts[i] = rest[j+len(sep):]
				rest = rest[:j]
			}
			parts[0] = rest
		}
	}
	l := &list{items: make([]any, len(parts))}
	for i, p := range parts {
		l.items[i] = p
	}
	return l, nil
}

// isLineBreak is what Python's str.splitlines splits at (besides \r\n).
func isLineBreak(r rune) bool {
	switch r {
	case '\n', '\r', '\v', '\f', 0x1c, 0x1d, 0x1e, 0x85, 0x2028, 0x2029:
		return true
	}
	return false
}

// splitLines is str.splitlines(keepends); the parts are substrings of s.
func (st *state) splitLines(s string, keep bool) (any, error) {
	if err := st.spend(int64(len(s))); err != nil {
		return nil, err
	}
	var parts []any
	count := 0
	for pass := 0; pass < 2; pass++ {
		start := 0
		for i := 0; i < len(s); {
			r, w := utf8.DecodeRuneInString(s[i:])
			if !isLineBreak(r) {
				i += w
				continue
			}
			end := i + w
			if r == '\r' && end < len(s) && s[end] == '\n' {
				end++
			}
			if pass == 0 {
				count++
			} else if keep {
				parts = append(parts, s[start:end])
			} else {
				parts = append(parts, s[start:i])
			}
			start, i = end, end
		}
		if start < len(s) {
			if pass == 0 {
				count++
			} else {
				parts = append(parts, s[start:])
			}
		}
		if pass == 0 {
			if err := st.newList(int64(count), "splitlines' result"); err != nil {
				return nil, err
			}
			parts = make([]any, 0, count)
		}
	}
	return &list{items: parts}, nil
}

// splitWS splits s on runs of whitespace like Python's str.split() and
// str.rsplit() with no separator, calling emit (when not nil) with each
// part in order, and returns the number of parts.
func splitWS(s string, maxSplit int64, fromRight bool, emit func(string)) int {
	var parts []string
	n := 0
	add := func(p string) {
		n++
		if emit != nil {
			if fromRight {
				parts = append(parts, p)
			} else {
				emit(p)
			}
		}
	}
	if !fromRight {
		i := 0
		for {
			for i < len(s) {
				r, w := utf8.DecodeRuneInString(s[i:])
				if !pyIsSpace(r) {
					break
				}
				i += w
			}
			if i >= len(s) {
				break
			}
			if maxSplit >= 0 && int64(n) == maxSplit {
				add(s[i:])
				break
			}
			j := i
			for j < len(s) {
				r, w := utf8.DecodeRuneInString(s[j:])
				if pyIsSpace(r) {
					break
				}
				j += w
			}
			add(s[i:j])
			i = j
		}
		return n
	}
	j := len(s)
	for {
		for j > 0 {
			r, w := utf8.DecodeLastRuneInString(s[:j])
			if !pyIsSpace(r) {
				break
			}
			j -= w
		}
		if j <= 0 {
			break
		}
		if maxSplit >= 0 && int64(n) == maxSplit {
			add(s[:j])
			break
		}
		i := j
		for i > 0 {
			r, w := utf8.DecodeLastRuneInString(s[:i])
			if pyIsSpace(r) {
				break
			}
			i -= w
		}
		add(s[i:j])
		j = i
	}
	for k := len(parts) - 1; k >= 0; k-- {
		emit(parts[k])
	}
	return n
}

// join converts items to strings (or their attribute, when attr is not
// empty) and joins them with sep, checking the total size first.
func (st *state) join(items []any, sep, attr string) (any, error) {
	parts := make([]string, len(items))
	if err := st.newList(int64(len(items)), "join's parts"); err != nil {
		return nil, err
	}
	total := int64(0)
	for i, it := range items {
		if attr != "" {
			var err error
			if it, err = st.getAttrOrItem(it, attr); err != nil {
				return nil, err
			}
		}
		s, err := st.str(it)
		if err != nil {
			return nil, err
		}
		parts[i] = s
		total = addSize(total, int64(len(s)))
		if i > 0 {
			total = addSize(total, int64(len(sep)))
		}
		if total > st.maxStr {
			break
		}
	}
	if err := st.newStr(total, "join's result"); err != nil {
		return nil, err
	}
	return strings.Join(parts, sep), nil
}

func dictMethod(d *dict, name string) *builtin {
	switch name {
	case "items":
		return method(name, func(st *state, _ []any, _ map[string]any) (any, error) { return st.dictItems(d, d.keys) })
	case "keys":
		return method(name, func(st *state, _ []any, _ map[string]any) (any, error) {
			if err := st.newList(int64(len(d.keys)), "keys()"); err != nil {
				return nil, err
			}
			l := &list{items: make([]any, len(d.keys))}
			for i, k := range d.keys {
				l.items[i] = k
			}
			return l, nil
		})
	case "values":
		return method(name, func(st *state, _ []any, _ map[string]any) (any, error) {
			if err := st.newList(int64(len(d.keys)), "values()"); err != nil {
				return nil, err
			}
			l := &list{items: make([]any, len(d.keys))}
			for i, k := range d.keys {
				l.items[i] = d.m[k]
			}
			return l, nil
		})
	case "get":
		return method(name, func(_ *state, args []any, _ map[string]any) (any, error) {
			if len(args) == 0 {
				return nil, fmt.Errorf("get: expected a key")
			}
			if k, err := keyOf(args[0]); err == nil {
				if v, ok := d.get(k); ok {
					return v, nil
				}
			}
			if len(args) > 1 {
				return args[1], nil
			}
			return nil, nil
		})
	case "update":
		return method(name, func(st *state, args []any, kw map[string]any) (any, error) {
			var o *dict
			if len(args) > 0 {
				var ok bool
				if o, ok = args[0].(*dict); !ok {
					return nil, fmt.Errorf("update: expected a dict, got %s", typeName(args[0]))
				}
			}
			added := int64(len(kw))
			if o != nil {
				added += int64(len(o.keys))
			}
			if err := st.growDict(d, added, "update()"); err != nil {
				return nil, err
			}
			if o != nil {
				keys := o.keys
				if o == d {
					keys = nil // d.update(d) changes nothing
				}
				for _, k := range keys {
					d.set(k, o.m[k])
				}
			}
			setSorted(d, kw)
			return nil, nil
		})
	}
	return nil
}

// dictItems is the list of (key, value) tuples of d, in the order of keys.
func (st *state) dictItems(d *dict, keys []string) (any, error) {
	n := int64(len(keys))
	if err := st.newList(n, "items()"); err != nil {
		return nil, err
	}
	if err := st.charge(n * (2*itemBytes + 32)); err != nil {
		return nil, err
	}
	l := &list{items: make([]any, n)}
	for i, k := range keys {
		l.items[i] = &list{items: []any{k, d.m[k]}, tuple: true}
	}
	return l, nil
}

func listMethod(l *list, name string) *builtin {
	switch name {
	case "append":
		return method(name, func(st *state, args []any, _ map[string]any) (any, error) {
			if len(args) != 1 {
				return nil, fmt.Errorf("append: expected one argument, got %d", len(args))
			}
			if len(l.items) >= maxItems {
				return nil, limitf("append: a list would have more than %d items", maxItems)
			}
			// Amortised growth of the slice.
			if err := st.charge(2 * itemBytes); err != nil {
				return nil, err
			}
			l.items = append(l.items, args[0])
			return nil, nil
		})
	case "pop":
		return method(name, func(st *state, args []any, _ map[string]any) (any, error) {
			if len(l.items) == 0 {
				return nil, fmt.Errorf("pop from empty list")
			}
			i := int64(len(l.items) - 1)
			if len(args) > 0 {
				var ok bool
				if i, ok = asIntStrict(args[0]); !ok {
					return nil, fmt.Errorf("pop: the index must be an integer, got %s", typeName(args[0]))
				}
				if i < 0 {
					i += int64(len(l.items))
				}
				if i < 0 || i >= int64(len(l.items)) {
					return nil, fmt.Errorf("pop index out of range")
				}
			}
			if err := st.spend(int64(len(l.items)) - i); err != nil {
				return nil, err
			}
			v := l.items[i]
			l.items = append(l.items[:i], l.items[i+1:]...)
			return v, nil
		})
	case "index", "count":
		return method(name, func(st *state, args []any, _ map[string]any) (any, error) {
			if len(args) == 0 {
				return nil, fmt.Errorf("%s: expected a value", name)
			}
			n := int64(0)
			for i, it := range l.items {
				if err := st.spend(itemCost); err != nil {
					return nil, err
				}
				eq, err := st.equal(it, args[0], 0)
				if err != nil {
					return nil, err
				}
				if eq {
					if name == "index" {
						return int64(i), nil
					}
					n++
				}
			}
			if name == "index" {
				return nil, fmt.Errorf("value not in list")
			}
			return n, nil
		})
	}
	return nil
}
