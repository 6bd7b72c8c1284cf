package bench

import (
	"bufio"
	"bytes"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// Output formats of `tputool bench -o`.
const (
	FormatMarkdown = "md"
	FormatCSV      = "csv"
	FormatJSON     = "json"
	FormatJSONL    = "jsonl"
)

// Formats lists the output formats.
func Formats() []string { return []string{FormatMarkdown, FormatCSV, FormatJSON, FormatJSONL} }

// Num formats a figure for a table: one decimal from 100 up, two from 1
// up, three significant digits below.
func Num(v float64) string {
	a := v
	if a < 0 {
		a = -a
	}
	switch {
	case a >= 100:
		return strconv.FormatFloat(v, 'f', 1, 64)
	case a >= 1:
		return strconv.FormatFloat(v, 'f', 2, 64)
	case a == 0:
		return "0"
	default:
		return strconv.FormatFloat(v, 'g', 3, 64)
	}
}

// statCell is "median ± stddev", or "-" without samples.
func statCell(s *Stat) string {
	if s == nil {
		return "-"
	}
	if s.N < 2 {
		return Num(s.Median)
	}
	return Num(s.Median) + " ± " + Num(s.Stddev)
}

func speedupCell(v *float64) string {
	if v == nil {
		return "-"
	}
	return strconv.FormatFloat(*v, 'f', 2, 64) + "x"
}

// Table returns the header and cells of the rows' table (the columns of
// the first row's task): medians ± standard deviations, as `tputool bench`
// prints them.
func Table(rows []Row) (header []string, cells [][]string) {
	task := TaskGenerate
	if len(rows) > 0 {
		task = rows[0].Task
	}
	header = []string{"mode", "batch", "shape", "load s", "compile s", "hits/misses"}
	switch task {
	case TaskDiffuse:
		header = append(header, "s/step", "s/image")
	case TaskEmbed:
		header = append(header, "embed tok/s", "embed ms")
	default:
		header = append(header, "prefill tok/s", "decode tok/s", "TTFT ms", "ITL ms")
	}
	header = append(header, "compiled vs eager")
	for _, r := range rows {
		c := []string{r.Mode, strconv.Itoa(r.Batch), r.Shape, Num(r.LoadS), Num(r.CompileS),
			fmt.Sprintf("%d/%d", r.CacheHits, r.CacheMisses)}
		switch task {
		case TaskDiffuse:
			c = append(c, statCell(r.StepS), statCell(r.ImageS))
		case TaskEmbed:
			c = append(c, statCell(r.EmbedTokS), statCell(r.EmbedMs))
		default:
			c = append(c, statCell(r.PrefillTokS), statCell(r.DecodeTokS), statCell(r.TTFTMs), statCell(r.ITLMs))
		}
		cells = append(cells, append(c, speedupCell(r.SpeedupVsEager)))
	}
	return header, cells
}

// HeaderLine is the one-line summary printed above a table.
func HeaderLine(h Header) string {
	var b strings.Builder
	fmt.Fprintf(&b, "tputool %s", h.TputoolVersion)
	if c := h.Commit; c != "" {
		fmt.Fprintf(&b, " %.12s", c)
	}
	fmt.Fprintf(&b, " (gomlx %s, go-xla %s)", orDash(h.GoMLX), orDash(h.GoXLA))
	fmt.Fprintf(&b, " | %s %s | device %s | backend %s | dtype %s", h.Task, h.Model, h.Device, h.Backend, h.DType)
	for _, s := range []struct{ name, value string }{
		{"kv cache", h.KVCacheDType}, {"quantize", h.Quantize}, {"activations", h.Activations}, {"experts", h.Experts},
		{"tp", positive(h.TP)}, {"dp", positive(h.DP)}, {"call", h.Call}, {"pooling", h.Pooling},
	} {
		if s.value != "" {
			fmt.Fprintf(&b, ", %s %s", s.name, s.value)
		}
	}
	fmt.Fprintf(&b, " | %s/%s, %d cores", h.Host.OS, h.Host.Arch, h.Host.Cores)
	switch m := h.Host.MemoryBytes; {
	case m >= 1<<30:
		fmt.Fprintf(&b, ", %.1f GiB", float64(m)/(1<<30))
	case m > 0:
		fmt.Fprintf(&b, ", %.1f MiB", float64(m)/(1<<20))
	}
	if h.Host.LoadAvg != nil {
		fmt.Fprintf(&b, ", load %.2f", *h.Host.LoadAvg)
	}
	fmt.Fprintf(&b, " | repeat %d, warmup %d | %s", h.Repeat, h.Warmup, h.Date)
	return b.String()
}

// positive is n in decimal, or "" for 0 and below.
func positive(n int) string {
	if n <= 0 {
		return ""
	}
	return strconv.Itoa(n)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// statNames are the Stat-valued columns, in CSV order.
var statNames = []string{"prefill_tok_s", "decode_tok_s", "ttft_ms", "itl_ms", "embed_tok_s", "embed_ms", "step_s", "image_s"}

func statsOf(r *Row) []*Stat {
	return []*Stat{r.PrefillTokS, r.DecodeTokS, r.TTFTMs, r.ITLMs, r.EmbedTokS, r.EmbedMs, r.StepS, r.ImageS}
}

// CSVHeader lists the CSV columns.
func CSVHeader() []string {
	h := []string{"task", "mode", "batch", "shape", "prompt_len", "gen_len", "steps", "width", "height", "repeat", "warmup",
		"load_s", "compile_s", "first_run_s", "cache_hits", "cache_misses", "recompiles"}
	for _, n := range statNames {
		h = append(h, n+"_median", n+"_min", n+"_max", n+"_stddev", n+"_n")
	}
	return append(h, "decode_tok_s_aggregate", "speedup_vs_eager", "prefill_speedup_vs_eager",
		"tputool_version", "device", "backend", "dtype", "model")
}

func ftoa(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }

func optInt(v int) string {
	if v == 0 {
		return ""
	}
	return strconv.Itoa(v)
}

func optFloat(v *float64) string {
	if v == nil {
		return ""
	}
	return ftoa(*v)
}

// WriteCSV writes one header line and one line per row, with the header's
// version, device, backend, dtype and model repeated on each row so that
// every line stands alone. Missing figures are empty cells.
func WriteCSV(w io.Writer, rep *Report) error {
	cw := csv.NewWriter(w)
	if err := cw.Write(CSVHeader()); err != nil {
		return err
	}
	h := rep.Header
	for i := range rep.Rows {
		r := &rep.Rows[i]
		rec := []string{r.Task, r.Mode, strconv.Itoa(r.Batch), r.Shape, optInt(r.PromptLen), optInt(r.GenLen), optInt(r.Steps),
			optInt(r.Width), optInt(r.Height), strconv.Itoa(r.Repeat), strconv.Itoa(r.Warmup),
			ftoa(r.LoadS), ftoa(r.CompileS), ftoa(r.FirstRunS),
			strconv.Itoa(r.CacheHits), strconv.Itoa(r.CacheMisses), strconv.Itoa(r.Recompiles)}
		for _, s := range statsOf(r) {
			if s == nil {
				rec = append(rec, "", "", "", "", "")
				continue
			}
			rec = append(rec, ftoa(s.Median), ftoa(s.Min), ftoa(s.Max), ftoa(s.Stddev), strconv.Itoa(s.N))
		}
		rec = append(rec, optFloat(r.DecodeTokSAggregate), optFloat(r.SpeedupVsEager), optFloat(r.PrefillSpeedupVsEager),
			h.TputoolVersion, h.Device, h.Backend, h.DType, h.Model)
		if err := cw.Write(rec); err != nil {
			return err
		}
	}
	cw.Flush()
	return cw.Error()
}

// WriteJSON writes the report as one JSON document, indented or compact.
func WriteJSON(w io.Writer, rep *Report, indent bool) error {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	if indent {
		enc.SetIndent("", "  ")
	}
	return enc.Encode(rep)
}

// Line types of the JSON-lines format.
const (
	LineHeader = "header"
	LineRow    = "row"
)

type headerLine struct {
	Type          string `json:"type"`
	SchemaVersion int    `json:"schema_version"`
	Header
}

type rowLine struct {
	Type string `json:"type"`
	Row
}

// WriteJSONL writes the report as JSON lines: a "header" object (with
// schema_version and the header fields), then one "row" object per row.
func WriteJSONL(w io.Writer, rep *Report) error {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(headerLine{Type: LineHeader, SchemaVersion: rep.SchemaVersion, Header: rep.Header}); err != nil {
		return err
	}
	for _, r := range rep.Rows {
		if err := enc.Encode(rowLine{Type: LineRow, Row: r}); err != nil {
			return err
		}
	}
	return nil
}

// ReadReport reads a report written as JSON or as JSON lines; name labels
// errors. A schema version newer than this build's is an error.
func ReadReport(r io.Reader, name string) (*Report, error) {
	data, err := io.ReadAll(r)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	data = bytes.TrimSpace(data)
	if len(data) == 0 {
		return nil, fmt.Errorf("%s: empty file, want a tputool bench JSON or JSON-lines report", name)
	}
	var rep *Report
	var probe struct {
		Type string `json:"type"`
	}
	if json.Unmarshal(firstLine(data), &probe) == nil && probe.Type != "" {
		rep, err = readJSONL(data, name)
	} else {
		rep = &Report{}
		dec := json.NewDecoder(bytes.NewReader(data))
		if err = dec.Decode(rep); err != nil {
			err = fmt.Errorf("%s: not a tputool bench report: %w", name, err)
		}
	}
	if err != nil {
		return nil, err
	}
	switch {
	case rep.SchemaVersion == 0:
		return nil, fmt.Errorf("%s: no schema_version: not a tputool bench report", name)
	case rep.SchemaVersion > SchemaVersion:
		return nil, fmt.Errorf("%s: schema_version %d is newer than this tputool's %d", name, rep.SchemaVersion, SchemaVersion)
	}
	return rep, nil
}

func firstLine(data []byte) []byte {
	if i := bytes.IndexByte(data, '\n'); i >= 0 {
		return bytes.TrimSpace(data[:i])
	}
	return data
}

func readJSONL(data []byte, name string) (*Report, error) {
	rep := &Report{Rows: []Row{}}
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	n, header := 0, false
	for sc.Scan() {
		n++
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue
		}
		var probe struct {
			Type string `json:"type"`
		}
		if err := json.Unmarshal(line, &probe); err != nil {
			return nil, fmt.Errorf("%s:%d: %w", name, n, err)
		}
		switch probe.Type {
		case LineHeader:
			var h headerLine
			if err := json.Unmarshal(line, &h); err != nil {
				return nil, fmt.Errorf("%s:%d: header: %w", name, n, err)
			}
			rep.SchemaVersion, rep.Header, header = h.SchemaVersion, h.Header, true
		case LineRow:
			var r rowLine
			if err := json.Unmarshal(line, &r); err != nil {
				return nil, fmt.Errorf("%s:%d: row: %w", name, n, err)
			}
			rep.Rows = append(rep.Rows, r.Row)
		default:
			return nil, fmt.Errorf("%s:%d: unknown line type %q (want %q or %q)", name, n, probe.Type, LineHeader, LineRow)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	if !header {
		return nil, fmt.Errorf("%s: no header line", name)
	}
	return rep, nil
}
