package chat

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/tputool/tputool/internal/errs"
)

// Tests of the sandbox, one per class of hostile template: self-reference,
// size growth, super-linear work, integer overflow, printing Go values,
// error text, cancellation, and the memory a render may use.

// small are limits small enough that every bomb hits one in milliseconds.
var small = Options{MaxSteps: 200_000, MaxOutputBytes: 64 << 10, MaxAllocBytes: 4 << 20, Timeout: time.Minute}

func renderWith(t *testing.T, name, src string, opts Options) (string, error) {
	t.Helper()
	tmpl, err := New(name, src, opts)
	if err != nil {
		return "", err
	}
	return tmpl.RenderVars(context.Background(), nil)
}

// wantLimit checks that err is a limit error naming the template, with the
// line added once, and mapped to exit code 6 through errs.ErrLimit.
func wantLimit(t *testing.T, name string, err error, mention string) {
	t.Helper()
	if !errors.Is(err, ErrLimit) || !errors.Is(err, errs.ErrLimit) {
		t.Fatalf("%s: got %v, want a limit error", name, err)
	}
	msg := err.Error()
	if !strings.Contains(msg, fmt.Sprintf("chat template %q", name)) || !strings.Contains(msg, "limit exceeded") {
		t.Errorf("%s: error does not name the template and the limit: %v", name, msg)
	}
	if mention != "" && !strings.Contains(msg, mention) {
		t.Errorf("%s: error %q does not mention %q", name, msg, mention)
	}
	if n := strings.Count(msg, "line "); n > 1 {
		t.Errorf("%s: %d line prefixes: %v", name, n, msg)
	}
	if len(msg) > 2000 {
		t.Errorf("%s: error of %d bytes", name, len(msg))
	}
}

// TestSelfReference: a list or dict that contains itself, made through
// every operation that can store a value in a container, prints as Python
// prints it ([...] and {...}), is an error for tojson and unique, and is
// compared, searched, measured and joined without recursing forever.
func TestSelfReference(t *testing.T) {
	const list = "{% set l = [] %}{% set _ = l.append(l) %}"
	const dict = "{% set ns = namespace() %}{% set ns.self = ns %}"
	const upd = "{% set d = {} %}{% set _ = d.update({'a': d}) %}"
	const nested = "{% set a = [] %}{% set d = {'x': a} %}{% set _ = a.append(d) %}"
	const inNS = "{% set ns = namespace(l=[]) %}{% set _ = ns.l.append(ns) %}"
	ok := []struct{ src, want string }{
		{list + "{{ l }}", "[[...]]"},
		{list + "{{ l | string }}", "[[...]]"},
		{list + "{{ l ~ '' }}", "[[...]]"},
		{list + "{{ l | join(',') }}", "[[...]]"},
		{list + "{{ [l, l] }}", "[[[...]], [[...]]]"},
		{list + "{{ l | list }}", "[[[...]]]"},
		{list + "{{ l | first }}", "[[...]]"},
		{list + "{{ l | reverse | list }}", "[[[...]]]"},
		{list + "{{ l | map('string') | list }}", "['[[...]]']"},
		{list + "{{ l == l }} {{ l in l }} {{ l | length }} {{ l.count(l) }} {{ l.index(l) }}", "True True 1 1 0"},
		{list + "{{ l is sameas l }} {{ l != l }}", "True False"},
		{dict + "{{ ns }}", "{'self': {...}}"},
		{dict + "{{ ns.self.self.self }}", "{'self': {...}}"},
		{dict + "{{ ns.items() | list }}", "[('self', {'self': {...}})]"},
		{dict + "{{ ns | dictsort }}", "[('self', {'self': {...}})]"},
		{dict + "{{ ns == ns }} {{ 'self' in ns }}", "True True"},
		{upd + "{{ d }}", "{'a': {...}}"},
		{upd + "{% set _ = d.update(d) %}{{ d }}", "{'a': {...}}"},
		{nested + "{{ d }} {{ a }}", "{'x': [{...}]} [{'x': [...]}]"},
		{nested + "{{ d in a }}", "True"},
		{inNS + "{{ ns }}", "{'l': [{...}]}"},
		{inNS + "{{ ns.l | selectattr('l') | list }}", "[{'l': [{...}]}]"},
	}
	for _, c := range ok {
		got, err := renderWith(t, "self", c.src, small)
		if err != nil || got != c.want {
			t.Errorf("%s\n got %q, %v\nwant %q", c.src, got, err, c.want)
		}
	}
	// Python raises for these: json.dumps (circular reference), set()
	// (unhashable), dict keys (unhashable), and comparing two distinct
	// self-containing lists (RecursionError, a limit here).
	bad := []struct{ src, want string }{
		{list + "{{ l | tojson }}", "circular reference"},
		{list + "{{ l | tojson(indent=2) }}", "circular reference"},
		{dict + "{{ ns | tojson }}", "circular reference"},
		{nested + "{{ a | tojson }}", "circular reference"},
		{list + "{{ l | unique | list }}", "unhashable"},
		{list + "{{ {l: 1} }}", "unhashable"},
		{list + "{{ l in {} }}", "unhashable"},
	}
	for _, c := range bad {
		_, err := renderWith(t, "self", c.src, small)
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), `"self"`) {
			t.Errorf("%s: got %v, want an error naming the template and %q", c.src, err, c.want)
		}
	}
	two := "{% set a = [] %}{% set b = [] %}{% set _ = a.append(a) %}{% set _ = b.append(b) %}"
	for _, src := range []string{two + "{{ a == b }}", two + "{{ a in [b] }}", two + "{{ [b].index(a) }}",
		"{% set x = namespace() %}{% set y = namespace() %}{% set x.s = x %}{% set y.s = y %}{{ x == y }}",
		// Acyclic but deep: 1000 levels.
		"{% set ns = namespace(l=[]) %}{% for i in range(1000) %}{% set ns.l = [ns.l] %}{% endfor %}{{ ns.l }}",
		"{% set ns = namespace(l=[]) %}{% for i in range(1000) %}{% set ns.l = [ns.l] %}{% endfor %}{{ ns.l | tojson }}",
		"{% set ns = namespace(a=[], b=[]) %}{% for i in range(1000) %}{% set ns.a = [ns.a] %}{% set ns.b = [ns.b] %}{% endfor %}{{ ns.a == ns.b }}",
	} {
		_, err := renderWith(t, "self", src, small)
		wantLimit(t, "self", err, "deeper than")
	}
	// A Go value that contains itself is refused when converted.
	loop := []any{nil}
	loop[0] = loop
	tmpl, err := New("self", "{{ x }}", small)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tmpl.RenderVars(context.Background(), map[string]any{"x": loop}); err == nil || !strings.Contains(err.Error(), "deeper than") {
		t.Errorf("self-containing Go value: got %v", err)
	}
}

