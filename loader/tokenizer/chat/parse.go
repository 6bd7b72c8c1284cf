package chat

import (
	"fmt"
	"slices"
	"strings"
)

// ---------------------------------------------------------------------------
// AST

type node interface{}

type (
	textNode   struct{ s string }
	outputNode struct {
		e    expr
		line int
	}
	ifNode struct {
		conds  []expr
		bodies [][]node
		els    []node
		line   int
	}
	forNode struct {
		targets []string
		iter    expr
		cond    expr
		body    []node
		els     []node
		line    int
	}
	setNode struct {
		targets []expr // nameExpr or attrExpr; several for tuple unpacking
		value   expr
		line    int
	}
	setBlockNode struct {
		name string
		body []node
	}
	macroNode struct {
		name   string
		params []param
		body   []node
	}
	// callBlockNode is {% call(params) m(args) %}body{% endcall %}: m is
	// called with caller, a macro of params whose body is body.
	callBlockNode struct {
		call   *callExpr
		caller *macroNode
		line   int
	}
	// filterBlockNode is {% filter f|g(x) %}body{% endfilter %}.
	filterBlockNode struct {
		filters []*filterExpr // each with a nil arg
		body    []node
		line    int
	}
	// withNode is {% with a = x, b = y %}body{% endwith %}: the values are
	// evaluated in the outer scope, and the body runs in an inner one.
	withNode struct {
		targets []string
		values  []expr
		body    []node
		line    int
	}
	breakNode    struct{}
	continueNode struct{}
)

type param struct {
	name string
	def  expr // nil when required
}

type expr interface{}

type (
	litExpr  struct{ v any }
	nameExpr struct{ name string }
	attrExpr struct {
		obj  expr
		name string
	}
	indexExpr struct{ obj, idx expr }
	sliceExpr struct{ obj, lo, hi, step expr }
	callExpr  struct {
		fn expr
		callArgs
	}
	filterExpr struct {
		arg  expr
		name string
		callArgs
	}
	testExpr struct {
		arg  expr
		name string
		callArgs
		neg bool
	}
	binExpr struct {
		op   string
		l, r expr
	}
	// compareExpr is a chain of comparisons, Python's a < b < c: each
	// operand is evaluated once, and the chain stops at the first false.
	compareExpr struct {
		first expr
		ops   []string
		rest  []expr
	}
	unaryExpr struct {
		op string
		e  expr
	}
	condExpr struct{ cond, a, b expr } // a if cond else b
	listExpr struct {
		items []expr
		tuple bool
	}
	dictExpr struct{ keys, vals []expr }
)

type kwarg struct {
	name string
	v    expr
}

// callArgs are the arguments of a call, filter or test: f(a, k=v, *l, **d).
type callArgs struct {
	args           []expr
	kwargs         []kwarg
	star, starStar expr
}

// ---------------------------------------------------------------------------
// Parser

const maxParseDepth = 200

type parser struct {
	segs []segment
	pos  int
	// expression state
	toks  []token
	tp    int
	line  int
	depth int
}

func parseTemplate(src string) ([]node, error) {
	segs, err := scanSegments(src)
	if err != nil {
		return nil, err
	}
	p := &parser{segs: segs}
	nodes, end, err := p.parseBody(nil)
	if err != nil {
		return nil, err
	}
	if end != "" {
		return nil, fmt.Errorf("line %d: unexpected {%% %s %%}", p.line, end)
	}
	return nodes, nil
}

