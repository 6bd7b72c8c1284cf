package bench

import (
	"strconv"
)

// Metric is one figure Compare looks at.
type Metric struct {
	// Name is the row's JSON field ("decode_tok_s"); medians for Stats.
	Name string
	// Label is the table heading.
	Label string
	// HigherIsBetter is true for rates, false for times.
	HigherIsBetter bool
	value          func(*Row) (float64, bool)
}

func statMedian(get func(*Row) *Stat) func(*Row) (float64, bool) {
	return func(r *Row) (float64, bool) {
		if s := get(r); s != nil {
			return s.Median, true
		}
		return 0, false
	}
}

// Metrics lists what Compare compares, in column order.
func Metrics() []Metric {
	return []Metric{
		{"prefill_tok_s", "prefill tok/s", true, statMedian(func(r *Row) *Stat { return r.PrefillTokS })},
		{"decode_tok_s", "decode tok/s", true, statMedian(func(r *Row) *Stat { return r.DecodeTokS })},
		{"ttft_ms", "TTFT ms", false, statMedian(func(r *Row) *Stat { return r.TTFTMs })},
		{"itl_ms", "ITL ms", false, statMedian(func(r *Row) *Stat { return r.ITLMs })},
		{"embed_tok_s", "embed tok/s", true, statMedian(func(r *Row) *Stat { return r.EmbedTokS })},
		{"embed_ms", "embed ms", false, statMedian(func(r *Row) *Stat { return r.EmbedMs })},
		{"step_s", "s/step", false, statMedian(func(r *Row) *Stat { return r.StepS })},
		{"image_s", "s/image", false, statMedian(func(r *Row) *Stat { return r.ImageS })},
		{"compile_s", "compile s", false, func(r *Row) (float64, bool) { return r.CompileS, true }},
		{"load_s", "load s", false, func(r *Row) (float64, bool) { return r.LoadS, true }},
	}
}

// Verdicts of a Ratio.
const (
	Better = "better"
	Worse  = "worse"
	Same   = "same"
)

// Ratio compares one metric of one row.
type Ratio struct {
	Metric string  `json:"metric"`
	Old    float64 `json:"old"`
	New    float64 `json:"new"`
	// Ratio is New / Old.
	Ratio float64 `json:"ratio"`
	// Direction is "higher" or "lower": which way is better.
	Direction string `json:"direction"`
	// Verdict is "better", "worse" or "same" (equal values).
	Verdict string `json:"verdict"`
}

// Row statuses of a Comparison.
const (
	InBoth  = "both"
	OldOnly = "old_only"
	NewOnly = "new_only"
)

// Comparison is one row key's metrics in two reports.
type Comparison struct {
	Task   string  `json:"task"`
	Mode   string  `json:"mode"`
	Batch  int     `json:"batch"`
	Shape  string  `json:"shape"`
	Status string  `json:"status"`
	Ratios []Ratio `json:"ratios"`
}

// CompareReport is the result of comparing two reports.
type CompareReport struct {
	SchemaVersion int          `json:"schema_version"`
	Old           Header       `json:"old"`
	New           Header       `json:"new"`
	Rows          []Comparison `json:"rows"`
}

// Compare matches the rows of two reports by (task, mode, batch, shape)
// and gives, per matched row, new/old for every metric both have with a
// non-zero old value. Rows of old come first in their order, then rows only
// in new.
func Compare(old, new *Report) *CompareReport {
	out := &CompareReport{SchemaVersion: SchemaVersion, Old: old.Header, New: new.Header, Rows: []Comparison{}}
	newByKey := map[Key]*Row{}
	for i := range new.Rows {
		newByKey[new.Rows[i].Key()] = &new.Rows[i]
	}
	seen := map[Key]bool{}
	for i := range old.Rows {
		o := &old.Rows[i]
		k := o.Key()
		if seen[k] {
			continue
		}
		seen[k] = true
		c := Comparison{Task: k.Task, Mode: k.Mode, Batch: k.Batch, Shape: k.Shape, Status: OldOnly, Ratios: []Ratio{}}
		if n, ok := newByKey[k]; ok {
			c.Status = InBoth
			c.Ratios = ratios(o, n)
		}
		out.Rows = append(out.Rows, c)
	}
	for i := range new.Rows {
		k := new.Rows[i].Key()
		if seen[k] {
			continue
		}
		seen[k] = true
		out.Rows = append(out.Rows, Comparison{Task: k.Task, Mode: k.Mode, Batch: k.Batch, Shape: k.Shape, Status: NewOnly, Ratios: []Ratio{}})
	}
	return out
}

func ratios(o, n *Row) []Ratio {
	out := []Ratio{}
	for _, m := range Metrics() {
		ov, ok1 := m.value(o)
		nv, ok2 := m.value(n)
		if !ok1 || !ok2 || ov == 0 {
			continue
		}
		r := Ratio{Metric: m.Name, Old: ov, New: nv, Ratio: nv / ov, Direction: "lower", Verdict: Same}
		if m.HigherIsBetter {
			r.Direction = "higher"
		}
		if nv != ov {
			if (nv > ov) == m.HigherIsBetter {
				r.Verdict = Better
			} else {
				r.Verdict = Worse
			}
		}
		out = append(out, r)
	}
	return out
}

// Table returns the comparison as table cells: one column per metric that
// any row has, each cell "1.05x better" (new/old and what it means), and a
// last column saying which report lacks the row.
func (c *CompareReport) Table() (header []string, cells [][]string) {
	used := map[string]bool{}
	for _, r := range c.Rows {
		for _, q := range r.Ratios {
			used[q.Metric] = true
		}
	}
	var ms []Metric
	header = []string{"task", "mode", "batch", "shape"}
	for _, m := range Metrics() {
		if used[m.Name] {
			ms = append(ms, m)
			dir := "↓"
			if m.HigherIsBetter {
				dir = "↑"
			}
			header = append(header, m.Label+" "+dir)
		}
	}
	header = append(header, "note")
	for _, r := range c.Rows {
		row := []string{r.Task, r.Mode, strconv.Itoa(r.Batch), r.Shape}
		for _, m := range ms {
			cell := "-"
			for _, q := range r.Ratios {
				if q.Metric == m.Name {
					cell = strconv.FormatFloat(q.Ratio, 'f', 3, 64) + "x " + q.Verdict
				}
			}
			row = append(row, cell)
		}
		note := ""
		switch r.Status {
		case OldOnly:
			note = "only in old"
		case NewOnly:
			note = "only in new"
		}
		cells = append(cells, append(row, note))
	}
	return header, cells
}