// TestSizeGrowth: every operation that builds a string, list or dict
// larger than its input stops at a limit before it allocates the result.
func TestSizeGrowth(t *testing.T) {
	const big = "{% set s = 'x' * 60000 %}"
	const lst = "{% set l = range(60000) | list %}"
	bombs := map[string]string{
		"str *":               "{{ 'abc' * 100000 }}",
		"str * huge":          "{{ 'abc' * (2**62) }}",
		"int * str":           "{{ 100000 * 'abc' }}",
		"list *":              "{{ ([1, 2] * (2**40)) | length }}",
		"str +":               big + "{{ s + s }}",
		"~":                   big + "{{ s ~ s }}",
		"~ doubling":          "{% set ns = namespace(s='x') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}",
		"+ doubling":          "{% set ns = namespace(s='x') %}{% for i in range(64) %}{% set ns.s = ns.s + ns.s %}{% endfor %}",
		"list + doubling":     "{% set ns = namespace(l=[1]) %}{% for i in range(64) %}{% set ns.l = ns.l + ns.l %}{% endfor %}",
		"replace method":      big + "{{ s.replace('x', s) }}",
		"replace empty":       big + "{{ s.replace('', 'yy') }}",
		"replace filter":      big + "{{ s | replace('x', 'xxx') }}",
		"join method":         lst + "{{ ('x' * 100).join(l | map('string')) }}",
		"join filter":         lst + "{{ l | join('xxxxxxxxxx') }}",
		"split list cap":      "{{ (',' * 2000000).split(',') | length }}",
		"rsplit list cap":     "{{ ('a ' * 1500000).rsplit() | length }}",
		"tojson":              lst + "{{ l | tojson }}",
		"tojson indent":       "{{ range(10000) | list | tojson(indent=32) }}",
		"string":              lst + "{{ l | string }}",
		"print list":          lst + "{{ l }}",
		"print dict":          "{% set d = {} %}{% for i in range(20000) %}{% set _ = d.update({i ~ '': 'vvvvvvvvvv'}) %}{% endfor %}{{ d }}",
		"indent width":        big + "{{ (s ~ '\\n' ~ s) | indent(10**9) }}",
		"indent lines":        "{{ ('x\\n' * 30000) | indent('        ') }}",
		"escape":              "{{ ('<' * 30000) | escape }}",
		"upper":               big + "{{ (s ~ s) | upper }}",
		"reverse":             big + "{{ (s ~ s) | reverse }}",
		"slice step":          big + "{{ (s ~ s)[::-1] }}",
		"chars list":          "{{ ('x' * 60000) | list | length }}{{ ('x' * 60000) | list | length }}{{ ('x' * 60000) | list | length }}",
		"range":               "{{ range(10**7) | length }}",
		"range overflow":      "{{ range(-2**63, 2**63 - 1) | length }}",
		"strftime":            "{{ strftime_now('%B' * 30000) }}",
		"append loop":         "{% set l = [] %}{% for i in range(1000000) %}{% set _ = l.append(i) %}{% endfor %}",
		"dict growth":         "{% set ns = namespace() %}{% for i in range(1000000) %}{% set _ = ns.update({i ~ 'k': i}) %}{% endfor %}",
		"items":               "{% set d = {} %}{% for i in range(30000) %}{% set _ = d.update({i ~ '': i}) %}{% endfor %}{% for i in range(100) %}{% set x = d.items() %}{% endfor %}",
		"macro capture":       "{% macro f(n) %}{{ 'x' * 60000 }}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}",
		"set block":           "{% set x %}{% for i in range(100000) %}xxxxxxxxxx{% endfor %}{% endset %}",
		"output":              "{% for i in range(100000) %}xxxxxxxxxx{% endfor %}",
		"raise big":           big + "{{ raise_exception(s ~ s) }}",
		"format width":        "{{ '%999999999s' | format(1) }}",
		"% star width":        "{{ '%*s' % (10**9, 'x') }}",
		"format prec":         "{{ '%.999999999d' % 1 }}",
		"format many":         big + "{{ ('%s' * 1000) | format(*([s] * 1000)) }}",
		"batch fill":          "{{ [1] | batch(10**9, 'x') | list | length }}",
		"sum of lists":        "{{ range(3000) | batch(1) | sum(start=[]) | length }}",
		"tojson indent s":     "{{ range(10000) | list | tojson(indent='xxxxxxxxxxxxxxxxxxxxxxxxxxxxxx') }}",
		"zfill":               "{{ 'x'.zfill(10**9) }}",
		"filter block":        "{% filter upper %}{% for i in range(100000) %}xxxxxxxxxx{% endfor %}{% endfilter %}",
		"call recursion":      "{% macro f() %}{% call f() %}x{% endcall %}{% endmacro %}{{ f() }}",
		"caller output":       "{% macro f() %}{% for i in range(100000) %}{{ caller() }}{% endfor %}{% endmacro %}{% call f() %}xxxxxxxxxx{% endcall %}",
		"splitlines list cap": "{{ ('\\n' * 2000000).splitlines() | length }}",
		"**kwargs":            "{% set d = {} %}{% for i in range(30000) %}{% set _ = d.update({i ~ '': i}) %}{% endfor %}{% for i in range(100) %}{% set x = dict(**d) %}{% endfor %}",
	}
	for name, src := range bombs {
		t.Run(name, func(t *testing.T) {
			opts := small
			if strings.Contains(name, "list cap") {
				opts.MaxOutputBytes, opts.MaxAllocBytes = 4<<20, 64<<20
			}
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			_, err := renderWith(t, "grow", src, opts)
			runtime.ReadMemStats(&after)
			wantLimit(t, "grow", err, "")
			// Go allocates at most a small multiple of what the budget lets
			// the template build.
			if got, limit := after.TotalAlloc-before.TotalAlloc, uint64(4*opts.MaxAllocBytes+8<<20); got > limit {
				t.Errorf("allocated %d bytes, over %d", got, limit)
			}
		})
	}
}

