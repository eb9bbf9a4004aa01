package graph

import (
	"errors"
	"testing"
	"time"
)

// TestVisitChangesPerArrival: every arrival at a node is a new visit — the
// same gate entered again after changes were requested, and the same gate of
// a graph started again — while a wait verdict at the gate keeps it.
func TestVisitChangesPerArrival(t *testing.T) {
	g, _ := Builtin(WorkItemGraph)
	at := time.Date(2026, 3, 1, 9, 30, 0, 0, time.UTC)
	st, _, err := New(g, "github:octo/repo#1", at)
	if err != nil {
		t.Fatal(err)
	}
	step := func(o Outcome) {
		t.Helper()
		at = at.Add(time.Minute)
		if _, err := st.Advance(g, o, at); err != nil {
			t.Fatal(err)
		}
	}
	step(OutcomeExecute)
	step(OutcomeDone)
	first := st.GateVisit(g)
	if first == "" {
		t.Fatalf("no visit at %s", st.Current)
	}
	v, err := ParseVisit(first)
	if err != nil || v.Node != "requirements-approval" || v.Step != 3 || v.EnteredMillis != at.UnixMilli() || v.String() != first {
		t.Fatalf("visit %q = %+v, %v", first, v, err)
	}

	// A comment the gate cannot classify changes the version, not the visit.
	before := st.Version
	if _, err := st.Apply(g, GateInput{Comments: []Comment{{Author: "alice", Body: "what about retries?"}},
		Authorized: func(string) bool { return true }, At: at.Add(time.Second)}); err != nil {
		t.Fatal(err)
	}
	if st.Version == before || st.GateVisit(g) != first {
		t.Errorf("a wait verdict: version %d → %d, visit %q → %q", before, st.Version, first, st.GateVisit(g))
	}

	step(OutcomeChangesRequested)
	if got := st.GateVisit(g); got != "" {
		t.Errorf("visit %q at the agent node %s", got, st.Current)
	}
	if _, ok := st.CurrentVisit(); !ok {
		t.Error("an agent node has a visit too")
	}
	step(OutcomeDone)
	second := st.GateVisit(g)
	if second == "" || second == first {
		t.Errorf("the gate entered again: visit %q, first %q", second, first)
	}
	v1, _ := ParseVisit(first)
	v2, _ := ParseVisit(second)
	if !v1.Before(v2) || v2.Before(v1) {
		t.Errorf("%q should be before %q", first, second)
	}

	// The same gate of a graph started again, at the same step.
	again, _, _ := New(g, "github:octo/repo#1", at.Add(time.Hour))
	if _, err := again.Advance(g, OutcomeExecute, at.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if _, err := again.Advance(g, OutcomeDone, at.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if got := again.GateVisit(g); got == first || got == "" {
		t.Errorf("a new graph run reuses the visit %q", got)
	}

	// Encoded and decoded, the state names the same visit (KV round trip).
	b, _ := st.Encode()
	back, err := Decode(b)
	if err != nil || back.GateVisit(g) != second {
		t.Errorf("after a round trip: %q, %v", back.GateVisit(g), err)
	}
	// Without the graph, the waiting status stands in.
	if back.GateVisit(nil) != second {
		t.Errorf("GateVisit(nil) = %q", back.GateVisit(nil))
	}
	var none *State
	if none.GateVisit(g) != "" {
		t.Error("a nil state has a visit")
	}
}

func TestParseVisitRefuses(t *testing.T) {
	for _, s := range []string{
		"", "review", "review.1", ".1.2", "review..2", "review.1.", "review.0.5", "review.01.5", "review.1.05",
		"review.+1.5", "review.1.-5", "Review.1.5", "re view.1.5", "review.1.5.6x", "review.1.1234567890123456789",
		"review.99999999999.5", "-review.1.5", string(make([]byte, MaxVisitLen+1)),
	} {
		if v, err := ParseVisit(s); !errors.Is(err, ErrBadVisit) {
			t.Errorf("ParseVisit(%q) = %+v, %v", s, v, err)
		}
	}
	if v, err := ParseVisit("review.1.0"); err != nil || v != (Visit{Node: "review", Step: 1}) {
		t.Errorf("review.1.0 = %+v, %v", v, err)
	}
}

func FuzzParseVisit(f *testing.F) {
	f.Add("requirements-approval.4.1772357400000")
	f.Add("review.1.0")
	f.Fuzz(func(t *testing.T, s string) {
		v, err := ParseVisit(s)
		if err == nil && v.String() != s {
			t.Fatalf("accepted %q as %+v (%q)", s, v, v.String())
		}
	})
}
