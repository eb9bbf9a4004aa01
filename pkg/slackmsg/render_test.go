package slackmsg

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/the-loop/bus/pkg/catalog"
	loopv1 "github.com/the-loop/bus/proto/loop/v1"
)

// update rewrites the golden files: UPDATE=1 go test ./pkg/slackmsg/.
var update = os.Getenv("UPDATE") != ""

var verbosities = []Verbosity{Quiet, Normal, Verbose}

type goldenCase struct {
	file string
	ev   *loopv1.Event
	opts Options
}

func goldenCases() []goldenCase {
	var cs []goldenCase
	for _, f := range fixtures() {
		for _, v := range verbosities {
			cs = append(cs, goldenCase{f.name + "." + string(v) + ".json", f.ev, Options{Verbosity: v, MaxChars: 1200}})
			if ApprovalShaped(catalog.Type(f.ev.GetType())) {
				cs = append(cs, goldenCase{f.name + "." + string(v) + ".buttons.json", f.ev,
					Options{Verbosity: v, MaxChars: 1200, GateButtons: true}})
			}
		}
	}
	return cs
}

func marshal(t *testing.T, m Message) []byte {
	t.Helper()
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(m); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// TestGolden pins the Block Kit JSON of every catalog type (plus the
// record-failed notice, a custom type and hostile text) at every verbosity,
// with and without the gate buttons, and checks each against Block Kit's
// limits and our escaping rules.
func TestGolden(t *testing.T) {
	for _, c := range goldenCases() {
		t.Run(c.file, func(t *testing.T) {
			got := marshal(t, Render(c.ev, c.opts))
			if err := CheckPayload(got); err != nil {
				t.Errorf("rendered message fails the check:\n%v", err)
			}
			path := filepath.Join("testdata", c.file)
			if update {
				if err := os.WriteFile(path, got, 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (UPDATE=1 writes it)", err)
			}
			if diff := cmp.Diff(string(want), string(got)); diff != "" {
				t.Errorf("%s differs (-want +got; UPDATE=1 rewrites):\n%s", path, diff)
			}
		})
	}
}

// TestGoldenFilesPassCheck runs the validator over the files on disk, so a
// golden rewritten by hand or by UPDATE=1 cannot break the limits unseen, and
// refuses a golden no case produces.
func TestGoldenFilesPassCheck(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "*.json"))
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, c := range goldenCases() {
		want = append(want, c.file)
	}
	if len(files) == 0 {
		t.Fatal("no golden files (UPDATE=1 writes them)")
	}
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := CheckPayload(raw); err != nil {
			t.Errorf("%s:\n%v", f, err)
		}
		if !slices.Contains(want, filepath.Base(f)) {
			t.Errorf("%s: no test case produces it; delete it", f)
		}
	}
}

// TestEveryTypeHasAGolden keeps the fixtures in step with the catalog.
func TestEveryTypeHasAGolden(t *testing.T) {
	have := map[string]bool{}
	for _, f := range fixtures() {
		have[f.ev.GetType()] = true
	}
	for _, ty := range append(catalog.Types(), catalog.RecordFailed, catalog.GatePaused) {
		if !have[string(ty)] {
			t.Errorf("no golden fixture for %s", ty)
		}
	}
}

func blockJSON(t *testing.T, m Message) []string {
	t.Helper()
	var out []string
	for _, b := range m.Blocks {
		raw, err := json.Marshal(b)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, string(raw))
	}
	return out
}

// isSubsequence reports whether every element of a appears in b, in order.
func isSubsequence(a, b []string) bool {
	i := 0
	for _, x := range b {
		if i < len(a) && a[i] == x {
			i++
		}
	}
	return i == len(a)
}

// TestVerbosityStrictSupersets: what quiet shows, normal shows too, and what
// normal shows, verbose shows too (R4.2), for blocks and fallback text; and
// each level adds something when the event has something to add.
func TestVerbosityStrictSupersets(t *testing.T) {
	for _, f := range fixtures() {
		for _, buttons := range []bool{false, true} {
			var prevBlocks []string
			prevText := ""
			for i, v := range verbosities {
				m := Render(f.ev, Options{Verbosity: v, GateButtons: buttons})
				bs := blockJSON(t, m)
				if i > 0 {
					if !isSubsequence(prevBlocks, bs) {
						t.Errorf("%s: %s blocks are not a superset of %s's", f.name, v, verbosities[i-1])
					}
					if !strings.HasPrefix(m.Text, strings.TrimSuffix(prevText, ellipsis)) {
						t.Errorf("%s: %s text does not extend %s's:\n%q\n%q", f.name, v, verbosities[i-1], prevText, m.Text)
					}
					if len(bs) <= len(prevBlocks) && (v == Verbose || hasText(t, f.ev)) {
						t.Errorf("%s: %s adds nothing to %s", f.name, v, verbosities[i-1])
					}
				}
				prevBlocks, prevText = bs, m.Text
			}
		}
	}
}

func hasText(t *testing.T, ev *loopv1.Event) bool {
	m := Render(ev, Options{Verbosity: Normal})
	for _, b := range blockJSON(t, m) {
		if strings.Contains(b, `"the-loop.text"`) || strings.Contains(b, `"the-loop.excerpt"`) {
			return true
		}
	}
	return false
}