// TestSuperLinear: filters and methods that sort, search or deduplicate do
// it in n log n or n, charged to the step budget, so a large input either
// fits or stops at the limit.
func TestSuperLinear(t *testing.T) {
	// 100,000 items: O(n^2) would be 10^10 comparisons; these fit in a
	// budget of 500,000 steps (128 million units of work).
	const items = "{% set l = range(100000) | map('string') | list %}"
	fits := []struct{ src, want string }{
		{items + "{{ l | unique | list | length }}", "100000"},
		{items + "{{ (l + l) | unique | list | length }}", "100000"},
		{items + "{{ l | sort | first }} {{ l | sort(reverse=true) | first }}", "0 99999"},
		{items + "{{ l | reverse | sort | last }}", "99999"},
		{items + "{{ l | select('equalto', '5') | list }}", "['5']"},
		{items + "{{ '99999' in l }} {{ l.index('99999') }} {{ l.count('7') }}", "True 99999 1"},
		{items + "{{ l | join(',') | length }}", "588889"},
		// Each conversion is charged for what it adds, not for the whole result.
		{"{{ ('%s' * 20000) | format(*range(20000)) | length }}", "88890"},
		{"{{ ['b', 'A', 'a', 'B'] | unique | list }} {{ ['b', 'A', 'a'] | unique(case_sensitive=true) | list }}", "['b', 'A'] ['b', 'A', 'a']"},
		{"{{ [1, 1.0, true, 2, none, none] | unique | list }}", "[1, 2, None]"},
		{"{{ ['b', 'A', 'c'] | sort }} {{ ['b', 'A', 'c'] | sort(case_sensitive=true) }}", "['A', 'b', 'c'] ['A', 'b', 'c']"},
		{"{{ {'b': 1, 'A': 2, 'c': 0} | dictsort }} {{ {'b': 1, 'A': 2, 'c': 0} | dictsort(by='value') }}", "[('A', 2), ('b', 1), ('c', 0)] [('c', 0), ('b', 1), ('A', 2)]"},
		{"{{ [{'n': 2}, {'n': 1}] | sort(attribute='n') | map(attribute='n') | list }}", "[1, 2]"},
		{"{{ 'a b  c '.split() }} {{ ' a b c '.rsplit(none, 1) }} {{ 'a,b,c'.rsplit(',', 1) }} {{ 'a b c'.split(none, 1) }}", "['a', 'b', 'c'] [' a b', 'c'] ['a,b', 'c'] ['a', 'b c']"},
	}
	opts := Options{MaxSteps: 500_000, MaxOutputBytes: 1 << 20, MaxAllocBytes: 64 << 20, Timeout: time.Minute}
	for _, c := range fits {
		got, err := renderWith(t, "fast", c.src, opts)
		if err != nil || got != c.want {
			t.Errorf("%s\n got %q, %v\nwant %q", c.src, got, err, c.want)
		}
	}
	// Each operation below, on 100,000 items or 60,000 bytes, fits in a
	// budget of 150,000 steps once; a thousand times over it stops at a
	// limit (steps, or bytes for those that allocate).
	for _, op := range []string{
		"{% set x = l | unique | list %}",
		"{% set x = l | sort %}",
		"{% set x = l | dictsort %}",
		"{% set x = l.count(7) %}",
		"{% set x = 'x' in l %}",
		"{% set x = l == l[:] %}",
		"{% set x = l | tojson %}",
		"{% set x = s.count('b') %}",
		"{% set x = s[-1] %}",
		"{% set x = s | wordcount %}",
		"{% set x = s.split('a') %}",
		"{% set x = l | sum %}",
		"{% set x = l | max %}",
		"{% set x = l | batch(3) %}",
		"{% set x = s.splitlines() %}",
		"{% set x = s | title %}",
	} {
		lst := "{% set l = range(100000) | list %}"
		if strings.Contains(op, "dictsort") {
			lst = "{% set l = {} %}{% for i in range(10000) %}{% set _ = l.update({i ~ '': i}) %}{% endfor %}"
		}
		if strings.Contains(op, "tojson") {
			lst = "{% set l = range(10000) | list %}"
		}
		pre := lst + "{% set s = 'ab' * 30000 %}"
		o := opts
		o.MaxSteps = 150_000
		if _, err := renderWith(t, "slow", pre+op, o); err != nil {
			t.Errorf("%s once: %v", op, err)
		}
		_, err := renderWith(t, "slow", pre+"{% for i in range(1000) %}"+op+"{% endfor %}", o)
		if err == nil {
			t.Errorf("%s a thousand times: no error", op)
		}
		wantLimit(t, "slow", err, "")
	}
}

