package tokenizer

import (
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/tputool/tputool/internal/errs"
)

// decoder is tokenizers' Decoder::decode_chain: tokens in, tokens out; the
// final string is their concatenation.
type decoder interface {
	decodeChain(tokens []string) ([]string, error)
}

func buildDecoder(c *component, depth int) (decoder, error) {
	if c == nil {
		return nil, nil
	}
	if depth > maxNesting {
		return nil, fmt.Errorf("%s: nested deeper than %d", c.where, maxNesting)
	}
	switch c.Type {
	case "Sequence":
		seq, err := buildSequence(c, "decoders", depth, buildDecoder)
		if err != nil {
			return nil, err
		}
		return seqDecoder(seq), nil
	case "ByteLevel":
		return byteLevelDec{}, nil
	case "ByteFallback":
		return byteFallbackDec{}, nil
	case "Fuse":
		return fuseDec{}, nil
	case "Strip":
		content, err := c.str("content", " ")
		if err != nil {
			return nil, err
		}
		r, n := utf8.DecodeRuneInString(content)
		if n == 0 || n != len(content) {
			return nil, fmt.Errorf("%s.content: expected one character, got %q", c.where, content)
		}
		start, err := c.integer("start", 0)
		if err != nil {
			return nil, err
		}
		stop, err := c.integer("stop", 0)
		if err != nil {
			return nil, err
		}
		return stripDec{r: r, start: start, stop: stop}, nil
	case "Metaspace":
		r, scheme, err := parseMetaspace(c)
		if err != nil {
			return nil, err
		}
		return metaspaceDec{r: r, prefix: scheme != prependNever}, nil
	case "Replace":
		m, content, err := buildReplace(c)
		if err != nil {
			return nil, err
		}
		return replaceDec{m: m, content: content}, nil
	case "WordPiece":
		prefix, err := c.str("prefix", "##")
		if err != nil {
			return nil, err
		}
		cleanup, err := c.boolean("cleanup", true)
		if err != nil {
			return nil, err
		}
		return wordPieceDec{prefix: prefix, cleanup: cleanup}, nil
	case "BPEDecoder":
		suffix, err := c.str("suffix", "</w>")
		if err != nil {
			return nil, err
		}
		return bpeDec{suffix: suffix}, nil
	case "CTC":
		var d ctcDec
		var err error
		if d.pad, err = c.str("pad_token", "<pad>"); err != nil {
			return nil, err
		}
		if d.delim, err = c.str("word_delimiter_token", "|"); err != nil {
			return nil, err
		}
		if d.cleanup, err = c.boolean("cleanup", true); err != nil {
			return nil, err
		}
		return d, nil
	default:
		return nil, errs.Unsupportedf("%s: decoder type %q", c.where, c.Type)
	}
}

// rawDecoder is implemented by decoders that turn tokens into bytes and
// can keep invalid UTF-8 as it is (a token that carries part of a
// character): the bytes each token adds, for constrained decoding.
type rawDecoder interface {
	decodeChainRaw(tokens []string) ([]string, error)
}

// decodeRaw runs d, keeping partial characters where d can.
func decodeRaw(d decoder, tokens []string) ([]string, error) {
	if rd, ok := d.(rawDecoder); ok {
		return rd.decodeChainRaw(tokens)
	}
	return d.decodeChain(tokens)
}

type seqDecoder []decoder

func (s seqDecoder) decodeChainRaw(t []string) ([]string, error) {
	var err error
	for _, d := range s {
		if t, err = decodeRaw(d, t); err != nil {
			return nil, err
		}
	}
	return t, nil
}

func (s seqDecoder) decodeChain(t []string) ([]string, error) {
	var err error
	for _, d := range s {
		if t, err = d.decodeChain(t); err != nil {
			return nil, err
		}
	}
	return t, nil
}

type byteLevelDec struct{}

