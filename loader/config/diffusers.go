package config

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"sort"
	"strings"
)

// Component is one entry of a diffusers model_index.json, such as
// "unet": ["diffusers", "UNet2DConditionModel"].
type Component struct {
	Name    string `json:"name"`
	Library string `json:"library"`
	Class   string `json:"class"`
}

// ModelIndex is a diffusers pipeline's model_index.json.
type ModelIndex struct {
	Path             string                     `json:"-"`
	ClassName        string                     `json:"_class_name"`
	DiffusersVersion string                     `json:"_diffusers_version"`
	NameOrPath       string                     `json:"_name_or_path"`
	Raw              map[string]json.RawMessage `json:"-"`
	// Components in name order. Entries whose value is [null, null]
	// (optional components left out) are skipped.
	Components []Component `json:"-"`
}

// ParseModelIndex parses model_index.json bytes.
func ParseModelIndex(b []byte) (*ModelIndex, error) {
	mi := &ModelIndex{}
	if err := json.Unmarshal(b, &mi.Raw); err != nil {
		return nil, fmt.Errorf("model_index is not a JSON object: %w", err)
	}
	if err := json.Unmarshal(b, mi); err != nil {
		return nil, fmt.Errorf("model_index: %w", err)
	}
	if mi.ClassName == "" {
		return nil, fmt.Errorf(`model_index: missing "_class_name"`)
	}
	for name, raw := range mi.Raw {
		if strings.HasPrefix(name, "_") {
			continue
		}
		var pair []*string
		if err := json.Unmarshal(raw, &pair); err != nil || len(pair) != 2 {
			continue // a plain option such as "requires_safety_checker": true
		}
		if pair[0] == nil || pair[1] == nil {
			continue
		}
		if name == "." || !filepath.IsLocal(name) || strings.ContainsAny(name, `/\`) {
			return nil, fmt.Errorf("model_index: component name %q is not a plain folder name", name)
		}
		mi.Components = append(mi.Components, Component{Name: name, Library: *pair[0], Class: *pair[1]})
	}
	sort.Slice(mi.Components, func(i, j int) bool { return mi.Components[i].Name < mi.Components[j].Name })
	return mi, nil
}

// ReadModelIndex reads model_index.json.
func ReadModelIndex(path string) (*ModelIndex, error) {
	var raw json.RawMessage
	if err := ReadJSONFile(path, &raw); err != nil {
		return nil, err
	}
	mi, err := ParseModelIndex(raw)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	mi.Path = path
	return mi, nil
}

// Component returns the named component.
func (mi *ModelIndex) Component(name string) (Component, bool) {
	for _, c := range mi.Components {
		if c.Name == name {
			return c, true
		}
	}
	return Component{}, false
}