// TestIntegerOverflow: 64-bit integer arithmetic that would wrap is a
// clear error (Jinja has big integers); what fits is exact.
func TestIntegerOverflow(t *testing.T) {
	for _, src := range []string{
		"{{ 2 ** 63 }}", "{{ 2 ** 64 }}", "{{ 2 ** (10 ** 18) }}", "{{ 3 ** 40 }}", "{{ (-2) ** 64 }}",
		"{{ 2 ** 62 * 2 }}", "{{ 9223372036854775807 + 1 }}", "{{ -9223372036854775807 - 2 }}",
		"{{ (-9223372036854775807 - 1) // -1 }}", "{{ -(-9223372036854775807 - 1) }}",
		"{{ (-9223372036854775807 - 1) | abs }}", "{{ 4294967296 * 4294967296 }}",
		"{{ '99999999999999999999' | int }}", "{{ (10.0 ** 300) | int }}", "{{ 10.0 ** 400 }}",
		"{% set ns = namespace(n=1) %}{% for i in range(100) %}{% set ns.n = ns.n * 10 %}{% endfor %}",
	} {
		_, err := renderWith(t, "int", src, small)
		wantLimit(t, "int", err, "overflow")
	}
	if _, err := New("int", "{{ 99999999999999999999 }}", small); !errors.Is(err, ErrLimit) || !strings.Contains(err.Error(), "overflow") {
		t.Errorf("big literal: got %v", err)
	}
	for src, want := range map[string]string{
		"{{ 2 ** 62 }}":                                  "4611686018427387904",
		"{{ (-2) ** 63 }}":                               "-9223372036854775808",
		"{{ 2 ** 62 == 2 ** 62 + 1 }}":                   "False",
		"{{ 2 ** 62 < 2 ** 62 + 1 }}":                    "True",
		"{{ 2 ** -1 }} {{ (-1) ** (2**62 + 1) }}":        "0.5 -1",
		"{{ -7 // 2 }} {{ -7 % 2 }} {{ 7 % -1 }}":        "-4 1 0",
		"{{ 9223372036854775807 }}":                      "9223372036854775807",
		"{{ '9223372036854775807' | int }}":              "9223372036854775807",
		"{{ [1, 2][9223372036854775807] is defined }}":   "False",
		"{{ 'abc'[-(2**62):2**62] }}":                    "abc",
		"{{ range(2**62, 9223372036854775807, 2**61) }}": "[4611686018427387904, 6917529027641081856]",
		"{{ 'nan' | float | int }} {{ 'x' | int }}":      "0 0",
	} {
		if got, err := renderWith(t, "int", src, small); err != nil || got != want {
			t.Errorf("%s: got %q, %v; want %q", src, got, err, want)
		}
	}
}

