package hub

import (
	"fmt"
	"io"
)

// Token is a Hub access token. Every fmt verb, %v and %#v included, and
// JSON encoding print "<redacted>", so a token that ends up in an error,
// a log line or --json output by accident does not leak. Use Reveal only
// to build the Authorization header.
type Token string

const redacted = "<redacted>"

// Format implements fmt.Formatter.
func (t Token) Format(f fmt.State, verb rune) { io.WriteString(f, t.String()) }

// String implements fmt.Stringer.
func (t Token) String() string {
	if t == "" {
		return ""
	}
	return redacted
}

// GoString implements fmt.GoStringer.
func (t Token) GoString() string { return t.String() }

// MarshalJSON never encodes the token.
func (t Token) MarshalJSON() ([]byte, error) { return []byte(`"` + t.String() + `"`), nil }

// MarshalText never encodes the token.
func (t Token) MarshalText() ([]byte, error) { return []byte(t.String()), nil }

// Reveal returns the secret, for the Authorization header only.
func (t Token) Reveal() string { return string(t) }

// IsSet reports whether a token is present.
func (t Token) IsSet() bool { return t != "" }