// parseBody parses nodes until one of the stop keywords starts a statement;
// it returns that keyword (with its tokens loaded) or "" at the end.
func (p *parser) parseBody(stops []string) ([]node, string, error) {
	p.depth++
	defer func() { p.depth-- }()
	if p.depth > maxParseDepth {
		return nil, "", fmt.Errorf("line %d: %w", p.line, limitf("blocks nested deeper than %d", maxParseDepth))
	}
	var nodes []node
	for p.pos < len(p.segs) {
		s := p.segs[p.pos]
		p.line = s.line
		p.pos++
		switch s.kind {
		case segText:
			if s.text != "" {
				nodes = append(nodes, &textNode{s.text})
			}
		case segComment:
		case segExpr:
			if err := p.load(s); err != nil {
				return nil, "", err
			}
			e, err := p.parseExpr()
			if err != nil {
				return nil, "", err
			}
			if err := p.expectEnd(); err != nil {
				return nil, "", err
			}
			nodes = append(nodes, &outputNode{e: e, line: s.line})
		case segStmt:
			if err := p.load(s); err != nil {
				return nil, "", err
			}
			kw := p.peek()
			if kw.kind != tkName {
				return nil, "", fmt.Errorf("line %d: expected a statement keyword", s.line)
			}
			for _, stop := range stops {
				if kw.s == stop {
					p.tp++
					return nodes, stop, nil
				}
			}
			p.tp++
			n, err := p.parseStmt(kw.s)
			if err != nil {
				return nil, "", err
			}
			if n != nil {
				nodes = append(nodes, n)
			}
		}
	}
	if len(stops) > 0 {
		return nil, "", fmt.Errorf("line %d: missing {%% %s %%}", p.line, stops[len(stops)-1])
	}
	return nodes, "", nil
}

func (p *parser) load(s segment) error {
	toks, err := lexTag(s.text, s.line)
	if err != nil {
		return err
	}
	p.toks, p.tp, p.line = toks, 0, s.line
	return nil
}

func (p *parser) peek() token {
	if p.tp < len(p.toks) {
		return p.toks[p.tp]
	}
	return token{kind: tkEOF}
}

func (p *parser) next() token {
	t := p.peek()
	if p.tp < len(p.toks) {
		p.tp++
	}
	return t
}

func (p *parser) isOp(s string) bool {
	t := p.peek()
	return t.kind == tkOp && t.s == s
}

func (p *parser) isName(s string) bool {
	t := p.peek()
	return t.kind == tkName && t.s == s
}

func (p *parser) expectOp(s string) error {
	if !p.isOp(s) {
		return p.errf("expected %q", s)
	}
	p.tp++
	return nil
}

func (p *parser) expectEnd() error {
	if p.tp < len(p.toks) {
		return p.errf("unexpected %s", describe(p.peek()))
	}
	return nil
}

func (p *parser) errf(format string, args ...any) error {
	return fmt.Errorf("line %d: %s", p.line, fmt.Sprintf(format, args...))
}

func describe(t token) string {
	switch t.kind {
	case tkEOF:
		return "end of tag"
	case tkString:
		return fmt.Sprintf("string %q", t.s)
	case tkInt, tkFloat:
		return "number"
	}
	return fmt.Sprintf("%q", t.s)
}

func (p *parser) ident() (string, error) {
	t := p.next()
	if t.kind != tkName {
		return "", p.errf("expected a name, got %s", describe(t))
	}
	return t.s, nil
}