// TestNoGoValues: builtins, methods, macros and the loop object print as
// names, never as a Go value or pointer.
func TestNoGoValues(t *testing.T) {
	for src, want := range map[string]string{
		"{{ range }}":                                                 "<built-in function range>",
		"{{ [namespace, dict] }}":                                     "[<built-in function namespace>, <built-in function dict>]",
		"{{ raise_exception }}":                                       "<built-in function raise_exception>",
		"{{ 'a'.split }} {{ {}.items }} {{ [].append }}":              "<built-in method split> <built-in method items> <built-in method append>",
		"{% for x in 'ab' %}{{ loop }} {{ loop.cycle }} {% endfor %}": "<LoopContext 1/2> <built-in function cycle> <LoopContext 2/2> <built-in function cycle> ",
		"{% macro m() %}{% endmacro %}{{ m }} {{ {'m': m} }}":         "<Macro 'm'> {'m': <Macro 'm'>}",
		"{{ range | string }} {{ range ~ '' }} {{ [range] | join }}":  "<built-in function range> <built-in function range> <built-in function range>",
	} {
		got, err := renderWith(t, "go", src, small)
		if err != nil || got != want {
			t.Errorf("%s: got %q, %v; want %q", src, got, err, want)
		}
	}
	if _, err := renderWith(t, "go", "{{ range | tojson }}", small); err == nil || !strings.Contains(err.Error(), "cannot serialize callable") {
		t.Errorf("tojson of a function: got %v", err)
	}
}

