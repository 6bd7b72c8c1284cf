// Package pngmeta writes PNG files with text metadata: image/png's encoder
// output with tEXt chunks (iTXt for text that is not ASCII) inserted after
// IHDR. The bytes are deterministic: the same image and metadata give the
// same file.
package pngmeta

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"image"
	"image/png"
	"io"
	"strings"
)

// Text is one metadata entry.
type Text struct {
	Key, Value string
}

var signature = []byte{0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'}

// Encode writes img as a PNG with the metadata entries, in order.
func Encode(w io.Writer, img image.Image, meta []Text) error {
	var buf bytes.Buffer
	enc := png.Encoder{CompressionLevel: png.DefaultCompression}
	if err := enc.Encode(&buf, img); err != nil {
		return err
	}
	data := buf.Bytes()
	if !bytes.HasPrefix(data, signature) || len(data) < 8+8+13+4 || string(data[12:16]) != "IHDR" {
		return errors.New("pngmeta: unexpected encoder output")
	}
	ihdrEnd := 8 + 8 + int(binary.BigEndian.Uint32(data[8:12])) + 4
	var out bytes.Buffer
	out.Write(data[:ihdrEnd])
	for _, m := range meta {
		if err := writeText(&out, m); err != nil {
			return err
		}
	}
	out.Write(data[ihdrEnd:])
	_, err := w.Write(out.Bytes())
	return err
}

func writeText(w *bytes.Buffer, m Text) error {
	if m.Key == "" || len(m.Key) > 79 || strings.ContainsRune(m.Key, 0) || !isASCII(m.Key) ||
		strings.HasPrefix(m.Key, " ") || strings.HasSuffix(m.Key, " ") {
		return fmt.Errorf("pngmeta: invalid keyword %q (1-79 printable ASCII characters)", m.Key)
	}
	if strings.ContainsRune(m.Value, 0) {
		return fmt.Errorf("pngmeta: value of %q contains a NUL byte", m.Key)
	}
	var body bytes.Buffer
	typ := "tEXt"
	body.WriteString(m.Key)
	body.WriteByte(0)
	if isASCII(m.Value) {
		body.WriteString(m.Value)
	} else {
		// iTXt: uncompressed UTF-8 text, no language tag or translation.
		typ = "iTXt"
		body.Write([]byte{0, 0, 0, 0})
		body.WriteString(m.Value)
	}
	writeChunk(w, typ, body.Bytes())
	return nil
}

func writeChunk(w *bytes.Buffer, typ string, data []byte) {
	var n [4]byte
	binary.BigEndian.PutUint32(n[:], uint32(len(data)))
	w.Write(n[:])
	crc := crc32.NewIEEE()
	crc.Write([]byte(typ))
	crc.Write(data)
	w.WriteString(typ)
	w.Write(data)
	binary.BigEndian.PutUint32(n[:], crc.Sum32())
	w.Write(n[:])
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x80 || (s[i] < 0x20 && s[i] != '\n' && s[i] != '\t') {
			return false
		}
	}
	return true
}

// Read returns the tEXt and iTXt entries of a PNG, in file order, checking
// chunk CRCs.
func Read(data []byte) ([]Text, error) {
	if !bytes.HasPrefix(data, signature) {
		return nil, errors.New("pngmeta: not a PNG file")
	}
	var out []Text
	for off := 8; off < len(data); {
		if off+12 > len(data) {
			return nil, errors.New("pngmeta: truncated chunk")
		}
		n := int(binary.BigEndian.Uint32(data[off:]))
		if n < 0 || off+12+n > len(data) {
			return nil, errors.New("pngmeta: chunk overruns the file")
		}
		typ := string(data[off+4 : off+8])
		body := data[off+8 : off+8+n]
		if crc32.ChecksumIEEE(data[off+4:off+8+n]) != binary.BigEndian.Uint32(data[off+8+n:]) {
			return nil, fmt.Errorf("pngmeta: bad CRC in %s chunk", typ)
		}
		switch typ {
		case "tEXt":
			k, v, ok := bytes.Cut(body, []byte{0})
			if !ok {
				return nil, errors.New("pngmeta: tEXt without separator")
			}
			out = append(out, Text{Key: string(k), Value: latin1(v)})
		case "iTXt":
			k, rest, ok := bytes.Cut(body, []byte{0})
			if !ok || len(rest) < 2 || rest[0] != 0 {
				return nil, errors.New("pngmeta: unsupported iTXt chunk (compressed or malformed)")
			}
			rest = rest[2:]
			_, rest, ok1 := bytes.Cut(rest, []byte{0}) // language tag
			_, rest, ok2 := bytes.Cut(rest, []byte{0}) // translated keyword
			if !ok1 || !ok2 {
				return nil, errors.New("pngmeta: malformed iTXt chunk")
			}
			out = append(out, Text{Key: string(k), Value: string(rest)})
		case "IEND":
			return out, nil
		}
		off += 12 + n
	}
	return out, nil
}

func latin1(b []byte) string {
	r := make([]rune, len(b))
	for i, c := range b {
		r[i] = rune(c)
	}
	return string(r)
}