func (p *parser) parseStmt(kw string) (node, error) {
	switch kw {
	case "if":
		n := &ifNode{line: p.line}
		cond, err := p.parseExpr()
		if err != nil {
			return nil, err
		}
		if err := p.expectEnd(); err != nil {
			return nil, err
		}
		for {
			body, end, err := p.parseBody([]string{"elif", "else", "endif"})
			if err != nil {
				return nil, err
			}
			n.conds = append(n.conds, cond)
			n.bodies = append(n.bodies, body)
			switch end {
			case "elif":
				if cond, err = p.parseExpr(); err != nil {
					return nil, err
				}
				if err := p.expectEnd(); err != nil {
					return nil, err
				}
				continue
			case "else":
				if err := p.expectEnd(); err != nil {
					return nil, err
				}
				els, _, err := p.parseBody([]string{"endif"})
				if err != nil {
					return nil, err
				}
				n.els = els
			}
			return n, p.expectEnd()
		}
	case "for":
		n := &forNode{line: p.line}
		for {
			name, err := p.ident()
			if err != nil {
				return nil, err
			}
			n.targets = append(n.targets, name)
			if !p.isOp(",") {
				break
			}
			p.tp++
		}
		if !p.isName("in") {
			return nil, p.errf("expected 'in' in for loop")
		}
		p.tp++
		iter, err := p.parseOr()
		if err != nil {
			return nil, err
		}
		n.iter = iter
		if p.isName("if") {
			p.tp++
			if n.cond, err = p.parseOr(); err != nil {
				return nil, err
			}
		}
		if p.isName("recursive") {
			return nil, p.errf("recursive for loops are not supported")
		}
		if err := p.expectEnd(); err != nil {
			return nil, err
		}
		body, end, err := p.parseBody([]string{"else", "endfor"})
		if err != nil {
			return nil, err
		}
		n.body = body
		if end == "else" {
			if err := p.expectEnd(); err != nil {
				return nil, err
			}
			if n.els, _, err = p.parseBody([]string{"endfor"}); err != nil {
				return nil, err
			}
		}
		return n, p.expectEnd()
	case "set":
		var targets []expr
		for {
			name, err := p.ident()
			if err != nil {
				return nil, err
			}
			var t expr = &nameExpr{name}
			if p.isOp(".") {
				p.tp++
				attr, err := p.ident()
				if err != nil {
					return nil, err
				}
				t = &attrExpr{obj: t, name: attr}
			}
			targets = append(targets, t)
			if !p.isOp(",") {
				break
			}
			p.tp++
		}
		if p.peek().kind == tkEOF {
			name, ok := targets[0].(*nameExpr)
			if len(targets) != 1 || !ok {
				return nil, p.errf("block set needs a single name")
			}
			body, _, err := p.parseBody([]string{"endset"})
			if err != nil {
				return nil, err
			}
			return &setBlockNode{name: name.name, body: body}, p.expectEnd()
		}
		if err := p.expectOp("="); err != nil {
			return nil, err
		}
		v, err := p.parseTuple()
		if err != nil {
			return nil, err
		}
		return &setNode{targets: targets, value: v, line: p.line}, p.expectEnd()
	case "macro":
		name, err := p.ident()
		if err != nil {
			return nil, err
		}
		n := &macroNode{name: name}
		if err := p.expectOp("("); err != nil {
			return nil, err
		}
		if n.params, err = p.parseSignature(); err != nil {
			return nil, err
		}
		if err := p.expectEnd(); err != nil {
			return nil, err
		}
		body, _, err := p.parseBody([]string{"endmacro"})
		if err != nil {
			return nil, err
		}
		n.body = body
		return n, p.expectEnd()
	case "call":
		n := &callBlockNode{caller: &macroNode{name: "caller"}, line: p.line}
		if p.isOp("(") {
			p.tp++
			var err error
			if n.caller.params, err = p.parseSignature(); err != nil {
				return nil, err
			}
		}
		e, err := p.parseExpr()
		if err != nil {
			return nil, err
		}
		call, ok := e.(*callExpr)
		if !ok {
			return nil, p.errf("expected a call in {%% call %%}")
		}
		n.call = call
		if err := p.expectEnd(); err != nil {
			return nil, err
		}
		if n.caller.body, _, err = p.parseBody([]string{"endcall"}); err != nil {
			return nil, err
		}
		return n, p.expectEnd()
	case "filter":
		n := &filterBlockNode{line: p.line}
		for {
			f, err := p.parseFilter(nil)
			if err != nil {
				return nil, err
			}
			n.filters = append(n.filters, f)
			if !p.isOp("|") {
				break
			}
			p.tp++
		}
		if err := p.expectEnd(); err != nil {
			return nil, err
		}
		body, _, err := p.parseBody([]string{"endfilter"})
		if err != nil {
			return nil, err
		}
		n.body = body
		return n, p.expectEnd()
	case "with":
		n := &withNode{line: p.line}
		for p.peek().kind != tkEOF {
			if len(n.targets) > 0 {
				if err := p.expectOp(","); err != nil {
					return nil, err
				}
			}
			name, err := p.ident()
			if err != nil {
				return nil, err
			}
			if err := p.expectOp("="); err != nil {
				return nil, err
			}
			v, err := p.parseExpr()
			if err != nil {
				return nil, err
			}
			n.targets = append(n.targets, name)
			n.values = append(n.values, v)
		}
		body, _, err := p.parseBody([]string{"endwith"})
		if err != nil {
			return nil, err
		}
		n.body = body
		return n, p.expectEnd()
	case "break":
		return &breakNode{}, p.expectEnd()
	case "continue":
		return &continueNode{}, p.expectEnd()
	case "generation":
		// transformers' {% generation %} marks assistant text; it renders
		// its body unchanged.
		if err := p.expectEnd(); err != nil {
			return nil, err
		}
		body, _, err := p.parseBody([]string{"endgeneration"})
		if err != nil {
			return nil, err
		}
		return &ifNode{conds: []expr{&litExpr{true}}, bodies: [][]node{body}}, p.expectEnd()
	case "include", "import", "from", "extends", "block":
		return nil, p.errf("{%% %s %%} is not allowed in chat templates (no file access)", kw)
	default:
		return nil, p.errf("unknown statement %q", kw)
	}
}

