package catalog

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// YesNo renders a flag the way every catalog table prints it.
func YesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

// WriteTable prints the catalog as an aligned text table: the output of
// `the-loop events --types`.
func WriteTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TYPE\tSUBSCRIBE\tPUBLISH\tRECORDED OFF-LEDGER\tRAISED BY\tDESCRIPTION")
	for _, e := range entries {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", e.Type, YesNo(e.Subscribable), YesNo(e.Publishable), e.Record, e.RaisedBy, e.Description)
	}
	return tw.Flush()
}

// WriteMarkdown prints the catalog as a Markdown table, for
// docs/configuration.md.
func WriteMarkdown(w io.Writer) error {
	var b strings.Builder
	b.WriteString("| type | subscribe | publish | recorded off-ledger | raised by | description |\n")
	b.WriteString("|---|---|---|---|---|---|\n")
	for _, e := range entries {
		fmt.Fprintf(&b, "| `%s` | %s | %s | %s | %s | %s |\n", e.Type, YesNo(e.Subscribable), YesNo(e.Publishable), e.Record, e.RaisedBy, e.Description)
	}
	_, err := io.WriteString(w, b.String())
	return err
}
