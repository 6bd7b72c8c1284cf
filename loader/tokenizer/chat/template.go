// Package chat renders Hugging Face chat templates (the Jinja source in
// tokenizer_config.json's chat_template or chat_template.jinja).
//
// It has its own small Jinja interpreter, because templates come from the
// Hub and are untrusted: there is no file or OS access ({% include %},
// {% import %} and {% extends %} are rejected), and every render runs
// within one budget that every statement, builtin, filter and method
// charges before it allocates or loops: steps (with builtin work), output
// and string size, list and dict length, total bytes allocated, macro and
// value nesting depth, wall time and the context. Exceeding a limit returns
// an error wrapping ErrLimit that names the template and the limit.
// Printing and tojson are safe on values that contain themselves; integers
// are 64-bit and overflow is an error (Jinja has big integers); no Go value
// or pointer is ever printed.
// Rendering follows transformers' environment: trim_blocks and
// lstrip_blocks on, keep_trailing_newline off, loop controls
// (break/continue) enabled, tojson as transformers defines it (json.dumps
// with ensure_ascii=False, indent, separators and sort_keys),
// raise_exception, strftime_now and namespace as globals. Parsing and
// printing follow Jinja and Python: operator precedence, string escapes,
// tuples and reprs.
package chat

import (
	"context"
	"fmt"
	"time"
	"unicode/utf8"
)

// Message is one chat turn. Extra fields (tool_calls, reasoning_content,
// name, ...) are merged into the message object the template sees; a
// "content" in Extra (e.g. a list of parts) replaces Content.
type Message struct {
	Role    string
	Content string
	Extra   map[string]any
}

// Input is what a template renders.
type Input struct {
	Messages            []Message
	AddGenerationPrompt bool
	// Tools are tool/function schemas. Pass json.RawMessage values to keep
	// the key order of the JSON (Go maps are rendered with sorted keys).
	Tools []any
	// EnableThinking is passed as enable_thinking when set (Qwen3 style).
	EnableThinking *bool
	// Extra variables (e.g. documents, custom flags).
	Extra map[string]any
}

// Options configure a Template. Every render is bounded by all of these
// limits at once; exceeding one is an error wrapping ErrLimit (exit code 6)
// that names the template and the limit.
type Options struct {
	BOSToken, EOSToken string
	// Limits; zero means the default.
	MaxSteps       int64         // statements, loop iterations, and builtin work at 256 bytes or items a step
	MaxOutputBytes int           // the rendered text, and any single string value
	MaxAllocBytes  int64         // bytes of strings, lists, dicts and output built during one render, in total
	Timeout        time.Duration // wall-clock limit per Render
}

// Defaults for Options. Real chat templates take well under 10k steps and
// a few MB.
const (
	DefaultMaxSteps       = 2_000_000
	DefaultMaxOutputBytes = 32 << 20
	DefaultMaxAllocBytes  = 256 << 20
	DefaultTimeout        = 5 * time.Second
)

// maxSource caps the template source (real ones are under 100 KB): parsing
// takes memory in proportion.
const maxSource = 1 << 20

// Template is a compiled chat template, safe for concurrent use.
type Template struct {
	Name  string
	src   string
	nodes []node
	opts  Options
}

// New compiles a chat template.
func New(name, src string, opts Options) (*Template, error) {
	if len(src) > maxSource {
		return nil, named(name, limitf("the source is %d bytes, over the %d-byte limit on templates", len(src), maxSource))
	}
	nodes, err := parseTemplate(src)
	if err == nil {
		err = checkDepth(nodes)
	}
	if err != nil {
		return nil, named(name, err)
	}
	if opts.MaxSteps <= 0 {
		opts.MaxSteps = DefaultMaxSteps
	}
	if opts.MaxOutputBytes <= 0 {
		opts.MaxOutputBytes = DefaultMaxOutputBytes
	}
	if opts.MaxAllocBytes <= 0 {
		opts.MaxAllocBytes = DefaultMaxAllocBytes
	}
	if opts.Timeout <= 0 {
		opts.Timeout = DefaultTimeout
	}
	return &Template{Name: name, src: src, nodes: nodes, opts: opts}, nil
}