// TestGateButtons: Approved / Request changes appear exactly on the three
// approval-shaped types, only when the caller allows them and the
// notification names its gate visit (R4.3), and both carry the value that
// names the work item and that visit.
func TestGateButtons(t *testing.T) {
	for _, f := range fixtures() {
		for _, allowed := range []bool{false, true} {
			m := Render(f.ev, Options{GateButtons: allowed})
			raw := marshal(t, m)
			has := bytes.Contains(raw, []byte(ApproveActionID)) || bytes.Contains(raw, []byte(RequestChangesActionID))
			visit := f.ev.GetNotification().GetGateVisit()
			want := allowed && ApprovalShaped(catalog.Type(f.ev.GetType())) && visit != ""
			if has != want {
				t.Errorf("%s (allowed=%v): gate buttons present = %v, want %v", f.name, allowed, has, want)
			}
			if !want {
				continue
			}
			blocks, _ := json.Marshal(m.Blocks)
			wantValue := GateValue{Ref: f.ev.GetSubject(), Visit: visit}.String()
			for _, id := range []string{ApproveActionID, RequestChangesActionID} {
				if v, ok := ButtonValue(blocks, id); !ok || v != wantValue {
					t.Errorf("%s: %s value = %q, want %q", f.name, id, v, wantValue)
				}
			}
			if !bytes.Contains(raw, []byte(`"text": "`+ApproveText+`"`)) || bytes.Contains(raw, []byte(`"value": "`+ApproveValue+`"`)) {
				t.Errorf("%s: gate buttons lack their label or still carry the fixed value:\n%s", f.name, raw)
			}
		}
	}
	// A gate notification that names no visit gets no buttons: a press
	// could not say which visit it answers.
	ev := notification(catalog.PhaseApprovalPending, &loopv1.Notification{Text: "x", Node: "requirements-approval"})
	if raw := marshal(t, Render(ev, Options{GateButtons: true})); bytes.Contains(raw, []byte(ApproveActionID)) {
		t.Errorf("buttons without a visit:\n%s", raw)
	}
}

// classifyFloor is the gate's deterministic classify-feedback floor, as
// docs/requirements.md K20 specifies it, for one comment.
func classifyFloor(body string) string {
	b := strings.ToLower(body)
	for _, s := range []string{"changes requested", "request changes", "please change", "rejected"} {
		if strings.Contains(b, s) {
			return "changes-requested"
		}
	}
	for _, s := range []string{"approved", "lgtm", "looks good", "ship it"} {
		if strings.Contains(b, s) {
			if strings.Contains(b, "but") || strings.Contains(b, "nit") {
				return "approved-with-comments"
			}
			return "approved"
		}
	}
	return "wait"
}

// TestGateTextsClassify: whichever the relay carries — label or value — the
// gate reads a press as the verdict the button shows (decision 014).
func TestGateTextsClassify(t *testing.T) {
	for _, c := range []struct{ text, want string }{
		{ApproveText, "approved"},
		{ApproveValue, "approved"},
		{RequestChangesText, "changes-requested"},
		{RequestChangesValue, "changes-requested"},
		// The pitfall the constants avoid: "Approve" leaves the gate waiting.
		{"Approve", "wait"},
	} {
		if got := classifyFloor(c.text); got != c.want {
			t.Errorf("classify(%q) = %s, want %s", c.text, got, c.want)
		}
	}
}

func TestMetadataCarriesOnlyIDs(t *testing.T) {
	for _, f := range fixtures() {
		m := Render(f.ev, Options{Verbosity: Verbose})
		id, ok := EventID(m.Metadata)
		if !ok || id != f.ev.GetId() {
			t.Errorf("%s: EventID = %q %v", f.name, id, ok)
		}
		if len(m.Metadata.EventPayload) != 3 {
			t.Errorf("%s: metadata payload %v: ids and type only", f.name, m.Metadata.EventPayload)
		}
	}
	if _, ok := EventID(Render(fixtures()[0].ev, Options{}).Metadata); !ok {
		t.Fatal("no id")
	}
	md := Render(fixtures()[0].ev, Options{}).Metadata
	md.EventType = "someone_else"
	if _, ok := EventID(md); ok {
		t.Error("EventID accepted another app's metadata")
	}
}

// TestKickoffAnswerNamesTheNewIssue: the work-item.create fan-out renders
// the new issue (from the ledger ref) and links to it (R6.5).
func TestKickoffAnswerNamesTheNewIssue(t *testing.T) {
	var ev *loopv1.Event
	for _, f := range fixtures() {
		if f.name == "work-item.create" {
			ev = f.ev
		}
	}
	raw := string(marshal(t, Render(ev, Options{Verbosity: Quiet})))
	for _, want := range []string{"Work item created · octo/repo#42", `"url": "https://github.com/octo/repo/issues/42"`, "Open issue"} {
		if !strings.Contains(raw, want) {
			t.Errorf("kickoff answer lacks %q:\n%s", want, raw)
		}
	}
}

func TestUnsafeURLsNeverBecomeButtons(t *testing.T) {
	ev := notification(catalog.DecisionPending, &loopv1.Notification{Text: "x", Url: "javascript:alert(1)"})
	if raw := marshal(t, Render(ev, Options{})); bytes.Contains(raw, []byte("javascript")) {
		t.Errorf("unsafe URL rendered:\n%s", raw)
	}
}
