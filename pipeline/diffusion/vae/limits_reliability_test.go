package vae

import (
	"strings"
	"testing"
)

// TestHostileLayersPerBlock: a layers_per_block of 2^40 (which built
// decoder layers until memory ran out) is a config error.
func TestHostileLayersPerBlock(t *testing.T) {
	for _, v := range []string{"1099511627776", "-3"} {
		_, err := ParseConfig([]byte(`{"block_out_channels":[32,64],"down_block_types":["DownEncoderBlock2D","DownEncoderBlock2D"],
			"up_block_types":["UpDecoderBlock2D","UpDecoderBlock2D"],"norm_num_groups":8,"layers_per_block":` + v + `}`))
		if err == nil || !strings.Contains(err.Error(), "layers_per_block "+v) {
			t.Errorf("%s: got %v", v, err)
		}
	}
}