// parseSignature parses macro parameters after "(", through ")".
func (p *parser) parseSignature() ([]param, error) {
	var params []param
	for !p.isOp(")") {
		pn, err := p.ident()
		if err != nil {
			return nil, err
		}
		prm := param{name: pn}
		if p.isOp("=") {
			p.tp++
			if prm.def, err = p.parseExpr(); err != nil {
				return nil, err
			}
		} else if len(params) > 0 && params[len(params)-1].def != nil {
			return nil, p.errf("non-default argument follows default argument")
		}
		params = append(params, prm)
		if p.isOp(",") {
			p.tp++
		} else if !p.isOp(")") {
			return nil, p.errf("expected ',' or ')' in macro parameters")
		}
	}
	p.tp++
	return params, nil
}

// parseTuple parses "a, b, c" as a list literal (Jinja tuples), or one expr.
func (p *parser) parseTuple() (expr, error) {
	e, err := p.parseExpr()
	if err != nil {
		return nil, err
	}
	if !p.isOp(",") {
		return e, nil
	}
	items := []expr{e}
	for p.isOp(",") {
		p.tp++
		if p.peek().kind == tkEOF {
			break
		}
		e, err := p.parseExpr()
		if err != nil {
			return nil, err
		}
		items = append(items, e)
	}
	return &listExpr{items: items, tuple: true}, nil
}

func (p *parser) enter() error {
	p.depth++
	if p.depth > maxParseDepth {
		return fmt.Errorf("line %d: %w", p.line, limitf("expression nested deeper than %d", maxParseDepth))
	}
	return nil
}

func (p *parser) parseExpr() (expr, error) {
	if err := p.enter(); err != nil {
		return nil, err
	}
	defer func() { p.depth-- }()
	a, err := p.parseOr()
	if err != nil {
		return nil, err
	}
	if p.isName("if") {
		p.tp++
		cond, err := p.parseOr()
		if err != nil {
			return nil, err
		}
		var b expr = &litExpr{undefined{}}
		if p.isName("else") {
			p.tp++
			if b, err = p.parseExpr(); err != nil {
				return nil, err
			}
		}
		return &condExpr{cond: cond, a: a, b: b}, nil
	}
	return a, nil
}

func (p *parser) parseOr() (expr, error) {
	l, err := p.parseAnd()
	if err != nil {
		return nil, err
	}
	for p.isName("or") {
		p.tp++
		r, err := p.parseAnd()
		if err != nil {
			return nil, err
		}
		l = &binExpr{op: "or", l: l, r: r}
	}
	return l, nil
}