func (byteLevelDec) decodeChain(tokens []string) ([]string, error) {
	return []string{lossyUTF8(byteLevelBytes(tokens))}, nil
}

func (byteLevelDec) decodeChainRaw(tokens []string) ([]string, error) {
	return []string{string(byteLevelBytes(tokens))}, nil
}

func byteLevelBytes(tokens []string) []byte {
	var buf []byte
	for _, t := range tokens {
		var ok bool
		n := len(buf)
		if buf, ok = byteLevelDecode(t, buf); !ok {
			buf = append(buf[:n], t...)
		}
	}
	return buf
}

// lossyUTF8 converts like Rust's String::from_utf8_lossy (and the WHATWG
// decoder): each maximal invalid subsequence becomes one U+FFFD.
func lossyUTF8(b []byte) string {
	if utf8.Valid(b) {
		return string(b)
	}
	var sb strings.Builder
	sb.Grow(len(b) + 8)
	for i := 0; i < len(b); {
		r, sz := utf8.DecodeRune(b[i:])
		if r != utf8.RuneError || sz > 1 {
			sb.Write(b[i : i+sz])
			i += sz
			continue
		}
		sb.WriteString("\uFFFD")
		i += invalidPrefixLen(b[i:])
	}
	return sb.String()
}

// invalidPrefixLen returns the length of the maximal subpart of an
// ill-formed sequence at the start of b (Unicode "U+FFFD substitution of
// maximal subparts"): a truncated but otherwise valid prefix counts as one.
func invalidPrefixLen(b []byte) int {
	c := b[0]
	var need int
	lo, hi := byte(0x80), byte(0xBF)
	switch {
	case c >= 0xC2 && c <= 0xDF:
		need = 1
	case c == 0xE0:
		need, lo = 2, 0xA0
	case c >= 0xE1 && c <= 0xEC, c == 0xEE, c == 0xEF:
		need = 2
	case c == 0xED:
		need, hi = 2, 0x9F
	case c == 0xF0:
		need, lo = 3, 0x90
	case c >= 0xF1 && c <= 0xF3:
		need = 3
	case c == 0xF4:
		need, hi = 3, 0x8F
	default:
		return 1
	}
	i := 1
	for k := 0; k < need && i < len(b); k++ {
		x := b[i]
		if k == 0 {
			if x < lo || x > hi {
				break
			}
		} else if x < 0x80 || x > 0xBF {
			break
		}
		i++
	}
	return i
}

type byteFallbackDec struct{}

func parseByteToken(t string) (byte, bool) {
	if len(t) != 6 || !strings.HasPrefix(t, "<0x") || t[5] != '>' {
		return 0, false
	}
	v, err := strconv.ParseUint(t[3:5], 16, 8)
	if err != nil {
		return 0, false
	}
	return byte(v), true
}

func (byteFallbackDec) decodeChainRaw(tokens []string) ([]string, error) {
	out := make([]string, 0, len(tokens))
	for _, t := range tokens {
		if b, ok := parseByteToken(t); ok {
			t = string([]byte{b})
		}
		out = append(out, t)
	}
	return out, nil
}

func (byteFallbackDec) decodeChain(tokens []string) ([]string, error) {
	out := make([]string, 0, len(tokens))
	var pending []byte
	flush := func() {
		if len(pending) == 0 {
			return
		}
		if utf8.Valid(pending) {
			out = append(out, string(pending))
		} else {
			for range pending {
				out = append(out, "\uFFFD")
			}
		}
		pending = pending[:0]
	}
	for _, t := range tokens {
		if b, ok := parseByteToken(t); ok {
			pending = append(pending, b)
			continue
		}
		flush()
		out = append(out, t)
	}
	flush()
	return out, nil
}

type fuseDec struct{}

func (fuseDec) decodeChain(tokens []string) ([]string, error) {
	return []string{strings.Join(tokens, "")}, nil
}

