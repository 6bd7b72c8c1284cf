package tokenizer

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/tputool/tputool/internal/errs"
)

// Limits against hostile tokenizer files. Real tokenizers are far below them
// (Gemma 3: 262k vocab, 515k merges, 6.4k added tokens, 33 MB of JSON).
const (
	maxFileBytes   = 512 << 20 // decompressed tokenizer.json
	maxConfigBytes = 64 << 20  // tokenizer_config.json, chat_template.jinja
	maxVocab       = 4 << 20
	maxMerges      = 8 << 20
	maxAddedTokens = 1 << 20
	maxTokenID     = 16 << 20 // ids index a dense table
	maxTokenBytes  = 64 << 10 // one vocab entry or added token
	maxNesting     = 16       // Sequence normalizers/pre-tokenizers/decoders
)

// Load reads a tokenizer.json (optionally gzip-compressed, detected by its
// magic bytes, so tokenizer.json.gz works) and builds a Tokenizer.
func Load(path string) (*Tokenizer, error) {
	data, err := readMaybeGzip(path, maxFileBytes)
	if err != nil {
		return nil, err
	}
	t, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return t, nil
}

// Parse builds a Tokenizer from the bytes of a tokenizer.json.
func Parse(data []byte) (*Tokenizer, error) {
	var raw rawTokenizer
	fields, err := objectFields(data)
	if err != nil {
		// The slow path gives encoding/json's precise error.
		dec := json.NewDecoder(bytes.NewReader(data))
		dec.UseNumber()
		if err := dec.Decode(&raw); err != nil {
			return nil, fmt.Errorf("tokenizer.json: %w", err)
		}
		return build(&raw)
	}
	raw.Normalizer = fields["normalizer"]
	raw.PreTokenizer = fields["pre_tokenizer"]
	raw.Model = fields["model"]
	raw.PostProcessor = fields["post_processor"]
	raw.Decoder = fields["decoder"]
	raw.Padding = fields["padding"]
	if a, ok := fields["added_tokens"]; ok && !isNull(a) {
		if err := json.Unmarshal(a, &raw.AddedTokens); err != nil {
			return nil, fmt.Errorf("tokenizer.json: added_tokens: %w", err)
		}
	}
	return build(&raw)
}

// LoadDir loads dir/tokenizer.json (or tokenizer.json.gz), or without one
// a tiktoken ranks file of a known tokenizer class (tiktoken.go) or
// GPT-2's vocab.json and merges.txt (gpt2files.go), or a SentencePiece
// model (tokenizer.model, spmodel.go), together with
// dir/tokenizer_config.json and dir/chat_template.jinja when present. The
// config decides the BOS/EOS/PAD tokens, add_bos_token/add_eos_token and the
// chat templates.
func LoadDir(dir string) (*Tokenizer, error) {
	path := filepath.Join(dir, "tokenizer.json")
	var t *Tokenizer
	if _, err := os.Stat(path); err != nil {
		if _, err2 := os.Stat(path + ".gz"); err2 == nil {
			path += ".gz"
		} else if tt, ok, terr := loadTiktokenDir(dir); terr != nil {
			return nil, terr
		} else if ok {
			t = tt
		} else if tt, ok, gerr := loadGPT2Files(dir); gerr != nil {
			return nil, gerr
		} else if ok {
			t = tt
		} else if tt, ok, serr := loadSPModel(dir); serr != nil {
			return nil, serr
		} else if ok {
			t = tt
		} else {
			return nil, errs.Unsupportedf("%s: no tokenizer.json (tputool reads tokenizer.json, the tiktoken ranks files %s, GPT-2's vocab.json with merges.txt, and SentencePiece models (%s); not vocab.txt files): %w", dir, tiktokenFiles(), strings.Join(spFiles, ", "), err)
		}
	}
	if t == nil {
		var err error
		if t, err = Load(path); err != nil {
			return nil, err
		}
	}
	cfgPath := filepath.Join(dir, "tokenizer_config.json")
	if data, err := readMaybeGzip(cfgPath, maxConfigBytes); err == nil {
		if err := t.applyConfig(data); err != nil {
			return nil, fmt.Errorf("%s: %w", cfgPath, err)
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	jinjaPath := filepath.Join(dir, "chat_template.jinja")
	if data, err := readMaybeGzip(jinjaPath, maxConfigBytes); err == nil {
		if t.templates == nil {
			t.templates = map[string]string{}
		}
		t.templates["default"] = string(data)
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	return t, nil
}

// readMaybeGzip reads a file, gunzipping it when it starts with the gzip
// magic, and refuses more than limit bytes of (decompressed) content.
func readMaybeGzip(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var head [2]byte
	n, _ := io.ReadFull(f, head[:])
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	var r io.Reader = f
	if n == 2 && head[0] == 0x1f && head[1] == 0x8b {
		zr, err := gzip.NewReader(f)
		if err != nil {
			return nil, fmt.Errorf("%s: gzip: %w", path, err)
		}
		defer zr.Close()
		r = zr
	}
	data, err := io.ReadAll(io.LimitReader(r, limit+1))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if int64(len(data)) > limit {
		return nil, fmt.Errorf("%s: larger than %d bytes", path, limit)
	}
	return data, nil
}
