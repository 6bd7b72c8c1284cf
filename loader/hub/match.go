package hub

import (
	"strings"
	"unicode/utf8"
)

// Match reports whether name matches the shell-style pattern with the
// semantics of Python's fnmatch.fnmatchcase, which huggingface_hub's
// filter_repo_objects uses for allow/ignore patterns:
//
//   - "*" matches any run of characters, "/" included ("*.json" matches
//     "unet/config.json");
//   - "?" matches one character;
//   - "[seq]" matches one character in seq, "[!seq]" one not in it; ranges
//     like "a-z" work, a reversed range matches nothing, "]" right after
//     "[" or "[!" is literal, and a "[" with no closing "]" is literal;
//   - everything else, backslash included, matches itself. Matching is
//     case-sensitive.
func Match(pattern, name string) bool {
	p, n := []rune(pattern), []rune(name)
	// Classic greedy match with one backtrack point for the last "*".
	pi, ni := 0, 0
	starP, starN := -1, 0
	for ni < len(n) {
		if pi < len(p) {
			switch p[pi] {
			case '*':
				starP, starN = pi, ni
				pi++
				continue
			case '?':
				pi++
				ni++
				continue
			case '[':
				if ok, width, matched := matchClass(p[pi:], n[ni]); ok {
					if matched {
						pi += width
						ni++
						continue
					}
				} else if n[ni] == '[' { // unterminated: literal "["
					pi++
					ni++
					continue
				}
			default:
				if p[pi] == n[ni] {
					pi++
					ni++
					continue
				}
			}
		}
		if starP < 0 {
			return false
		}
		starN++
		pi, ni = starP+1, starN
	}
	for pi < len(p) && p[pi] == '*' {
		pi++
	}
	return pi == len(p)
}

// matchClass parses the class at the start of p ("[...]"). ok is false
// when the class is not terminated; width is its length in runes.
func matchClass(p []rune, c rune) (ok bool, width int, matched bool) {
	i := 1
	negate := false
	if i < len(p) && p[i] == '!' {
		negate = true
		i++
	}
	start := i
	if i < len(p) && p[i] == ']' {
		i++
	}
	for i < len(p) && p[i] != ']' {
		i++
	}
	if i >= len(p) {
		return false, 0, false
	}
	body := p[start:i]
	for j := 0; j < len(body); j++ {
		if j+2 < len(body) && body[j+1] == '-' {
			lo, hi := body[j], body[j+2]
			if lo <= c && c <= hi {
				matched = true
			}
			j += 2
			continue
		}
		if body[j] == c {
			matched = true
		}
	}
	return true, i + 1, matched != negate
}

// FilterFiles keeps the files that match at least one allow pattern (all
// files when allow is empty) and no ignore pattern, in order, like
// huggingface_hub's filter_repo_objects: backslashes in patterns and names
// become "/", and a pattern ending in "/" matches everything under that
// folder.
func FilterFiles(files, allow, ignore []string) []string {
	norm := func(ps []string) []string {
		out := make([]string, len(ps))
		for i, p := range ps {
			p = strings.ReplaceAll(p, `\`, "/")
			if strings.HasSuffix(p, "/") {
				p += "*"
			}
			out[i] = p
		}
		return out
	}
	allow, ignore = norm(allow), norm(ignore)
	var out []string
	for _, f := range files {
		name := strings.ReplaceAll(f, `\`, "/")
		if !utf8.ValidString(name) {
			continue
		}
		if len(allow) > 0 && !matchAny(allow, name) {
			continue
		}
		if matchAny(ignore, name) {
			continue
		}
		out = append(out, f)
	}
	return out
}

func matchAny(patterns []string, name string) bool {
	for _, p := range patterns {
		if Match(p, name) {
			return true
		}
	}
	return false
}
