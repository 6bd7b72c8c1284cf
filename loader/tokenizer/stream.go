package tokenizer

import (
	"strings"
	"unicode/utf8"
)

// StreamDecoder turns ids into text incrementally for token-by-token
// output, like tokenizers' DecodeStream: it re-decodes the ids since the
// previous emission together with the previous chunk's ids as context (so
// decoders that treat the first token specially, such as Strip or
// Metaspace, stay consistent), and holds text back while it ends in U+FFFD,
// so byte-level and byte-fallback tokens that carry part of a UTF-8
// character are emitted only once the character is complete. Add never
// returns half a character.
type StreamDecoder struct {
	t       *Tokenizer
	skip    bool
	ids     []int  // context ids (previous chunk) followed by pending ids
	prefix  string // decoded text of the context ids
	ctxLen  int    // number of context ids at the start of ids
	emitted int    // len(ids) right after the last emission
}

// maxPendingIDs bounds how long an incomplete character is held back: a
// UTF-8 character has at most 4 bytes, so after 8 pending ids the bytes are
// really invalid and are emitted as U+FFFD.
const maxPendingIDs = 8

// NewStreamDecoder starts a stream. skipSpecialTokens drops special added
// tokens, as in Decode.
func (t *Tokenizer) NewStreamDecoder(skipSpecialTokens bool) *StreamDecoder {
	return &StreamDecoder{t: t, skip: skipSpecialTokens}
}

// Add appends one id and returns the newly completed text, possibly "".
func (d *StreamDecoder) Add(id int) string {
	d.ids = append(d.ids, id)
	text := d.t.Decode(d.ids, d.skip)
	if len(text) <= len(d.prefix) || !strings.HasPrefix(text, d.prefix) {
		return ""
	}
	if strings.HasSuffix(text, "\uFFFD") && len(d.ids)-d.emitted < maxPendingIDs {
		return ""
	}
	out := text[len(d.prefix):]
	// The ids decoded since the last emission become the next context.
	next := append([]int(nil), d.ids[d.ctxLen:]...)
	d.ids = next
	d.ctxLen = len(next)
	d.emitted = len(next)
	d.prefix = d.t.Decode(next, d.skip)
	return out
}

// Flush returns any text still held back (an incomplete character becomes
// U+FFFD) and resets the stream.
func (d *StreamDecoder) Flush() string {
	text := d.t.Decode(d.ids, d.skip)
	out := ""
	if len(text) > len(d.prefix) && strings.HasPrefix(text, d.prefix) {
		out = text[len(d.prefix):]
	}
	*d = StreamDecoder{t: d.t, skip: d.skip}
	if !utf8.ValidString(out) {
		out = strings.ToValidUTF8(out, "\uFFFD")
	}
	return out
}

// StreamDecoderAfter returns a stream decoder (skipping special tokens)
// for the text generated after prompt: it is primed with the prompt's
// last tokens as context, so the first generated token keeps the leading
// space it has in the decode of prompt plus continuation (" and", not
// "and"). A context that does not decode back to itself (it leaves a
// character incomplete) is dropped for a fresh decoder.
func (t *Tokenizer) StreamDecoderAfter(prompt []int) *StreamDecoder {
	return t.streamDecoderAfter(prompt, true)
}

// StreamDecoderWithSpecialAfter is StreamDecoderAfter keeping special
// tokens in the text (formats whose markup is special tokens: GPT-OSS's
// harmony).
func (t *Tokenizer) StreamDecoderWithSpecialAfter(prompt []int) *StreamDecoder {
	return t.streamDecoderAfter(prompt, false)
}

func (t *Tokenizer) streamDecoderAfter(prompt []int, skip bool) *StreamDecoder {
	ctx := prompt[max(0, len(prompt)-4):]
	d := t.NewStreamDecoder(skip)
	got := ""
	for _, id := range ctx {
		got += d.Add(id)
	}
	if got != t.Decode(ctx, skip) {
		return t.NewStreamDecoder(skip)
	}
	return d
}
