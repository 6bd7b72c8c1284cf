package bench

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func sampleReport() *Report {
	load := 0.5
	h := Header{TputoolVersion: "1.2.3", GoVersion: "go1.26.8", GoMLX: "v0.26.0", GoXLA: "v0.1.4", Device: "cpu (go, 1 device)",
		Backend: "go", Platform: "cpu", DType: "float32", Model: "./m", Task: TaskGenerate, Date: "2026-01-02T03:04:05Z",
		Host: Host{OS: "linux", Arch: "amd64", Cores: 2, MemoryBytes: 16 << 30, LoadAvg: &load}, Repeat: 3, Warmup: 1}
	rows := []Row{
		{Task: TaskGenerate, Mode: ModeEager, Batch: 1, Shape: "p4+g3", PromptLen: 4, GenLen: 3, Repeat: 3, Warmup: 1,
			LoadS: 2.25, CompileS: 1.5, FirstRunS: 1.66, CacheHits: 18, CacheMisses: 2,
			PrefillTokS: &Stat{Median: 40, Min: 30, Max: 50, Stddev: 10, N: 3}, DecodeTokS: &Stat{Median: 10, Min: 9, Max: 11, Stddev: 1, N: 3},
			DecodeTokSAggregate: ptr(10.5), TTFTMs: &Stat{Median: 100, Min: 80, Max: 120, Stddev: 20, N: 3},
			ITLMs: &Stat{Median: 100, Min: 90, Max: 111, Stddev: 7, N: 9}},
		{Task: TaskGenerate, Mode: ModeCompiled, Batch: 1, Shape: "p4+g3", PromptLen: 4, GenLen: 3, Repeat: 3, Warmup: 1,
			LoadS: 2.25, CompileS: 3, FirstRunS: 3.2, CacheHits: 18, CacheMisses: 2,
			PrefillTokS: &Stat{Median: 80, Min: 80, Max: 80, N: 3}, DecodeTokS: &Stat{Median: 20, Min: 20, Max: 20, N: 3},
			DecodeTokSAggregate: ptr(20), TTFTMs: &Stat{Median: 50, Min: 50, Max: 50, N: 3},
			ITLMs: &Stat{Median: 50, Min: 50, Max: 50, N: 9}},
	}
	setSpeedups(rows)
	return NewReport(h, rows)
}

func TestTableCells(t *testing.T) {
	rep := sampleReport()
	header, cells := Table(rep.Rows)
	assert.Equal(t, []string{"mode", "batch", "shape", "load s", "compile s", "hits/misses", "prefill tok/s", "decode tok/s",
		"TTFT ms", "ITL ms", "compiled vs eager"}, header)
	assert.Equal(t, []string{"eager", "1", "p4+g3", "2.25", "1.50", "18/2", "40.00 ± 10.00", "10.00 ± 1.00", "100.0 ± 20.00", "100.0 ± 7.00", "-"}, cells[0])
	assert.Equal(t, []string{"compiled", "1", "p4+g3", "2.25", "3.00", "18/2", "80.00 ± 0", "20.00 ± 0", "50.00 ± 0", "50.00 ± 0", "2.00x"}, cells[1])

	header, cells = Table([]Row{{Task: TaskDiffuse, Mode: ModeEager, Batch: 2, Shape: "64x64/4", StepS: &Stat{Median: 0.25, N: 1},
		ImageS: &Stat{Median: 1.5, Stddev: 0.01, N: 2}}})
	assert.Equal(t, []string{"mode", "batch", "shape", "load s", "compile s", "hits/misses", "s/step", "s/image", "compiled vs eager"}, header)
	assert.Equal(t, []string{"eager", "2", "64x64/4", "0", "0", "0/0", "0.25", "1.50 ± 0.01", "-"}, cells[0])

	rep.Header.Commit = "0123456789abcdef"
	line := HeaderLine(rep.Header)
	assert.Contains(t, line, "tputool 1.2.3 0123456789ab (gomlx")
	for _, want := range []string{"tputool 1.2.3", "gomlx v0.26.0", "go-xla v0.1.4", "device cpu (go, 1 device)", "backend go",
		"dtype float32", "generate ./m", "2 cores, 16.0 GiB, load 0.50", "repeat 3, warmup 1"} {
		assert.Contains(t, line, want)
	}
}