func (p *parser) parseAnd() (expr, error) {
	l, err := p.parseNot()
	if err != nil {
		return nil, err
	}
	for p.isName("and") {
		p.tp++
		r, err := p.parseNot()
		if err != nil {
			return nil, err
		}
		l = &binExpr{op: "and", l: l, r: r}
	}
	return l, nil
}

func (p *parser) parseNot() (expr, error) {
	if p.isName("not") {
		p.tp++
		if err := p.enter(); err != nil {
			return nil, err
		}
		defer func() { p.depth-- }()
		e, err := p.parseNot()
		if err != nil {
			return nil, err
		}
		return &unaryExpr{op: "not", e: e}, nil
	}
	return p.parseCompare()
}

// The expression grammar is Jinja's (jinja2/parser.py), loosest first:
// conditional, or, and, not, comparisons (chained: a < b < c), + and -,
// ~, * / // %, ** (left-associative: 2 ** 3 ** 2 is 64), unary - and +
// (binding tighter than **: -1 ** 2 is 1), then a primary with its
// postfixes, then filters and tests, which apply to the whole unary
// (-x|abs is abs(-x)).

var compareOps = map[string]bool{"==": true, "!=": true, "<": true, ">": true, "<=": true, ">=": true}

func (p *parser) parseCompare() (expr, error) {
	l, err := p.parseMath1()
	if err != nil {
		return nil, err
	}
	var c *compareExpr
	for {
		t := p.peek()
		var op string
		switch {
		case t.kind == tkOp && compareOps[t.s]:
			op = t.s
			p.tp++
		case t.kind == tkName && t.s == "in":
			op = "in"
			p.tp++
		case t.kind == tkName && t.s == "not" && p.tp+1 < len(p.toks) && p.toks[p.tp+1].kind == tkName && p.toks[p.tp+1].s == "in":
			op = "not in"
			p.tp += 2
		default:
			if c == nil {
				return l, nil
			}
			return c, nil
		}
		r, err := p.parseMath1()
		if err != nil {
			return nil, err
		}
		if c == nil {
			c = &compareExpr{first: l}
		}
		c.ops = append(c.ops, op)
		c.rest = append(c.rest, r)
	}
}

// binaryLoop parses a left-associative chain of ops over operands.
func (p *parser) binaryLoop(operand func() (expr, error), ops ...string) (expr, error) {
	l, err := operand()
	if err != nil {
		return nil, err
	}
	for {
		t := p.peek()
		if t.kind != tkOp || !slices.Contains(ops, t.s) {
			return l, nil
		}
		p.tp++
		r, err := operand()
		if err != nil {
			return nil, err
		}
		l = &binExpr{op: t.s, l: l, r: r}
	}
}

func (p *parser) parseMath1() (expr, error) { return p.binaryLoop(p.parseConcat, "+", "-") }

func (p *parser) parseConcat() (expr, error) { return p.binaryLoop(p.parseMath2, "~") }

func (p *parser) parseMath2() (expr, error) {
	return p.binaryLoop(p.parsePow, "*", "/", "//", "%")
}

func (p *parser) parsePow() (expr, error) {
	return p.binaryLoop(func() (expr, error) { return p.parseUnary(true) }, "**")
}

func (p *parser) parseUnary(withFilter bool) (expr, error) {
	var e expr
	if p.isOp("-") || p.isOp("+") {
		op := p.next().s
		if err := p.enter(); err != nil {
			return nil, err
		}
		inner, err := p.parseUnary(false)
		p.depth--
		if err != nil {
			return nil, err
		}
		e = &unaryExpr{op: op, e: inner}
	} else {
		var err error
		if e, err = p.parsePrimary(); err != nil {
			return nil, err
		}
	}
	e, err := p.parsePostfixOf(e)
	if err != nil || !withFilter {
		return e, err
	}
	return p.parseFilterTest(e)
}

