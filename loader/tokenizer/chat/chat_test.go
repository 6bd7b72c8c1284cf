package chat

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"
)

func render(t *testing.T, src string, vars map[string]any) string {
	t.Helper()
	tmpl, err := New("t", src, Options{BOSToken: "<s>", EOSToken: "</s>"})
	if err != nil {
		t.Fatalf("compile %q: %v", src, err)
	}
	out, err := tmpl.RenderVars(context.Background(), vars)
	if err != nil {
		t.Fatalf("render %q: %v", src, err)
	}
	return out
}

func TestJinjaFeatures(t *testing.T) {
	cases := []struct {
		src  string
		vars map[string]any
		want string
	}{
		{"{{ 'a' + 'b' ~ 1 }}", nil, "ab1"},
		{"{{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ 2 ** 10 }} {{ 1 / 2 }} {{ 3.0 }}", nil, "3 -4 1 1024 0.5 3.0"},
		{"{{ none }} {{ true }} {{ [1, 'a'] }} {{ {'k': 1} }}", nil, "None True [1, 'a'] {'k': 1}"},
		{"{{ xs[::-1] }} {{ xs[1:] }} {{ xs[-1] }} {{ 'hello'[1:3] }}", map[string]any{"xs": []any{1, 2, 3}}, "[3, 2, 1] [2, 3] 3 el"},
		{"{% for x in xs %}{{ loop.index }}{{ x }}{% if not loop.last %},{% endif %}{% endfor %}", map[string]any{"xs": []any{"a", "b"}}, "1a,2b"},
		{"{% for x in xs if x > 1 %}{{ x }}{{ loop.length }}{% else %}none{% endfor %}", map[string]any{"xs": []any{1, 2, 3}}, "2232"},
		{"{% for x in [] %}x{% else %}empty{% endfor %}", nil, "empty"},
		{"{% set ns = namespace(n=0) %}{% for x in range(5) %}{% set ns.n = ns.n + x %}{% endfor %}{{ ns.n }}", nil, "10"},
		{"{% for x in range(10) %}{% if x == 3 %}{% break %}{% endif %}{% if x == 1 %}{% continue %}{% endif %}{{ x }}{% endfor %}", nil, "02"},
		{"{{ '  hi  ' | trim }}|{{ 'abc' | upper }}|{{ [3,1,2] | sort | join(',') }}|{{ 'x' | length }}", nil, "hi|ABC|1,2,3|1"},
		{"{{ 'a,b' .split(',') }} {{ 'Hello'.startswith('He') }} {{ ' x '.strip() }}", nil, "['a', 'b'] True x"},
		{"{{ d | tojson }}", map[string]any{"d": json.RawMessage(`{"b": [1, "é\n"], "a": null}`)}, `{"b": [1, "é\n"], "a": null}`},
		{"{{ d | tojson(indent=2) }}", map[string]any{"d": json.RawMessage(`{"a": [1]}`)}, "{\n  \"a\": [\n    1\n  ]\n}"},
		{"{{ x is defined }} {{ y is none }} {{ 's' is string }} {{ 3 is odd }} {{ x is not defined }}", map[string]any{"y": nil}, "False True True True True"},
		{"{% macro hi(name, p='!') %}Hi {{ name }}{{ p }}{% endmacro %}{{ hi('A') }} {{ hi('B', p='?') }}", nil, "Hi A! Hi B?"},
		{"{% set x %}inner{% endset %}[{{ x }}]", nil, "[inner]"},
		{"{{ 'yes' if a else 'no' }} {{ a and 1 or 2 }}", map[string]any{"a": false}, "no 2"},
		{"{{ bos_token }}{{ eos_token }}", nil, "<s></s>"},
		{"{{ msgs | selectattr('role', 'equalto', 'user') | map(attribute='content') | join('|') }}",
			map[string]any{"msgs": []any{map[string]any{"role": "user", "content": "a"}, map[string]any{"role": "bot", "content": "b"}, map[string]any{"role": "user", "content": "c"}}}, "a|c"},
		{"{{ d.get('k', 5) }} {{ d['z'] is defined }} {% for k, v in d.items() %}{{ k }}={{ v }}{% endfor %}", map[string]any{"d": map[string]any{"z": 1}}, "5 True z=1"},
		// trim_blocks and lstrip_blocks, and "-" markers.
		{"a\n  {% if true %}\nb\n  {% endif %}\nc", nil, "a\nb\nc"},
		{"a  {{- ' b ' -}}  c", nil, "a b c"},
		{"{# comment #}x{#- c -#} y", nil, "xy"},
	}
	for _, c := range cases {
		if got := render(t, c.src, c.vars); got != c.want {
			t.Errorf("%q:\n got %q\nwant %q", c.src, got, c.want)
		}
	}
}

func TestRaiseException(t *testing.T) {
	tmpl, err := New("t", "{{ raise_exception('roles must alternate') }}", Options{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = tmpl.Render(context.Background(), Input{})
	if !errors.Is(err, ErrRaised) || !strings.Contains(err.Error(), "roles must alternate") {
		t.Fatalf("got %v", err)
	}
}

// TestLimits: hostile templates stop with ErrLimit instead of hanging,
// exhausting memory or overflowing the stack.
func TestLimits(t *testing.T) {
	bombs := map[string]string{
		"nested loops":    "{% for a in range(1000) %}{% for b in range(1000) %}{% for c in range(1000) %}x{% endfor %}{% endfor %}{% endfor %}",
		"huge range":      "{% for a in range(10**12) %}{% endfor %}",
		"string bomb":     "{% set s = 'x' * 1000000 %}{% set s = s + s %}{% for i in range(100) %}{% set s = s ~ s %}{% endfor %}{{ s }}",
		"macro recursion": "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}",
		"output bomb":     "{% for a in range(1000000) %}{{ 'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx' }}{% endfor %}",
	}
	for name, src := range bombs {
		t.Run(name, func(t *testing.T) {
			tmpl, err := New(name, src, Options{MaxSteps: 200000, MaxOutputBytes: 1 << 20, Timeout: 5 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			_, err = tmpl.Render(context.Background(), Input{})
			if !errors.Is(err, ErrLimit) {
				t.Fatalf("got %v, want ErrLimit", err)
			}
		})
	}
}

func TestContextCancel(t *testing.T) {
	tmpl, err := New("t", "{% for a in range(1000000) %}{% for b in range(1000000) %}{% endfor %}{% endfor %}", Options{MaxSteps: 1 << 40})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err = tmpl.Render(ctx, Input{})
	if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, ErrLimit) {
		t.Fatalf("got %v", err)
	}
}

func TestNoFileAccess(t *testing.T) {
	for _, src := range []string{"{% include '/etc/passwd' %}", "{% import 'x' as y %}", "{% extends 'base' %}", "{% from 'x' import y %}"} {
		if _, err := New("t", src, Options{}); err == nil || !strings.Contains(err.Error(), "not allowed") {
			t.Errorf("%q: got %v", src, err)
		}
	}
}

func TestParseErrors(t *testing.T) {
	for _, src := range []string{"{% if x %}", "{{ x ", "{% for %}", "{{ (((( }}", strings.Repeat("(", 1000) + "1" + strings.Repeat(")", 1000)} {
		if _, err := New("t", "{{ "+src+" }}", Options{}); err == nil {
			if _, err := New("t", src, Options{}); err == nil {
				t.Errorf("%q: no error", src)
			}
		}
	}
}