// TestErrorText: a limit error deep in nested macro calls names the
// template, the limit and the line once.
func TestErrorText(t *testing.T) {
	_, err := renderWith(t, "deep", "\n{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", small)
	wantLimit(t, "deep", err, "nested deeper than 64")
	if !strings.Contains(err.Error(), `chat template "deep": line 2: limit exceeded: macro "f"`) {
		t.Errorf("got %v", err)
	}
	roomy := small
	roomy.MaxAllocBytes = 64 << 20
	_, err = renderWith(t, "steps", "{% for i in range(1000000) %}{% endfor %}", roomy)
	wantLimit(t, "steps", err, "Options.MaxSteps")
	_, err = renderWith(t, "bytes", "{{ 'x' * 100000 }}", small)
	wantLimit(t, "bytes", err, "Options.MaxOutputBytes")
	_, err = renderWith(t, "alloc", "{% for i in range(100) %}{% set x = 'x' * 60000 %}{% endfor %}", small)
	wantLimit(t, "alloc", err, "Options.MaxAllocBytes")
	_, err = renderWith(t, "time", "{% for i in range(100000) %}{% endfor %}", Options{Timeout: time.Nanosecond})
	wantLimit(t, "time", err, "Options.Timeout")
	_, err = New("src", strings.Repeat("x", maxSource+1), Options{})
	wantLimit(t, "src", err, "source")
}

// TestCancelMidLoop: a context cancelled while a render is busy (in a loop,
// in a long builtin) stops it with context.Canceled, which the command maps
// to exit 130. The render's own limits are set far out of reach.
func TestCancelMidLoop(t *testing.T) {
	huge := Options{MaxSteps: 1 << 50, MaxOutputBytes: 1 << 20, MaxAllocBytes: 1 << 40, Timeout: time.Hour}
	for _, src := range []string{
		"{% for a in range(1000000) %}{% for b in range(1000000) %}{% endfor %}{% endfor %}",
		"{% set l = range(200000) | map('string') | list %}{% for a in range(1000000) %}{% set x = l | unique | list %}{% endfor %}",
		"{% set s = 'ab' * 500000 %}{% for a in range(1000000) %}{% set x = s.count('b') %}{% endfor %}",
	} {
		tmpl, err := New("cancel", src, huge)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() {
			_, err := tmpl.Render(ctx, Input{})
			done <- err
		}()
		time.Sleep(20 * time.Millisecond)
		cancel()
		select {
		case err := <-done:
			if !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), `"cancel"`) {
				t.Errorf("got %v, want context.Canceled naming the template", err)
			}
		case <-time.After(time.Minute):
			t.Fatalf("%s: still running a minute after cancel", src)
		}
	}
	// A context deadline is reported as the time limit it is.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	tmpl, _ := New("deadline", "{% for a in range(1000000) %}{% for b in range(1000000) %}{% endfor %}{% endfor %}", huge)
	_, err := tmpl.Render(ctx, Input{})
	if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, ErrLimit) {
		t.Errorf("got %v", err)
	}
}