// parseFilterTest parses the filters, tests and calls after an operand.
func (p *parser) parseFilterTest(e expr) (expr, error) {
	for {
		switch {
		case p.isOp("|"):
			p.tp++
			f, err := p.parseFilter(e)
			if err != nil {
				return nil, err
			}
			e = f
		case p.isOp("("):
			p.tp++
			a, err := p.parseArgs()
			if err != nil {
				return nil, err
			}
			e = &callExpr{fn: e, callArgs: a}
		case p.isName("is"):
			p.tp++
			t := &testExpr{arg: e}
			if p.isName("not") {
				p.tp++
				t.neg = true
			}
			name, err := p.dottedName()
			if err != nil {
				return nil, p.errf("expected a test name after 'is'")
			}
			t.name = name
			if p.isOp("(") {
				p.tp++
				if t.callArgs, err = p.parseArgs(); err != nil {
					return nil, err
				}
			} else if pk := p.peek(); pk.kind == tkString || pk.kind == tkInt || pk.kind == tkFloat ||
				pk.kind == tkOp && (pk.s == "[" || pk.s == "{") ||
				(pk.kind == tkName && pk.s != "and" && pk.s != "or" && pk.s != "else" && pk.s != "if" && pk.s != "is" && pk.s != "in" && pk.s != "not") {
				arg, err := p.parsePostfix()
				if err != nil {
					return nil, err
				}
				t.args = []expr{arg}
			}
			e = t
		default:
			return e, nil
		}
	}
}

// parseFilter parses "name" or "name(args)" after a "|"; arg is what it
// filters (nil in a filter block).
func (p *parser) parseFilter(arg expr) (*filterExpr, error) {
	name, err := p.dottedName()
	if err != nil {
		return nil, err
	}
	f := &filterExpr{arg: arg, name: name}
	if p.isOp("(") {
		p.tp++
		if f.callArgs, err = p.parseArgs(); err != nil {
			return nil, err
		}
	}
	return f, nil
}

func (p *parser) dottedName() (string, error) {
	name, err := p.ident()
	if err != nil {
		return "", err
	}
	for p.isOp(".") {
		p.tp++
		n, err := p.ident()
		if err != nil {
			return "", err
		}
		name += "." + n
	}
	return name, nil
}

// parseArgs parses call arguments after "(": positional, name=value,
// *list and **dict, as Jinja's parse_call_args.
func (p *parser) parseArgs() (callArgs, error) {
	var a callArgs
	for !p.isOp(")") {
		switch {
		case p.isOp("*"):
			p.tp++
			if a.star != nil || a.starStar != nil {
				return a, p.errf("invalid syntax for function call expression")
			}
			v, err := p.parseExpr()
			if err != nil {
				return a, err
			}
			a.star = v
		case p.isOp("**"):
			p.tp++
			if a.starStar != nil {
				return a, p.errf("invalid syntax for function call expression")
			}
			v, err := p.parseExpr()
			if err != nil {
				return a, err
			}
			a.starStar = v
		case p.peek().kind == tkName && p.tp+1 < len(p.toks) && p.toks[p.tp+1].kind == tkOp && p.toks[p.tp+1].s == "=":
			if a.starStar != nil {
				return a, p.errf("invalid syntax for function call expression (a keyword argument after **)")
			}
			name := p.next().s
			p.tp++
			v, err := p.parseExpr()
			if err != nil {
				return a, err
			}
			a.kwargs = append(a.kwargs, kwarg{name, v})
		default:
			if a.star != nil || a.starStar != nil || len(a.kwargs) > 0 {
				return a, p.errf("invalid syntax for function call expression (a positional argument after a keyword argument)")
			}
			v, err := p.parseExpr()
			if err != nil {
				return a, err
			}
			a.args = append(a.args, v)
		}
		if p.isOp(",") {
			p.tp++
		} else if !p.isOp(")") {
			return a, p.errf("expected ',' or ')' in arguments, got %s", describe(p.peek()))
		}
	}
	p.tp++
	return a, nil
}

