package chat

import (
	"fmt"
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
		fn     expr
		args   []expr
		kwargs []kwarg
	}
	filterExpr struct {
		arg    expr
		name   string
		args   []expr
		kwargs []kwarg
	}
	testExpr struct {
		arg  expr
		name string
		args []expr
		neg  bool
	}
	binExpr struct {
		op   string
		l, r expr
	}
	unaryExpr struct {
		op string
		e  expr
	}
	condExpr struct{ cond, a, b expr } // a if cond else b
	listExpr struct{ items []expr }
	dictExpr struct{ keys, vals []expr }
)

type kwarg struct {
	name string
	v    expr
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
			}
			n.params = append(n.params, prm)
			if p.isOp(",") {
				p.tp++
			} else if !p.isOp(")") {
				return nil, p.errf("expected ',' or ')' in macro parameters")
			}
		}
		p.tp++
		if err := p.expectEnd(); err != nil {
			return nil, err
		}
		body, _, err := p.parseBody([]string{"endmacro"})
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
	return &listExpr{items}, nil
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

func (p *parser) parseCompare() (expr, error) {
	l, err := p.parseConcat()
	if err != nil {
		return nil, err
	}
	for {
		t := p.peek()
		var op string
		switch {
		case t.kind == tkOp && (t.s == "==" || t.s == "!=" || t.s == "<" || t.s == ">" || t.s == "<=" || t.s == ">="):
			op = t.s
			p.tp++
		case t.kind == tkName && t.s == "in":
			op = "in"
			p.tp++
		case t.kind == tkName && t.s == "not" && p.tp+1 < len(p.toks) && p.toks[p.tp+1].kind == tkName && p.toks[p.tp+1].s == "in":
			op = "not in"
			p.tp += 2
		default:
			return l, nil
		}
		r, err := p.parseConcat()
		if err != nil {
			return nil, err
		}
		l = &binExpr{op: op, l: l, r: r}
	}
}

func (p *parser) parseConcat() (expr, error) {
	l, err := p.parseAdd()
	if err != nil {
		return nil, err
	}
	for p.isOp("~") {
		p.tp++
		r, err := p.parseAdd()
		if err != nil {
			return nil, err
		}
		l = &binExpr{op: "~", l: l, r: r}
	}
	return l, nil
}

func (p *parser) parseAdd() (expr, error) {
	l, err := p.parseMul()
	if err != nil {
		return nil, err
	}
	for p.isOp("+") || p.isOp("-") {
		op := p.next().s
		r, err := p.parseMul()
		if err != nil {
			return nil, err
		}
		l = &binExpr{op: op, l: l, r: r}
	}
	return l, nil
}

func (p *parser) parseMul() (expr, error) {
	l, err := p.parseUnary()
	if err != nil {
		return nil, err
	}
	for p.isOp("*") || p.isOp("/") || p.isOp("//") || p.isOp("%") {
		op := p.next().s
		r, err := p.parseUnary()
		if err != nil {
			return nil, err
		}
		l = &binExpr{op: op, l: l, r: r}
	}
	return l, nil
}

func (p *parser) parseUnary() (expr, error) {
	if p.isOp("-") || p.isOp("+") {
		op := p.next().s
		if err := p.enter(); err != nil {
			return nil, err
		}
		defer func() { p.depth-- }()
		e, err := p.parseUnary()
		if err != nil {
			return nil, err
		}
		return &unaryExpr{op: op, e: e}, nil
	}
	return p.parsePow()
}

func (p *parser) parsePow() (expr, error) {
	l, err := p.parseFilterTest()
	if err != nil {
		return nil, err
	}
	if p.isOp("**") {
		p.tp++
		if err := p.enter(); err != nil {
			return nil, err
		}
		defer func() { p.depth-- }()
		r, err := p.parseUnary()
		if err != nil {
			return nil, err
		}
		return &binExpr{op: "**", l: l, r: r}, nil
	}
	return l, nil
}

func (p *parser) parseFilterTest() (expr, error) {
	e, err := p.parsePostfix()
	if err != nil {
		return nil, err
	}
	for {
		switch {
		case p.isOp("|"):
			p.tp++
			name, err := p.dottedName()
			if err != nil {
				return nil, err
			}
			f := &filterExpr{arg: e, name: name}
			if p.isOp("(") {
				p.tp++
				if f.args, f.kwargs, err = p.parseArgs(); err != nil {
					return nil, err
				}
			}
			e = f
		case p.isName("is"):
			p.tp++
			t := &testExpr{arg: e}
			if p.isName("not") {
				p.tp++
				t.neg = true
			}
			tok := p.next()
			if tok.kind != tkName {
				return nil, p.errf("expected a test name after 'is'")
			}
			t.name = tok.s
			if p.isOp("(") {
				p.tp++
				if t.args, _, err = p.parseArgs(); err != nil {
					return nil, err
				}
			} else if pk := p.peek(); pk.kind == tkString || pk.kind == tkInt || pk.kind == tkFloat ||
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

func (p *parser) parseArgs() ([]expr, []kwarg, error) {
	var args []expr
	var kwargs []kwarg
	for !p.isOp(")") {
		if p.peek().kind == tkName && p.tp+1 < len(p.toks) && p.toks[p.tp+1].kind == tkOp && p.toks[p.tp+1].s == "=" {
			name := p.next().s
			p.tp++
			v, err := p.parseExpr()
			if err != nil {
				return nil, nil, err
			}
			kwargs = append(kwargs, kwarg{name, v})
		} else {
			v, err := p.parseExpr()
			if err != nil {
				return nil, nil, err
			}
			args = append(args, v)
		}
		if p.isOp(",") {
			p.tp++
		} else if !p.isOp(")") {
			return nil, nil, p.errf("expected ',' or ')' in arguments, got %s", describe(p.peek()))
		}
	}
	p.tp++
	return args, kwargs, nil
}

func (p *parser) parsePostfix() (expr, error) {
	e, err := p.parsePrimary()
	if err != nil {
		return nil, err
	}
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
			args, kwargs, err := p.parseArgs()
			if err != nil {
				return nil, err
			}
			e = &callExpr{fn: e, args: args, kwargs: kwargs}
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
				return &listExpr{}, nil
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
				e = &listExpr{items}
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
		pushKw := func(kws []kwarg) {
			for _, k := range kws {
				push(k.v)
			}
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
			push(x.args...)
			pushKw(x.kwargs)
		case *filterExpr:
			push(x.arg)
			push(x.args...)
			pushKw(x.kwargs)
		case *testExpr:
			push(x.arg)
			push(x.args...)
		case *binExpr:
			push(x.l, x.r)
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
