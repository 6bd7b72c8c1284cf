package loader

import (
	"fmt"
	"path"
	"slices"
	"strings"

	"github.com/tputool/tputool/internal/errs"
	"github.com/tputool/tputool/loader/config"
)

// poolingFile reports whether name is a sentence-transformers Pooling
// module's config (1_Pooling/config.json), fetched with the configs.
func poolingFile(name string) bool {
	dir, rest, ok := strings.Cut(name, "/")
	return ok && rest == "config.json" && strings.HasSuffix(dir, "_Pooling")
}

// Pooling reads how a sentence-transformers model pools its token
// embeddings (modules.json's sentence_transformers.models.Pooling module
// and that module's config.json): "last" (pooling_mode_lasttoken, as
// Qwen3-Embedding), "mean" (pooling_mode_mean_tokens), or "" when the
// model declares none. A mode tputool does not pool by (CLS token, max,
// weighted mean, several at once) is an ErrUnsupported error naming it.
func (m *Checkpoint) Pooling() (string, error) {
	if m.Kind != Transformers || !m.HasFile("modules.json") {
		return "", nil
	}
	var modules []struct {
		Path string `json:"path"`
		Type string `json:"type"`
	}
	if err := config.ReadJSONFile(m.Path("modules.json"), &modules); err != nil {
		return "", err
	}
	for _, mod := range modules {
		if mod.Type != "sentence_transformers.models.Pooling" {
			continue
		}
		rel := path.Join(mod.Path, "config.json")
		if !m.HasFile(rel) {
			return "", fmt.Errorf("%s: modules.json names a Pooling module at %q, whose config.json the model lacks", m.Name(), mod.Path)
		}
		var c map[string]any
		if err := config.ReadJSONFile(m.Path(rel), &c); err != nil {
			return "", err
		}
		var on []string
		for k, v := range c {
			if b, ok := v.(bool); ok && b && strings.HasPrefix(k, "pooling_mode_") {
				on = append(on, strings.TrimPrefix(k, "pooling_mode_"))
			}
		}
		slices.Sort(on)
		switch {
		case len(on) == 1 && on[0] == "lasttoken":
			return "last", nil
		case len(on) == 1 && on[0] == "mean_tokens":
			return "mean", nil
		}
		return "", fmt.Errorf("%s: %s: pooling modes %v: tputool pools by the last token or the mean of the tokens: %w", m.Name(), rel, on, errs.ErrUnsupported)
	}
	return "", nil
}