// TestPeakMemory: with the default limits, the nastiest templates stop
// having allocated (cumulatively, so peak heap is no more) a few hundred MB.
func TestPeakMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("allocates up to the default 256 MiB budget per case")
	}
	for name, src := range map[string]string{
		"string doubling": "{% set ns = namespace(s='x') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}",
		"replace bomb":    "{% set s = 'x' * 30000000 %}{{ s.replace('x', 'xx') | length }}",
		"keep strings":    "{% set l = [] %}{% for i in range(100000) %}{% set _ = l.append('x' * 30000000) %}{% endfor %}",
		"keep lists":      "{% set l = range(1000000) | list %}{% set k = [] %}{% for i in range(100000) %}{% set _ = k.append(l + []) %}{% endfor %}",
		"self printing":   "{% set l = range(1000) | list %}{% for i in range(1000) %}{% set _ = l.append(l) %}{% endfor %}{% for i in range(100000) %}{{ l }}{% endfor %}",
		"shared printing": "{% set ns = namespace(l=[1]) %}{% for i in range(60) %}{% set ns.l = [ns.l, ns.l] %}{% endfor %}{{ ns.l }}",
		"shared tojson":   "{% set ns = namespace(l=['x']) %}{% for i in range(60) %}{% set ns.l = [ns.l, ns.l] %}{% endfor %}{{ ns.l | tojson }}",
		"shared equal":    "{% set ns = namespace(a=[1], b=[1]) %}{% for i in range(60) %}{% set ns.a = [ns.a, ns.a] %}{% set ns.b = [ns.b, ns.b] %}{% endfor %}{{ ns.a == ns.b }}",
		"macro outputs":   "{% macro f(n) %}{{ 'x' * 30000000 }}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}",
		"loop objects":    "{% set l = [] %}{% for i in range(2000) %}{% for j in range(1000) %}{% set _ = l.append(loop) %}{% endfor %}{% endfor %}",
		"macros in loops": "{% set l = [] %}{% for i in range(2000) %}{% for j in range(1000) %}{% macro m() %}{% endmacro %}{% set _ = l.append(m) %}{% endfor %}{% endfor %}",
	} {
		t.Run(name, func(t *testing.T) {
			runtime.GC()
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			_, err := renderWith(t, "mem", src, Options{})
			runtime.ReadMemStats(&after)
			if !errors.Is(err, ErrLimit) {
				t.Fatalf("got %v, want a limit error", err)
			}
			const limit = 600 << 20
			got := after.TotalAlloc - before.TotalAlloc
			t.Logf("allocated %d MiB: %v", got>>20, err)
			if got > limit {
				t.Errorf("allocated %d MiB, over %d MiB", got>>20, limit>>20)
			}
		})
	}
}

// TestDeepExpressions: chains that the parser builds in loops (a + b + ...,
// x.a.b..., x|f|g..., x[0][0]..., f()()...) and right-recursive ones (**,
// not, unary -) are refused past a depth, so evaluating them cannot take
// hundreds of MB of stack; the source size caps what parsing allocates.
func TestDeepExpressions(t *testing.T) {
	const n = 200_000
	for _, src := range []string{
		"{{ 1" + strings.Repeat("+1", n) + " }}",
		"{{ x" + strings.Repeat(".a", n) + " }}",
		"{{ x" + strings.Repeat("|trim", n/3) + " }}",
		"{{ x" + strings.Repeat("[0]", n) + " }}",
		"{{ f" + strings.Repeat("()", n) + " }}",
		"{{ 2" + strings.Repeat("**2", n) + " }}",
		"{{ " + strings.Repeat("not ", n) + "x }}",
		"{{ " + strings.Repeat("-", n) + "x }}",
		"{{ 1" + strings.Repeat(" if 1 else 1", n/10) + " }}",
		"{% set x = 1" + strings.Repeat(" ~ 1", n) + " %}",
		"{% for x in y" + strings.Repeat(".a", n) + " %}{% endfor %}",
		"{% macro m(a=1" + strings.Repeat("+1", n) + ") %}{% endmacro %}",
		strings.Repeat("{% if 1 %}", 1000) + strings.Repeat("{% endif %}", 1000),
	} {
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		_, err := New("deep", src, Options{})
		runtime.ReadMemStats(&after)
		wantLimit(t, "deep", err, "nested deeper than")
		if got := after.TotalAlloc - before.TotalAlloc; got > 200<<20 {
			t.Errorf("%.40s: parsing allocated %d MiB", src, got>>20)
		}
	}
	// 500 levels are fine.
	if _, err := renderWith(t, "deep", "{{ 1"+strings.Repeat("+1", 498)+" }}", small); err != nil {
		t.Error(err)
	}
}

// TestUnsupportedFilters: Jinja filters this interpreter does not have are
// a clear error naming the filter, not a silent pass-through.
func TestUnsupportedFilters(t *testing.T) {
	for _, f := range []string{"center", "wordwrap", "slice", "groupby", "pprint", "xmlattr", "urlize"} {
		_, err := renderWith(t, "f", "{{ 'x' | "+f+" }}", small)
		if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("unknown filter %q", f)) || !strings.Contains(err.Error(), `"f"`) {
			t.Errorf("%s: got %v", f, err)
		}
	}
}

// TestParseLinear: compiling takes time linear in the source (New has no
// step budget): a raw block full of "{%", each a candidate for its end,
// compiles at once.
func TestParseLinear(t *testing.T) {
	src := "{% raw %}" + strings.Repeat("{%", (maxSource-100)/2) + "{% endraw %}"
	start := time.Now()
	if _, err := New("raw", src, Options{}); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("compiling a %d-byte raw block took %v", len(src), d)
	}
}