func TestNum(t *testing.T) {
	for v, want := range map[float64]string{1234.56: "1234.6", 12.345: "12.35", 0.012345: "0.0123", 0: "0", -150: "-150.0"} {
		assert.Equal(t, want, Num(v))
	}
}

func TestCSV(t *testing.T) {
	var b bytes.Buffer
	require.NoError(t, WriteCSV(&b, sampleReport()))
	recs, err := csv.NewReader(&b).ReadAll()
	require.NoError(t, err)
	require.Len(t, recs, 3)
	col := map[string]int{}
	for i, n := range recs[0] {
		col[n] = i
	}
	assert.Len(t, col, len(recs[0]), "column names are unique")
	for _, r := range recs {
		assert.Len(t, r, len(recs[0]))
	}
	c := recs[2]
	assert.Equal(t, "compiled", c[col["mode"]])
	assert.Equal(t, "p4+g3", c[col["shape"]])
	assert.Equal(t, "4", c[col["prompt_len"]])
	assert.Equal(t, "", c[col["steps"]], "absent for text generation")
	assert.Equal(t, "3", c[col["compile_s"]])
	assert.Equal(t, "50", c[col["itl_ms_median"]])
	assert.Equal(t, "9", c[col["itl_ms_n"]])
	assert.Equal(t, "", c[col["step_s_median"]])
	assert.Equal(t, "2", c[col["speedup_vs_eager"]])
	assert.Equal(t, "", recs[1][col["speedup_vs_eager"]])
	assert.Equal(t, "cpu (go, 1 device)", c[col["device"]])
	assert.Equal(t, "1.2.3", c[col["tputool_version"]])
	assert.Equal(t, "111", recs[1][col["itl_ms_max"]])
}

func TestJSONRoundTripAndSchema(t *testing.T) {
	rep := sampleReport()
	var b bytes.Buffer
	require.NoError(t, WriteJSON(&b, rep, false))
	assert.Equal(t, 1, strings.Count(b.String(), "\n"), "compact: one line")

	// The documented field names.
	var raw map[string]any
	require.NoError(t, json.Unmarshal(b.Bytes(), &raw))
	assert.EqualValues(t, 1, raw["schema_version"])
	h := raw["header"].(map[string]any)
	for _, k := range []string{"tputool_version", "gomlx", "go_xla", "device", "backend", "dtype", "model", "task", "date", "host", "repeat", "warmup"} {
		assert.Contains(t, h, k)
	}
	host := h["host"].(map[string]any)
	for _, k := range []string{"cores", "memory_bytes", "load_avg", "os", "arch"} {
		assert.Contains(t, host, k)
	}
	row := raw["rows"].([]any)[1].(map[string]any)
	for _, k := range []string{"task", "mode", "batch", "shape", "prompt_len", "gen_len", "repeat", "warmup", "load_s", "compile_s",
		"first_run_s", "cache_hits", "cache_misses", "recompiles", "prefill_tok_s", "decode_tok_s", "decode_tok_s_aggregate",
		"ttft_ms", "itl_ms", "speedup_vs_eager", "prefill_speedup_vs_eager"} {
		assert.Contains(t, row, k)
	}
	for _, k := range []string{"step_s", "image_s", "steps", "width", "height"} {
		assert.NotContains(t, row, k, "diffusion fields are absent from text rows")
	}
	assert.Equal(t, map[string]any{"median": 50.0, "min": 50.0, "max": 50.0, "stddev": 0.0, "n": 9.0}, row["itl_ms"])

	got, err := ReadReport(&b, "a.json")
	require.NoError(t, err)
	assert.Equal(t, rep, got)

	b.Reset()
	require.NoError(t, WriteJSON(&b, rep, true))
	got, err = ReadReport(&b, "indented.json")
	require.NoError(t, err)
	assert.Equal(t, rep, got)
}

