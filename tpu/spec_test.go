package tpu

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tputool/tputool/internal/errs"
)

func TestParseSpec(t *testing.T) {
	abs, err := filepath.Abs("plugins/libtpu.so")
	require.NoError(t, err)
	for _, tc := range []struct {
		in   string
		want Spec
	}{
		{"", Spec{Kind: SpecAuto}},
		{"auto", Spec{Kind: SpecAuto}},
		{" AUTO ", Spec{Kind: SpecAuto}},
		{"cpu", Spec{Kind: SpecCPU}},
		{"go", Spec{Kind: SpecGo}},
		{"cpu:go", Spec{Kind: SpecGo}},
		{" CPU:Go ", Spec{Kind: SpecGo}},
		{"cpu:fast", Spec{Kind: SpecFast}},
		{"tpu", Spec{Kind: SpecTPU}},
		{"Tpu", Spec{Kind: SpecTPU}},
		{"gpu", Spec{Kind: SpecGPU}},
		{"cuda", Spec{Kind: SpecGPU}},
		{"xla:cpu", Spec{Kind: SpecXLA, Plugin: "cpu"}},
		{"XLA:CUDA", Spec{Kind: SpecXLA, Plugin: "cuda"}},
		{"pjrt:tpu", Spec{Kind: SpecXLA, Plugin: "tpu"}},
		{"xla:/opt/Plugins/libtpu.so", Spec{Kind: SpecXLA, Plugin: "/opt/Plugins/libtpu.so"}},
		{"xla:plugins/libtpu.so", Spec{Kind: SpecXLA, Plugin: abs}},
	} {
		got, err := ParseSpec(tc.in)
		require.NoError(t, err, "ParseSpec(%q)", tc.in)
		assert.Equal(t, tc.want, got, "ParseSpec(%q)", tc.in)
	}
}

func TestParseSpecErrors(t *testing.T) {
	for _, tc := range []struct{ in, wantMsg string }{
		{"foo", `device "foo": want auto, cpu, cpu:fast, cpu:go, tpu, gpu, or xla:PLUGIN`},
		{"cpu:slow", `device "cpu:slow"`},
		{"tpu:0", `device "tpu:0"`},
		{"xla:", `missing plugin after "xla:"`},
		{"xla:cpu,shared_buffers", "may not contain ','"},
		{"xla:bad name", `plugin name "bad name"`},
	} {
		_, err := ParseSpec(tc.in)
		require.Error(t, err, "ParseSpec(%q)", tc.in)
		assert.ErrorIs(t, err, errs.ErrUsage)
		assert.Contains(t, err.Error(), tc.wantMsg)
		assert.NotContains(t, err.Error(), "--", "below cmd, errors name no flag")
		var se *SpecError
		if assert.ErrorAs(t, err, &se) {
			assert.True(t, strings.HasPrefix(se.Text("--device"), "--device "), "cmd restates it with its flag: %s", se.Text("--device"))
		}
	}
}

func TestSpecString(t *testing.T) {
	for _, s := range []string{"auto", "cpu", "cpu:fast", "cpu:go", "tpu", "gpu", "xla:cpu", "xla:/x/y.so"} {
		spec, err := ParseSpec(s)
		require.NoError(t, err)
		assert.Equal(t, s, spec.String())
	}
	assert.Equal(t, "auto", Spec{}.String())
	assert.True(t, Spec{Kind: SpecXLA, Plugin: "/x/y.so"}.PluginIsPath())
	assert.False(t, Spec{Kind: SpecXLA, Plugin: "cpu"}.PluginIsPath())
}

func TestChooseSpec(t *testing.T) {
	env := Env{LookupEnv: MapEnv(map[string]string{EnvDevice: "tpu"})}
	empty := Env{LookupEnv: MapEnv(nil)}

	got, fromEnv, err := ChooseSpec("cpu", true, env) // flag set by the user wins
	require.NoError(t, err)
	assert.Equal(t, SpecCPU, got.Kind)
	assert.False(t, fromEnv)

	got, fromEnv, err = ChooseSpec("auto", false, env) // flag at its default: env wins
	require.NoError(t, err)
	assert.Equal(t, SpecTPU, got.Kind)
	assert.True(t, fromEnv)

	got, fromEnv, err = ChooseSpec("auto", false, empty)
	require.NoError(t, err)
	assert.Equal(t, SpecAuto, got.Kind)
	assert.False(t, fromEnv)

	_, _, err = ChooseSpec("auto", false, Env{LookupEnv: MapEnv(map[string]string{EnvDevice: "quantum"})})
	require.ErrorIs(t, err, errs.ErrUsage)
	assert.Contains(t, err.Error(), `$TPUTOOL_DEVICE "quantum"`)
	var se *SpecError
	require.ErrorAs(t, err, &se)
	assert.Equal(t, `$TPUTOOL_DEVICE "quantum": `, se.Text("--device")[:len(`$TPUTOOL_DEVICE "quantum": `)], "the environment's name is kept")

	_, _, err = ChooseSpec("quantum", true, env)
	require.ErrorIs(t, err, errs.ErrUsage)
	assert.Contains(t, err.Error(), `device "quantum"`)
}
