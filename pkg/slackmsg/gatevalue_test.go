package slackmsg

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/the-loop/bus/pkg/catalog"
	"github.com/the-loop/bus/pkg/graph"
	loopv1 "github.com/the-loop/bus/proto/loop/v1"
)

const visit = "requirements-approval.4.1772357400000"

func TestGateValueRoundTrip(t *testing.T) {
	for _, gv := range []GateValue{
		{Ref: "github:octo/repo#15", Visit: visit},
		{Ref: "github:ghe.example.com/octo/my-repo.go#7", Visit: "review.12.1"},
		{Ref: "github:o/r#1", Visit: "a.1.0"},
	} {
		got, err := ParseGateValue(gv.String())
		if err != nil || got != gv {
			t.Errorf("ParseGateValue(%q) = %+v, %v; want %+v", gv.String(), got, err, gv)
		}
		if len(gv.String()) > MaxButtonValue {
			t.Errorf("%q is longer than a button value may be", gv.String())
		}
	}
}

// TestParseGateValueRefuses: a value that claims to be a gate value and is
// not well formed is refused, whatever it holds; free text is told apart.
func TestParseGateValueRefuses(t *testing.T) {
	long := gateValuePrefix + "github:octo/repo#15 " + visit + strings.Repeat("0", MaxGateValue)
	for _, c := range []struct {
		name, value string
		want        error
	}{
		{"free text", "LGTM", ErrNotGateValue},
		{"the legacy fixed text", ApproveValue, ErrNotGateValue},
		{"empty", "", ErrNotGateValue},
		{"prefix without the space", strings.TrimSpace(gateValuePrefix), ErrNotGateValue},
		{"prefix only", gateValuePrefix, ErrBadGateValue},
		{"no visit", gateValuePrefix + "github:octo/repo#15", ErrBadGateValue},
		{"empty visit", gateValuePrefix + "github:octo/repo#15 ", ErrBadGateValue},
		{"three fields", gateValuePrefix + "github:octo/repo#15 " + visit + " extra", ErrBadGateValue},
		{"two spaces", gateValuePrefix + "github:octo/repo#15  " + visit, ErrBadGateValue},
		{"oversized", long, ErrBadGateValue},
		{"ref without scheme", gateValuePrefix + "octo/repo#15 " + visit, ErrBadGateValue},
		{"ref with a newline", gateValuePrefix + "github:octo/repo#15\n " + visit, ErrBadGateValue},
		{"ref with markup", gateValuePrefix + "github:<!channel>#15 " + visit, ErrBadGateValue},
		{"ref too long", gateValuePrefix + "github:" + strings.Repeat("a", maxRef) + " " + visit, ErrBadGateValue},
		{"visit with a leading zero", gateValuePrefix + "github:octo/repo#15 requirements-approval.04.1772357400000", ErrBadGateValue},
		{"visit with a sign", gateValuePrefix + "github:octo/repo#15 requirements-approval.4.-1", ErrBadGateValue},
		{"visit with step 0", gateValuePrefix + "github:octo/repo#15 requirements-approval.0.1", ErrBadGateValue},
		{"visit with an upper-case node", gateValuePrefix + "github:octo/repo#15 Requirements.4.1", ErrBadGateValue},
		{"visit with a huge number", gateValuePrefix + "github:octo/repo#15 review.4.99999999999999999999", ErrBadGateValue},
		{"visit without numbers", gateValuePrefix + "github:octo/repo#15 review", ErrBadGateValue},
		{"invalid UTF-8", gateValuePrefix + "github:octo/repo#15 review.4.\xff", ErrBadGateValue},
	} {
		if _, err := ParseGateValue(c.value); !errors.Is(err, c.want) {
			t.Errorf("%s: ParseGateValue(%q) = %v, want %v", c.name, c.value, err, c.want)
		}
	}
}

func TestLegacyGateValue(t *testing.T) {
	if !LegacyGateValue(ApproveActionID, ApproveValue) || !LegacyGateValue(RequestChangesActionID, RequestChangesValue) {
		t.Error("the fixed texts on their own buttons are legacy values")
	}
	if LegacyGateValue(ApproveActionID, RequestChangesValue) || LegacyGateValue("forged", ApproveValue) ||
		LegacyGateValue(ApproveActionID, GateValue{Ref: "github:o/r#1", Visit: "a.1.0"}.String()) {
		t.Error("only a gate button's own fixed text is a legacy value")
	}
}

func TestButtonValue(t *testing.T) {
	ev := notification(catalog.PhaseApprovalPending, &loopv1.Notification{Text: "x", Url: "https://github.com/octo/repo/issues/15", GateVisit: visit})
	blocks, _ := json.Marshal(Render(ev, Options{GateButtons: true}).Blocks)
	want := GateValue{Ref: ref, Visit: visit}.String()
	for _, id := range []string{ApproveActionID, RequestChangesActionID} {
		if v, ok := ButtonValue(blocks, id); !ok || v != want {
			t.Errorf("ButtonValue(%s) = %q %v, want %q", id, v, ok, want)
		}
	}
	if _, ok := ButtonValue(blocks, "nope"); ok {
		t.Error("found a button that is not there")
	}
	if _, ok := ButtonValue([]byte("not json"), ApproveActionID); ok {
		t.Error("found a button in garbage")
	}
}

// FuzzParseGateValue: the parser of a pressed button's value never panics,
// accepts only what String writes, and accepts nothing longer than
// MaxGateValue.
func FuzzParseGateValue(f *testing.F) {
	f.Add(GateValue{Ref: ref, Visit: visit}.String())
	f.Add(gateValuePrefix + "github:o/r#1 a.1.0")
	f.Add(ApproveValue)
	f.Add(gateValuePrefix)
	f.Fuzz(func(t *testing.T, s string) {
		gv, err := ParseGateValue(s)
		if err != nil {
			if !errors.Is(err, ErrNotGateValue) && !errors.Is(err, ErrBadGateValue) {
				t.Fatalf("unexpected error kind: %v", err)
			}
			return
		}
		if len(s) > MaxGateValue || gv.String() != s {
			t.Fatalf("accepted %q as %+v", s, gv)
		}
		if _, err := graph.ParseVisit(gv.Visit); err != nil {
			t.Fatalf("accepted visit %q: %v", gv.Visit, err)
		}
	})
}
