package hub

import (
	"slices"
	"testing"
)

// The expectations were produced with Python's fnmatch.fnmatchcase, which
// huggingface_hub's filter_repo_objects uses.
func TestMatchLikePythonFnmatchcase(t *testing.T) {
	cases := []struct {
		pattern, name string
		want          bool
	}{
		{"*.json", "config.json", true},
		{"*.json", "unet/config.json", true},
		{"*.json", "config.jsonx", false},
		{"unet/*", "unet/a/b.bin", true},
		{"unet/*", "unetx/a", false},
		{"?.txt", "a.txt", true},
		{"?.txt", "ab.txt", false},
		{"[ab].txt", "a.txt", true},
		{"[ab].txt", "c.txt", false},
		{"[!ab].txt", "c.txt", true},
		{"[!ab].txt", "a.txt", false},
		{"[a-c]x", "bx", true},
		{"[a-c]x", "dx", false},
		{"[c-a]x", "bx", false},
		{"[]]x", "]x", true},
		{"[!]]x", "]x", false},
		{"[!]]x", "ax", true},
		{"[x", "[x", true},
		{"[x", "x", false},
		{"a[", "a[", true},
		{"*[", "ab[", true},
		{"\\*", "\\x", true},
		{"\\*", "*", false},
		{"[-a]", "-", true},
		{"[a-]", "-", true},
		{"model*.safetensors", "model-00001-of-00002.safetensors", true},
		{"*", "anything/at/all", true},
		{"", "", true},
		{"*a*b", "xaxxb", true},
		{"*a*b", "xaxxbc", false},
		{"[^a]", "^", true},
		{"[^a]", "b", false},
		{"tokenizer*", "tokenizer_config.json", true},
		{"*.FOO", "x.foo", false},
		{"a*b*c", "abc", true},
		{"a*b*c", "acb", false},
		{"[a-c-e]", "d", false},
		{"[a-c-e]", "-", true},
		{"[a-c-e]", "e", true},
		{"**/x", "a/b/x", true},
		{"[[]", "[", true},
	}
	for _, c := range cases {
		if got := Match(c.pattern, c.name); got != c.want {
			t.Errorf("Match(%q, %q) = %v, want %v", c.pattern, c.name, got, c.want)
		}
	}
}

func TestFilterFiles(t *testing.T) {
	files := []string{"config.json", "model.safetensors", "pytorch_model.bin", "unet/config.json",
		"unet/diffusion_pytorch_model.safetensors", "unet/diffusion_pytorch_model.fp16.safetensors", ".gitattributes"}
	got := FilterFiles(files, []string{"*.json", "unet/"}, []string{"*.fp16.*", `unet\config.json`})
	want := []string{"config.json", "unet/diffusion_pytorch_model.safetensors"}
	if !slices.Equal(got, want) {
		t.Errorf("FilterFiles = %q, want %q", got, want)
	}
	if got := FilterFiles(files, nil, []string{"*.bin", ".*"}); len(got) != 5 {
		t.Errorf("ignore only: got %q", got)
	}
}