func (p *parser) parsePostfix() (expr, error) {
	e, err := p.parsePrimary()
	if err != nil {
		return nil, err
	}
	return p.parsePostfixOf(e)
}

// parsePostfixOf parses the attributes, subscripts and calls after e.
func (p *parser) parsePostfixOf(e expr) (expr, error) {
	for {
		switch {
		case p.isOp("."):
			p.tp++
			t := p.next()
			switch t.kind {
			case tkName:
				e = &attrExpr{obj: e, name: t.s}
			case tkInt:
				e = &indexExpr{obj: e, idx: &litExpr{t.i}}
			default:
				return nil, p.errf("expected an attribute name after '.'")
			}
		case p.isOp("["):
			p.tp++
			var parts [3]expr
			n, colons := 0, 0
			for !p.isOp("]") {
				if p.isOp(":") {
					p.tp++
					colons++
					n++
					if n > 2 {
						return nil, p.errf("too many ':' in slice")
					}
					continue
				}
				v, err := p.parseExpr()
				if err != nil {
					return nil, err
				}
				parts[n] = v
				if !p.isOp(":") && !p.isOp("]") {
					return nil, p.errf("expected ']'")
				}
			}
			p.tp++
			if colons == 0 {
				if parts[0] == nil {
					return nil, p.errf("empty subscript")
				}
				e = &indexExpr{obj: e, idx: parts[0]}
			} else {
				e = &sliceExpr{obj: e, lo: parts[0], hi: parts[1], step: parts[2]}
			}
		case p.isOp("("):
			p.tp++
			a, err := p.parseArgs()
			if err != nil {
				return nil, err
			}
			e = &callExpr{fn: e, callArgs: a}
		default:
			return e, nil
		}
	}
}

func (p *parser) parsePrimary() (expr, error) {
	t := p.next()
	switch t.kind {
	case tkString:
		s := t.s
		// Adjacent string literals concatenate.
		for p.peek().kind == tkString {
			s += p.next().s
		}
		return &litExpr{s}, nil
	case tkInt:
		return &litExpr{t.i}, nil
	case tkFloat:
		return &litExpr{t.f}, nil
	case tkName:
		switch t.s {
		case "true", "True":
			return &litExpr{true}, nil
		case "false", "False":
			return &litExpr{false}, nil
		case "none", "None":
			return &litExpr{nil}, nil
		}
		return &nameExpr{t.s}, nil
	case tkOp:
		switch t.s {
		case "(":
			if p.isOp(")") {
				p.tp++
				return &listExpr{tuple: true}, nil
			}
			e, err := p.parseExpr()
			if err != nil {
				return nil, err
			}
			if p.isOp(",") {
				items := []expr{e}
				for p.isOp(",") {
					p.tp++
					if p.isOp(")") {
						break
					}
					v, err := p.parseExpr()
					if err != nil {
						return nil, err
					}
					items = append(items, v)
				}
				e = &listExpr{items: items, tuple: true}
			}
			return e, p.expectOp(")")
		case "[":
			l := &listExpr{}
			for !p.isOp("]") {
				v, err := p.parseExpr()
				if err != nil {
					return nil, err
				}
				l.items = append(l.items, v)
				if p.isOp(",") {
					p.tp++
				} else if !p.isOp("]") {
					return nil, p.errf("expected ',' or ']' in list")
				}
			}
			p.tp++
			return l, nil
		case "{":
			d := &dictExpr{}
			for !p.isOp("}") {
				k, err := p.parseExpr()
				if err != nil {
					return nil, err
				}
				if err := p.expectOp(":"); err != nil {
					return nil, err
				}
				v, err := p.parseExpr()
				if err != nil {
					return nil, err
				}
				d.keys = append(d.keys, k)
				d.vals = append(d.vals, v)
				if p.isOp(",") {
					p.tp++
				} else if !p.isOp("}") {
					return nil, p.errf("expected ',' or '}' in dict")
				}
			}
			p.tp++
			return d, nil
		}
	}
	return nil, p.errf("unexpected %s", describe(t))
}

