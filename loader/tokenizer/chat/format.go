package chat

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// ---------------------------------------------------------------------------
// Python's printf-style formatting (format % values), for the format
// filter and the % operator on strings: %[(name)][flags][width][.precision]
// with the conversions s r a d i u o x X e E f F g G c and %%. Widths and
// precisions are checked against the string limit before any padding is
// built.

// pyPercent formats f with values: a tuple gives the positional values, a
// dict the named ones (and is itself the value of an unnamed %s), anything
// else is one value.
func (st *state) pyPercent(f string, values any) (string, error) {
	var args []any
	var named *dict
	switch v := values.(type) {
	case *list:
		if v.tuple {
			args = v.items
		} else {
			args = []any{v}
		}
	case *dict:
		named, args = v, []any{v}
	default:
		args = []any{v}
	}
	if err := st.spend(int64(len(f))); err != nil {
		return "", err
	}
	var b strings.Builder
	next := 0
	used := false // a named conversion was used
	take := func() (any, error) {
		if next >= len(args) {
			return nil, fmt.Errorf("not enough arguments for format string")
		}
		next++
		return args[next-1], nil
	}
	for i := 0; i < len(f); i++ {
		c := f[i]
		if c != '%' {
			b.WriteByte(c)
			continue
		}
		i++
		if i >= len(f) {
			return "", fmt.Errorf("incomplete format")
		}
		var arg any
		haveArg := false
		if f[i] == '(' {
			if named == nil {
				return "", fmt.Errorf("format requires a mapping")
			}
			j := strings.IndexByte(f[i:], ')')
			if j < 0 {
				return "", fmt.Errorf("incomplete format key")
			}
			v, ok := named.get(f[i+1 : i+j])
			if !ok {
				return "", fmt.Errorf("format key %q is missing", f[i+1:i+j])
			}
			arg, haveArg, used = v, true, true
			i += j + 1
		}
		var flags string
		for i < len(f) && strings.IndexByte("-+ #0", f[i]) >= 0 {
			flags += string(f[i])
			i++
		}
		num := func() (int64, bool, error) {
			if i < len(f) && f[i] == '*' {
				i++
				v, err := take()
				if err != nil {
					return 0, false, err
				}
				n, ok := asIntStrict(v)
				if !ok {
					return 0, false, fmt.Errorf("* wants int")
				}
				return n, true, nil
			}
			j := i
			for i < len(f) && f[i] >= '0' && f[i] <= '9' {
				i++
			}
			if i == j {
				return 0, false, nil
			}
			n, err := strconv.ParseInt(f[j:i], 10, 64)
			if err != nil {
				return 0, false, limitf("format width %.20s is too big", f[j:i])
			}
			return n, true, nil
		}
		width, _, err := num()
		if err != nil {
			return "", err
		}
		if width < 0 {
			flags += "-"
			width = -width
		}
		prec, hasPrec := int64(0), false
		if i < len(f) && f[i] == '.' {
			i++
			if prec, _, err = num(); err != nil {
				return "", err
			}
			hasPrec, prec = true, max(prec, 0)
		}
		for i < len(f) && (f[i] == 'h' || f[i] == 'l' || f[i] == 'L') {
			i++
		}
		if i >= len(f) {
			return "", fmt.Errorf("incomplete format")
		}
		conv := f[i]
		if conv == '%' {
			b.WriteByte('%')
			continue
		}
		if !haveArg {
			if arg, err = take(); err != nil {
				return "", err
			}
		}
		if err := st.newStr(max(width, prec), "a format width"); err != nil {
			return "", err
		}
		s, err := st.formatOne(conv, flags, prec, hasPrec, arg)
		if err != nil {
			return "", err
		}
		if n := int64(utf8.RuneCountInString(s)); n < width {
			pad := strings.Repeat(" ", int(width-n))
			switch {
			case strings.Contains(flags, "-"):
				s += pad
			case strings.Contains(flags, "0") && strings.IndexByte("diuoxXeEfFgG", conv) >= 0 && !isNonFinite(arg):
				sign := ""
				if s != "" && (s[0] == '-' || s[0] == '+' || s[0] == ' ') {
					sign, s = s[:1], s[1:]
				}
				if len(s) > 1 && s[0] == '0' && strings.IndexByte("xXo", s[1]) >= 0 {
					sign, s = sign+s[:2], s[2:]
				}
				s = sign + strings.Repeat("0", len(pad)) + s
			default:
				s = pad + s
			}
		}
		// The result must fit the string limit; what is charged is only
		// what this conversion adds (charging the whole result each time
		// would be quadratic in the number of conversions).
		if total := int64(b.Len()) + int64(len(s)); total > st.maxStr {
			return "", limitf("format's result would be %d bytes, over %d bytes (Options.MaxOutputBytes)", total, st.maxStr)
		}
		if err := st.newStr(int64(len(s)), "format's result"); err != nil {
			return "", err
		}
		b.WriteString(s)
	}
	if next < len(args) && named == nil && !used {
		return "", fmt.Errorf("not all arguments converted during string formatting")
	}
	return b.String(), nil
}

