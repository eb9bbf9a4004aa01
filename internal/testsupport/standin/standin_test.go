package standin

import (
	"bytes"
	"strings"
	"testing"
)

// A paste is the text between the bracketed-paste markers, submitted by the
// carriage return that follows; tmux's CRs inside it come back as newlines,
// and each record is echoed.
func TestRunRecordsPastes(t *testing.T) {
	dir := t.TempDir()
	in := strings.NewReader("\x1b[200~first\rsecond\x1b[201~\r" + "\x1b[200~third; x\x1b[201~\r")
	var out bytes.Buffer
	if err := Run(dir, []string{"--resume", "S9", "--flag", "the boot prompt"}, in, &out); err != nil {
		t.Fatal(err)
	}
	boots, err := ReadBoots(dir)
	if err != nil || len(boots) != 1 || boots[0].Mode != "resume" || boots[0].SessionID != "S9" || boots[0].Prompt != "the boot prompt" {
		t.Fatalf("boots = %+v, %v", boots, err)
	}
	inputs, err := ReadInputs(dir)
	if err != nil {
		t.Fatal(err)
	}
	want := []Input{{SessionID: "S9", Text: "first\nsecond"}, {SessionID: "S9", Text: "third; x"}}
	same := func(a, b Input) bool { return a.SessionID == b.SessionID && a.Text == b.Text && !a.At.IsZero() }
	if len(inputs) != len(want) || !same(inputs[0], want[0]) || !same(inputs[1], want[1]) {
		t.Errorf("inputs = %+v, want %+v", inputs, want)
	}
	for _, s := range []string{"the boot prompt", "first\r\nsecond", "third; x"} {
		if !strings.Contains(out.String(), s) {
			t.Errorf("%q not echoed:\n%q", s, out.String())
		}
	}
	if err := RecordInput(dir, Input{SessionID: "boot:S9", Text: "marked"}); err != nil {
		t.Fatal(err)
	}
	if got, _ := ReadInputs(dir); len(got) != 3 || got[2].Text != "marked" {
		t.Errorf("after RecordInput: %+v", got)
	}
}