type stripDec struct {
	r           rune
	start, stop int
}

func (d stripDec) decodeChain(tokens []string) ([]string, error) {
	out := make([]string, len(tokens))
	for i, t := range tokens {
		for k := 0; k < d.start; k++ {
			r, sz := utf8.DecodeRuneInString(t)
			if sz == 0 || r != d.r {
				break
			}
			t = t[sz:]
		}
		for k := 0; k < d.stop; k++ {
			r, sz := utf8.DecodeLastRuneInString(t)
			if sz == 0 || r != d.r {
				break
			}
			t = t[:len(t)-sz]
		}
		out[i] = t
	}
	return out, nil
}

type metaspaceDec struct {
	r      rune
	prefix bool
}

func (d metaspaceDec) decodeChain(tokens []string) ([]string, error) {
	out := make([]string, len(tokens))
	for i, t := range tokens {
		var b strings.Builder
		for _, c := range t {
			if c == d.r {
				if i == 0 && d.prefix {
					continue
				}
				c = ' '
			}
			b.WriteRune(c)
		}
		out[i] = b.String()
	}
	return out, nil
}

// decodeChainRaw replaces bytewise, so bytes of a partial character pass
// through.
func (d metaspaceDec) decodeChainRaw(tokens []string) ([]string, error) {
	out := make([]string, len(tokens))
	for i, t := range tokens {
		if i == 0 && d.prefix {
			out[i] = strings.ReplaceAll(t, string(d.r), "") // as decodeChain
			continue
		}
		out[i] = strings.ReplaceAll(t, string(d.r), " ")
	}
	return out, nil
}

type replaceDec struct {
	m       matcher
	content string
}

func (d replaceDec) decodeChain(tokens []string) ([]string, error) {
	out := make([]string, len(tokens))
	for i, t := range tokens {
		s, err := replaceAll(d.m, t, d.content)
		if err != nil {
			return nil, err
		}
		out[i] = s
	}
	return out, nil
}

type wordPieceDec struct {
	prefix  string
	cleanup bool
}

func (d wordPieceDec) decodeChain(tokens []string) ([]string, error) {
	out := make([]string, len(tokens))
	for i, t := range tokens {
		if i != 0 {
			if strings.HasPrefix(t, d.prefix) {
				t = t[len(d.prefix):]
			} else {
				t = " " + t
			}
		}
		if d.cleanup {
			t = cleanupTokenization(t)
		}
		out[i] = t
	}
	return out, nil
}

// cleanupTokenization is transformers' clean_up_tokenization.
func cleanupTokenization(s string) string {
	for _, p := range [...][2]string{{" .", "."}, {" ?", "?"}, {" !", "!"}, {" ,", ","}, {" ' ", "'"},
		{" n't", "n't"}, {" 'm", "'m"}, {" 's", "'s"}, {" 've", "'ve"}, {" 're", "'re"}} {
		s = strings.ReplaceAll(s, p[0], p[1])
	}
	return s
}

type bpeDec struct{ suffix string }

func (d bpeDec) decodeChain(tokens []string) ([]string, error) {
	out := make([]string, len(tokens))
	for i, t := range tokens {
		repl := " "
		if i == len(tokens)-1 {
			repl = ""
		}
		if d.suffix != "" {
			t = strings.ReplaceAll(t, d.suffix, repl)
		}
		out[i] = t
	}
	return out, nil
}

type ctcDec struct {
	pad, delim string
	cleanup    bool
}

func (d ctcDec) decodeChain(tokens []string) ([]string, error) {
	var out []string
	for i, t := range tokens {
		if i > 0 && t == tokens[i-1] {
			continue
		}
		if t == d.pad {
			continue
		}
		if d.cleanup {
			t = strings.ReplaceAll(cleanupTokenization(t), d.delim, " ")
		}
		if t != "" {
			out = append(out, t)
		}
	}
	return out, nil
}