// formatOne is one conversion, without the width.
func (st *state) formatOne(conv byte, flags string, prec int64, hasPrec bool, arg any) (string, error) {
	sign := func(s string, neg bool) string {
		switch {
		case neg:
			return "-" + s
		case strings.Contains(flags, "+"):
			return "+" + s
		case strings.Contains(flags, " "):
			return " " + s
		}
		return s
	}
	switch conv {
	case 's', 'r', 'a':
		var s string
		var err error
		if conv == 's' {
			s, err = st.str(arg)
		} else {
			p := printer{st: st, what: "a format value"}
			if err = p.repr(arg, 0); err == nil {
				s, err = p.b.String(), p.flush()
			}
		}
		if err == nil && conv == 'a' {
			s, err = st.asciiEscape(s)
		}
		if err != nil {
			return "", err
		}
		if hasPrec && int64(utf8.RuneCountInString(s)) > prec {
			s = s[:runeOffset(s, int(prec))]
		}
		return s, nil
	case 'd', 'i', 'u', 'o', 'x', 'X':
		var n int64
		switch x := arg.(type) {
		case int64:
			n = x
		case bool:
			n = b2i(x)
		case float64:
			if conv == 'o' || conv == 'x' || conv == 'X' {
				return "", fmt.Errorf("%%%c format: an integer is required, not float", conv)
			}
			if math.IsNaN(x) || math.IsInf(x, 0) || x < -(1<<63) || x >= 1<<63 {
				return "", fmt.Errorf("%%%c format: cannot convert %s to an integer", conv, pyFloat(x))
			}
			n = int64(x)
		default:
			return "", fmt.Errorf("%%%c format: a real number is required, not %s", conv, typeName(arg))
		}
		u := uint64(n)
		if n < 0 {
			u = -u
		}
		base, prefix := 10, ""
		switch conv {
		case 'o':
			base, prefix = 8, "0o"
		case 'x':
			base, prefix = 16, "0x"
		case 'X':
			base, prefix = 16, "0X"
		}
		digits := strconv.FormatUint(u, base)
		if conv == 'X' {
			digits = strings.ToUpper(digits)
		}
		if hasPrec && int64(len(digits)) < prec {
			digits = strings.Repeat("0", int(prec)-len(digits)) + digits
		}
		if base != 10 && strings.Contains(flags, "#") {
			digits = prefix + digits
		}
		return sign(digits, n < 0), nil
	case 'e', 'E', 'f', 'F', 'g', 'G':
		x, ok := asFloat(arg)
		if !ok {
			return "", fmt.Errorf("%%%c format: a real number is required, not %s", conv, typeName(arg))
		}
		if !hasPrec {
			prec = 6
		}
		prec = min(prec, 1000)
		var s string
		switch {
		case math.IsNaN(x):
			s = "nan"
		case math.IsInf(x, 0):
			s = "inf"
		default:
			// Go's %e, %f and %g (with '#' as C's) write |x| as C does.
			alt := ""
			if strings.Contains(flags, "#") {
				alt = "#"
			}
			s = fmt.Sprintf("%"+alt+"."+strconv.FormatInt(prec, 10)+string(conv|0x20), math.Abs(x))
		}
		if conv >= 'A' && conv <= 'Z' {
			s = strings.ToUpper(s)
		}
		return sign(s, math.Signbit(x) && !math.IsNaN(x)), nil
	case 'c':
		switch x := arg.(type) {
		case string:
			if utf8.RuneCountInString(x) != 1 {
				return "", fmt.Errorf("%%c requires an int or a unicode character")
			}
			return x, nil
		case int64, bool:
			n, _ := asIntStrict(x)
			if n < 0 || n > unicode.MaxRune {
				return "", fmt.Errorf("%%c arg not in range(0x110000)")
			}
			return string(rune(n)), nil
		}
		return "", fmt.Errorf("%%c requires an int or a unicode character, not %s", typeName(arg))
	}
	return "", fmt.Errorf("unsupported format character %q", conv)
}

// asciiEscape is what Python's ascii() adds to repr(): every non-ASCII
// character becomes a \xNN, \uNNNN or \UNNNNNNNN escape.
func (st *state) asciiEscape(s string) (string, error) {
	n := 0
	for _, r := range s {
		switch {
		case r < utf8.RuneSelf:
			n++
		case r < 0x100:
			n += len(`\xNN`)
		case r < 0x10000:
			n += len(`\uNNNN`)
		default:
			n += len(`\UNNNNNNNN`)
		}
	}
	if n == len(s) { // all ASCII: every escape is longer than the character
		return s, nil
	}
	if err := st.newStr(int64(n), "ascii()"); err != nil {
		return "", err
	}
	var b strings.Builder
	b.Grow(n)
	for _, r := range s {
		switch {
		case r < utf8.RuneSelf:
			b.WriteByte(byte(r))
		case r < 0x100:
			fmt.Fprintf(&b, `\x%02x`, r)
		case r < 0x10000:
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			fmt.Fprintf(&b, `\U%08x`, r)
		}
	}
	return b.String(), nil
}

func isNonFinite(v any) bool {
	f, ok := v.(float64)
	return ok && (math.IsNaN(f) || math.IsInf(f, 0))
}
