// Package config reads the JSON configuration files of transformers and
// diffusers repositories: config.json (with nested text_config for
// multimodal wrappers such as Qwen3.5), generation_config.json, diffusers'
// model_index.json and per-component config.json files.
//
// Architecture-specific fields are decoded by the architecture packages
// (pipeline/<arch>) from Model.Raw into their own Config structs; this
// package only extracts what every consumer needs and keeps everything else,
// so unknown fields are never fatal.
package config

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
)

// MaxConfigSize bounds the size of a JSON config file we parse.
const MaxConfigSize = 16 << 20

// ReadJSONFile reads a JSON file of at most MaxConfigSize bytes into v.
func ReadJSONFile(path string, v any) error {
	st, err := os.Stat(path)
	if err != nil {
		return err
	}
	if st.Size() > MaxConfigSize {
		return fmt.Errorf("%s: %d bytes, over the %d-byte limit for a config file", path, st.Size(), MaxConfigSize)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(PythonJSON(b), v); err != nil {
		return fmt.Errorf("%s: invalid JSON: %w", path, err)
	}
	return nil
}

// The largest float64, which stands for Python's Infinity (PythonJSON).
const maxFloat = "1.7976931348623157e308"

// PythonJSON returns b with the non-finite numbers Python's json module
// writes (NaN, Infinity, -Infinity: transformers saves a default
// time_step_limit of (0.0, inf) so), which JSON has not, replaced
// outside strings by null and by the largest float64 and its negative;
// b itself when it is valid JSON or holds none of them.
func PythonJSON(b []byte) []byte {
	if json.Valid(b) || !bytes.Contains(b, []byte("NaN")) && !bytes.Contains(b, []byte("Infinity")) {
		return b
	}
	out := make([]byte, 0, len(b)+64)
	inString := false
	for i := 0; i < len(b); i++ {
		c := b[i]
		if inString {
			out = append(out, c)
			switch c {
			case '\\':
				if i+1 < len(b) {
					i++
					out = append(out, b[i])
				}
			case '"':
				inString = false
			}
			continue
		}
		switch {
		case c == '"':
			inString = true
			out = append(out, c)
		case bytes.HasPrefix(b[i:], []byte("NaN")):
			out = append(out, "null"...)
			i += len("NaN") - 1
		case bytes.HasPrefix(b[i:], []byte("-Infinity")):
			out = append(out, "-"+maxFloat...)
			i += len("-Infinity") - 1
		case bytes.HasPrefix(b[i:], []byte("Infinity")):
			out = append(out, maxFloat...)
			i += len("Infinity") - 1
		default:
			out = append(out, c)
		}
	}
	return out
}

// File is a transformers config.json.
type File struct {
	// Path is the file it was read from.
	Path string `json:"-"`
	// Raw holds every top-level field, so architectures can decode their own.
	Raw           map[string]json.RawMessage `json:"-"`
	Architectures []string                   `json:"architectures"`
	ModelType     string                     `json:"model_type"`
	TorchDType    string                     `json:"torch_dtype"`
	// DType is the newer spelling of torch_dtype (transformers >= 4.56).
	DType string `json:"dtype"`
	// Text is the nested text_config of multimodal wrappers (Qwen3.5,
	// Gemma 3 multimodal, Llava, ...), nil when absent.
	Text *File `json:"-"`
}

// ParseModel parses config.json bytes.
func ParseModel(b []byte) (*File, error) {
	b = PythonJSON(b)
	m := &File{}
	if err := json.Unmarshal(b, &m.Raw); err != nil {
		return nil, fmt.Errorf("config is not a JSON object: %w", err)
	}
	if err := json.Unmarshal(b, m); err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	if tc, ok := m.Raw["text_config"]; ok && !bytes.Equal(bytes.TrimSpace(tc), []byte("null")) {
		text, err := ParseModel(tc)
		if err != nil {
			return nil, fmt.Errorf("text_config: %w", err)
		}
		m.Text = text
	}
	return m, nil
}

// ReadModel reads a config.json file.
func ReadModel(path string) (*File, error) {
	var raw json.RawMessage
	if err := ReadJSONFile(path, &raw); err != nil {
		return nil, err
	}
	m, err := ParseModel(raw)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	m.Path = path
	if m.Text != nil {
		m.Text.Path = path
	}
	return m, nil
}

// Architecture returns architectures[0], or "" when the list is empty.
func (m *File) Architecture() string {
	if len(m.Architectures) == 0 {
		return ""
	}
	return m.Architectures[0]
}

// WeightDType returns the checkpoint dtype the config declares ("bfloat16",
// "float16", "float32"), preferring the newer "dtype" field.
func (m *File) WeightDType() string {
	if m.DType != "" {
		return m.DType
	}
	if m.TorchDType == "" && m.Text != nil {
		return m.Text.WeightDType()
	}
	return m.TorchDType
}

// Decode unmarshals the whole config into v (an architecture's Config).
func (m *File) Decode(v any) error {
	b, err := json.Marshal(m.Raw)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("%s: %w", m.Path, err)
	}
	return nil
}

// Has reports whether the field is present.
func (m *File) Has(field string) bool { _, ok := m.Raw[field]; return ok }

// RopeFields are the top-level fields transformers' rotary embeddings
// read: a class without a rotary, or with a fixed one, reads none of them.
var RopeFields = []string{"rope_theta", "rope_scaling", "rope_parameters", "partial_rotary_factor"}

// Without returns a copy of m whose Raw lacks the named top-level fields
// (an architecture's resolver hiding fields its class never reads, such as
// the rope fields of a model without a rotary, from a shared resolver).
// The fields' decoded copies in m stay as they are.
func (m *File) Without(fields ...string) *File {
	raw := make(map[string]json.RawMessage, len(m.Raw))
	for k, v := range m.Raw {
		raw[k] = v
	}
	for _, f := range fields {
		delete(raw, f)
	}
	c := *m
	c.Raw = raw
	return &c
}