func TestJSONLRoundTrip(t *testing.T) {
	rep := sampleReport()
	var b bytes.Buffer
	require.NoError(t, WriteJSONL(&b, rep))
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	require.Len(t, lines, 3)
	var first map[string]any
	require.NoError(t, json.Unmarshal([]byte(lines[0]), &first))
	assert.Equal(t, "header", first["type"])
	assert.EqualValues(t, 1, first["schema_version"])
	assert.Equal(t, "go", first["backend"])
	var second map[string]any
	require.NoError(t, json.Unmarshal([]byte(lines[1]), &second))
	assert.Equal(t, "row", second["type"])
	assert.Equal(t, "eager", second["mode"])

	got, err := ReadReport(&b, "a.jsonl")
	require.NoError(t, err)
	assert.Equal(t, rep, got)
}

func TestReadReportErrors(t *testing.T) {
	for in, msg := range map[string]string{
		"":                                  "x: empty file",
		"not json":                          "x: not a tputool bench report",
		`{"rows": []}`:                      "no schema_version",
		`{"schema_version": 99, "rows":[]}`: "schema_version 99 is newer",
		`{"type":"row","mode":"eager"}`:     "x: no header line",
		"{\"type\":\"header\",\"schema_version\":1}\n{\"type\":\"what\"}":                `x:2: unknown line type "what"`,
		"{\"type\":\"header\",\"schema_version\":1}\n{\"type\":\"row\",\"batch\":\"x\"}": "x:2: row:",
	} {
		_, err := ReadReport(strings.NewReader(in), "x")
		assert.ErrorContains(t, err, msg, "%q", in)
	}
}

func TestCompare(t *testing.T) {
	old := sampleReport()
	nw := sampleReport()
	nw.Header.TputoolVersion = "1.3.0"
	nw.Rows[1].DecodeTokS = &Stat{Median: 25, N: 3}
	nw.Rows[1].ITLMs = &Stat{Median: 40, N: 9}
	nw.Rows[1].CompileS = 6
	nw.Rows = append(nw.Rows, Row{Task: TaskGenerate, Mode: ModeCompiled, Batch: 8, Shape: "p4+g3"})
	old.Rows = append(old.Rows, Row{Task: TaskGenerate, Mode: ModeEager, Batch: 8, Shape: "p4+g3"})

	c := Compare(old, nw)
	assert.Equal(t, "1.3.0", c.New.TputoolVersion)
	require.Len(t, c.Rows, 4)
	assert.Equal(t, InBoth, c.Rows[0].Status)
	assert.Equal(t, OldOnly, c.Rows[2].Status)
	assert.Equal(t, NewOnly, c.Rows[3].Status)
	byName := map[string]Ratio{}
	for _, r := range c.Rows[1].Ratios {
		byName[r.Metric] = r
	}
	assert.Equal(t, Ratio{Metric: "decode_tok_s", Old: 20, New: 25, Ratio: 1.25, Direction: "higher", Verdict: Better}, byName["decode_tok_s"])
	assert.Equal(t, Ratio{Metric: "itl_ms", Old: 50, New: 40, Ratio: 0.8, Direction: "lower", Verdict: Better}, byName["itl_ms"])
	assert.Equal(t, Ratio{Metric: "compile_s", Old: 3, New: 6, Ratio: 2, Direction: "lower", Verdict: Worse}, byName["compile_s"])
	assert.Equal(t, Same, byName["prefill_tok_s"].Verdict)
	assert.NotContains(t, byName, "step_s")

	header, cells := c.Table()
	assert.Equal(t, []string{"task", "mode", "batch", "shape", "prefill tok/s ↑", "decode tok/s ↑", "TTFT ms ↓", "ITL ms ↓",
		"compile s ↓", "load s ↓", "note"}, header)
	assert.Equal(t, []string{"generate", "compiled", "1", "p4+g3", "1.000x same", "1.250x better", "1.000x same", "0.800x better",
		"2.000x worse", "1.000x same", ""}, cells[1])
	assert.Equal(t, "only in old", cells[2][len(header)-1])
	assert.Equal(t, "-", cells[2][4])
	assert.Equal(t, "only in new", cells[3][len(header)-1])
}
