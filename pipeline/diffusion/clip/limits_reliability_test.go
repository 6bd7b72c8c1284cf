package clip

import (
	"strings"
	"testing"
)

// TestHostileLayerCount: num_hidden_layers of 2^40 (which ran the process
// out of memory) is a config error.
func TestHostileLayerCount(t *testing.T) {
	_, err := ParseConfig([]byte(`{"hidden_size":32,"num_attention_heads":4,"num_hidden_layers":1099511627776}`))
	if err == nil || !strings.Contains(err.Error(), "num_hidden_layers 1099511627776") {
		t.Fatalf("got %v", err)
	}
}
