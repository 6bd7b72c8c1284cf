package ui

import (
	"encoding/json"
	"io"

	"github.com/olekukonko/tablewriter"
	"github.com/olekukonko/tablewriter/renderer"
	"github.com/olekukonko/tablewriter/tw"
)

// WriteJSON writes v as one JSON document to io.Out: indented on a terminal,
// compact (one line) otherwise.
func (s *IOStreams) WriteJSON(v any) error {
	enc := json.NewEncoder(s.Out)
	enc.SetEscapeHTML(false)
	if s.IsStdoutTTY() {
		enc.SetIndent("", "  ")
	}
	return enc.Encode(v)
}

// NDJSON writes one compact JSON object per line, for streams.
type NDJSON struct{ enc *json.Encoder }

// NewNDJSON returns an NDJSON writer on w.
func NewNDJSON(w io.Writer) *NDJSON {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	return &NDJSON{enc: enc}
}

// Write writes one object.
func (n *NDJSON) Write(v any) error { return n.enc.Encode(v) }

// Table collects rows and renders them with tablewriter: box-drawing borders
// on a terminal, plain ASCII borders otherwise (no ANSI codes either way).
type Table struct {
	w      io.Writer
	tty    bool
	header []string
	rows   [][]string
}

// NewTable starts a table for stdout.
func (s *IOStreams) NewTable(header ...string) *Table {
	return &Table{w: s.Out, tty: s.IsStdoutTTY(), header: header}
}

// Append adds a row.
func (t *Table) Append(cells ...string) { t.rows = append(t.rows, cells) }

// Len returns the number of rows.
func (t *Table) Len() int { return len(t.rows) }

// Render writes the table.
func (t *Table) Render() error {
	style := tw.StyleLight
	if !t.tty {
		style = tw.StyleASCII
	}
	tbl := tablewriter.NewTable(t.w,
		tablewriter.WithRenderer(renderer.NewBlueprint(tw.Rendition{Symbols: tw.NewSymbols(style)})),
		tablewriter.WithHeaderAutoFormat(tw.Off),
		tablewriter.WithHeaderAlignment(tw.AlignLeft),
		tablewriter.WithRowAlignment(tw.AlignLeft),
	)
	tbl.Header(t.header)
	for _, r := range t.rows {
		if err := tbl.Append(r); err != nil {
			return err
		}
	}
	return tbl.Render()
}

// MarkdownTable renders header and rows as a GitHub-flavoured markdown table.
func MarkdownTable(w io.Writer, header []string, rows [][]string) error {
	tbl := tablewriter.NewTable(w,
		tablewriter.WithRenderer(renderer.NewMarkdown()),
		tablewriter.WithHeaderAutoFormat(tw.Off),
	)
	tbl.Header(header)
	for _, r := range rows {
		if err := tbl.Append(r); err != nil {
			return err
		}
	}
	return tbl.Render()
}