func joinNames(n []string) string { return strings.Join(n, ", ") }

// maxExprDepth caps the depth of an expression tree. The parser builds
// chains (a + b + ..., x.a.b..., x|f|g...) in loops, so their depth is not
// bounded by maxParseDepth; evaluating a chain of a million would take
// hundreds of MB of stack.
const maxExprDepth = 500

// checkDepth walks the template and reports the first expression nested
// deeper than maxExprDepth. Blocks nest at most maxParseDepth deep, so the
// walk over nodes may recurse; expressions are walked with a stack.
func checkDepth(nodes []node) error {
	for _, n := range nodes {
		var exprs []expr
		var bodies [][]node
		line := 0
		switch x := n.(type) {
		case *outputNode:
			exprs, line = []expr{x.e}, x.line
		case *ifNode:
			exprs, bodies, line = x.conds, append(append([][]node{}, x.bodies...), x.els), x.line
		case *forNode:
			exprs, bodies, line = []expr{x.iter, x.cond}, [][]node{x.body, x.els}, x.line
		case *setNode:
			exprs, line = append([]expr{x.value}, x.targets...), x.line
		case *setBlockNode:
			bodies = [][]node{x.body}
		case *macroNode:
			for _, p := range x.params {
				exprs = append(exprs, p.def)
			}
			bodies = [][]node{x.body}
		case *callBlockNode:
			exprs, line = []expr{x.call}, x.line
			for _, p := range x.caller.params {
				exprs = append(exprs, p.def)
			}
			bodies = [][]node{x.caller.body}
		case *filterBlockNode:
			for _, f := range x.filters {
				exprs = append(exprs, f)
			}
			bodies, line = [][]node{x.body}, x.line
		case *withNode:
			exprs, bodies, line = x.values, [][]node{x.body}, x.line
		}
		for _, e := range exprs {
			if d := exprDepth(e); d > maxExprDepth {
				return fmt.Errorf("line %d: %w", line, limitf("expression nested deeper than %d", maxExprDepth))
			}
		}
		for _, b := range bodies {
			if err := checkDepth(b); err != nil {
				return err
			}
		}
	}
	return nil
}

// exprDepth is the depth of an expression tree, stopping early past
// maxExprDepth.
func exprDepth(root expr) int {
	type item struct {
		e expr
		d int
	}
	deepest := 0
	stack := []item{{root, 1}}
	for len(stack) > 0 {
		it := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if it.e == nil {
			continue
		}
		deepest = max(deepest, it.d)
		if deepest > maxExprDepth {
			return deepest
		}
		push := func(es ...expr) {
			for _, e := range es {
				stack = append(stack, item{e, it.d + 1})
			}
		}
		pushArgs := func(a callArgs) {
			push(a.args...)
			for _, k := range a.kwargs {
				push(k.v)
			}
			push(a.star, a.starStar)
		}
		switch x := it.e.(type) {
		case *attrExpr:
			push(x.obj)
		case *indexExpr:
			push(x.obj, x.idx)
		case *sliceExpr:
			push(x.obj, x.lo, x.hi, x.step)
		case *callExpr:
			push(x.fn)
			pushArgs(x.callArgs)
		case *filterExpr:
			push(x.arg)
			pushArgs(x.callArgs)
		case *testExpr:
			push(x.arg)
			pushArgs(x.callArgs)
		case *binExpr:
			push(x.l, x.r)
		case *compareExpr:
			push(x.first)
			push(x.rest...)
		case *unaryExpr:
			push(x.e)
		case *condExpr:
			push(x.cond, x.a, x.b)
		case *listExpr:
			push(x.items...)
		case *dictExpr:
			push(x.keys...)
			push(x.vals...)
		}
	}
	return deepest
}
