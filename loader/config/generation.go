package config

import (
	"encoding/json"
	"fmt"
)

// IDList is a token id field that may be a single integer, a list, or null
// (eos_token_id is all three in the wild).
type IDList []int

// UnmarshalJSON accepts 5, [5, 7] and null.
func (l *IDList) UnmarshalJSON(b []byte) error {
	var one *int
	if err := json.Unmarshal(b, &one); err == nil {
		if one == nil {
			*l = nil
		} else {
			*l = IDList{*one}
		}
		return nil
	}
	var many []int
	if err := json.Unmarshal(b, &many); err != nil {
		return fmt.Errorf("token id must be an integer or a list of integers, got %s", b)
	}
	*l = many
	return nil
}

// Generation is generation_config.json. Pointer fields are nil when the file
// does not set them, so callers can layer flags over file over built-in
// defaults.
type Generation struct {
	BOSTokenID        IDList   `json:"bos_token_id"`
	EOSTokenID        IDList   `json:"eos_token_id"`
	PadTokenID        IDList   `json:"pad_token_id"`
	DoSample          *bool    `json:"do_sample"`
	Temperature       *float64 `json:"temperature"`
	TopK              *int     `json:"top_k"`
	TopP              *float64 `json:"top_p"`
	MinP              *float64 `json:"min_p"`
	RepetitionPenalty *float64 `json:"repetition_penalty"`
	MaxNewTokens      *int     `json:"max_new_tokens"`
	MaxLength         *int     `json:"max_length"`
}

// ReadGeneration reads generation_config.json.
func ReadGeneration(path string) (*Generation, error) {
	g := &Generation{}
	if err := ReadJSONFile(path, g); err != nil {
		return nil, err
	}
	return g, nil
}

// ModelEOS returns the eos ids from a config.json (text_config first for
// wrappers), for models that ship no generation_config.json.
func (m *File) ModelEOS() IDList {
	src := m
	if m.Text != nil && m.Text.Has("eos_token_id") {
		src = m.Text
	}
	var ids IDList
	if raw, ok := src.Raw["eos_token_id"]; ok {
		if err := json.Unmarshal(raw, &ids); err != nil {
			return nil
		}
	}
	return ids
}