// Source returns the template's Jinja source.
func (t *Template) Source() string { return t.src }

// Render renders the conversation. ctx cancels a long render.
func (t *Template) Render(ctx context.Context, in Input) (string, error) {
	vars, err := t.variables(in)
	if err != nil {
		return "", named(t.Name, err)
	}
	return t.render(ctx, vars)
}

// RenderVars renders with raw variables (for callers that build their own
// messages, e.g. with multimodal content parts). Values are converted like
// Message.Extra.
func (t *Template) RenderVars(ctx context.Context, vars map[string]any) (string, error) {
	conv := map[string]any{"bos_token": t.opts.BOSToken, "eos_token": t.opts.EOSToken}
	for k, v := range vars {
		c, err := fromGo(v)
		if err != nil {
			return "", named(t.Name, fmt.Errorf("variable %q: %w", k, err))
		}
		conv[k] = c
	}
	return t.render(ctx, conv)
}

func (t *Template) render(ctx context.Context, vars map[string]any) (string, error) {
	if ctx == nil {
		ctx = context.Background()
	}
	st := &state{budget: budget{ctx: ctx, timeout: t.opts.Timeout, deadline: time.Now().Add(t.opts.Timeout),
		maxSteps: t.opts.MaxSteps, maxAlloc: t.opts.MaxAllocBytes, maxStr: int64(t.opts.MaxOutputBytes)}}
	sc := &scope{vars: vars}
	if err := st.exec(t.nodes, sc); err != nil {
		return "", named(t.Name, err)
	}
	return st.out.String(), nil
}

func (t *Template) variables(in Input) (map[string]any, error) {
	msgs := &list{}
	for i, m := range in.Messages {
		d := newDict()
		d.set("role", m.Role)
		d.set("content", m.Content)
		keys := sortedKeys(m.Extra)
		for _, k := range keys {
			v, err := fromGo(m.Extra[k])
			if err != nil {
				return nil, fmt.Errorf("messages[%d].%s: %w", i, k, err)
			}
			d.set(k, v)
		}
		msgs.items = append(msgs.items, d)
	}
	vars := map[string]any{
		"messages":              msgs,
		"add_generation_prompt": in.AddGenerationPrompt,
		"bos_token":             t.opts.BOSToken,
		"eos_token":             t.opts.EOSToken,
	}
	if in.Tools != nil {
		tools, err := fromGo(in.Tools)
		if err != nil {
			return nil, fmt.Errorf("tools: %w", err)
		}
		vars["tools"] = tools
	} else {
		vars["tools"] = nil
	}
	if in.EnableThinking != nil {
		vars["enable_thinking"] = *in.EnableThinking
	}
	for _, k := range sortedKeys(in.Extra) {
		v, err := fromGo(in.Extra[k])
		if err != nil {
			return nil, fmt.Errorf("%s: %w", k, err)
		}
		vars[k] = v
	}
	return vars, nil
}

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	for i := 1; i < len(keys); i++ {
		for j := i; j > 0 && keys[j] < keys[j-1]; j-- {
			keys[j], keys[j-1] = keys[j-1], keys[j]
		}
	}
	return keys
}

// maxErrorText caps an error's text: errors quote template text (a name, a
// string, raise_exception's message), which can be megabytes.
const maxErrorText = 1024

// templateError names the template and keeps its text short; errors.Is
// still sees everything it wraps.
type templateError struct {
	msg string
	err error
}

func (e *templateError) Error() string { return e.msg }
func (e *templateError) Unwrap() error { return e.err }

func named(name string, err error) error {
	if len(name) > 200 {
		name = name[:200] + "..."
	}
	msg := fmt.Sprintf("chat template %q: %v", name, err)
	if len(msg) > maxErrorText {
		cut := maxErrorText
		for cut > 0 && !utf8.RuneStart(msg[cut]) {
			cut--
		}
		msg = msg[:cut] + fmt.Sprintf("... (%d bytes in all)", len(msg))
	}
	return &templateError{msg: msg, err: err}
}
