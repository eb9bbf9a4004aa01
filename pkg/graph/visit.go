package graph

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// A Visit names one stay of a work item at a node: the node, the position of
// its entry in State.History (1-based) and the entry's time in Unix
// milliseconds. It changes every time the work item arrives at a node — a
// gate entered again after changes were requested is a new visit, and so is
// the same gate of a graph started again — and stays the same for as long as
// the work item waits there, whatever comments the gate reads meanwhile
// (State.Version, which counts a gate's wait reasons too, would not).
//
// Its text, "<node>.<step>.<millis>", travels in a Slack button's value, the
// gate.feedback event and the signed ledger envelope, so that an answer given
// on a button is applied only to the visit the button was drawn for
// (docs/decisions/030-gate-visits.md). The text is canonical: one visit has
// one spelling, so visits compare as strings.
type Visit struct {
	Node string
	// Step is the entry's index in History, from 1.
	Step int
	// EnteredMillis is the entry's time, Unix milliseconds; 0 for a zero time.
	EnteredMillis int64
}

// MaxVisitLen bounds a visit's text; ParseVisit refuses anything longer
// before looking at it.
const MaxVisitLen = 160

// ErrBadVisit: the text is not a visit this package wrote.
var ErrBadVisit = errors.New("invalid gate visit")

// String is the visit's canonical text.
func (v Visit) String() string {
	return v.Node + "." + strconv.Itoa(v.Step) + "." + strconv.FormatInt(v.EnteredMillis, 10)
}

// Before reports whether v began before o: the earlier entry time, or at the
// same millisecond the earlier step.
func (v Visit) Before(o Visit) bool {
	if v.EnteredMillis != o.EnteredMillis {
		return v.EnteredMillis < o.EnteredMillis
	}
	return v.Step < o.Step
}

// ParseVisit reads a visit's text. It is strict — bounded length, a node
// name as graphs spell them, decimal numbers without sign or leading zeros —
// because the text comes back from outside (a button's value) and must be
// the one spelling String writes.
func ParseVisit(s string) (Visit, error) {
	if len(s) == 0 || len(s) > MaxVisitLen {
		return Visit{}, fmt.Errorf("%w: %d bytes", ErrBadVisit, len(s))
	}
	rest, millis, ok := cutLast(s)
	if !ok {
		return Visit{}, fmt.Errorf("%w: no entry time", ErrBadVisit)
	}
	node, step, ok := cutLast(rest)
	if !ok {
		return Visit{}, fmt.Errorf("%w: no step", ErrBadVisit)
	}
	if !nameRE.MatchString(node) {
		return Visit{}, fmt.Errorf("%w: node name", ErrBadVisit)
	}
	n, err1 := canonicalUint(step)
	ms, err2 := canonicalUint(millis)
	if err1 != nil || err2 != nil || n < 1 || n > 1<<31-1 {
		return Visit{}, fmt.Errorf("%w: numbers", ErrBadVisit)
	}
	return Visit{Node: node, Step: int(n), EnteredMillis: int64(ms)}, nil
}

func cutLast(s string) (before, after string, ok bool) {
	i := strings.LastIndexByte(s, '.')
	if i <= 0 || i == len(s)-1 {
		return "", "", false
	}
	return s[:i], s[i+1:], true
}

// canonicalUint parses a decimal number written without sign or leading
// zeros, so that ParseVisit accepts exactly what String writes.
func canonicalUint(s string) (uint64, error) {
	if s == "" || len(s) > 18 || (len(s) > 1 && s[0] == '0') {
		return 0, ErrBadVisit
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, ErrBadVisit
		}
	}
	return strconv.ParseUint(s, 10, 63)
}

// CurrentVisit returns the work item's stay at its current node; ok is false
// when the state has no entry for it (a state not written by Enter).
func (s *State) CurrentVisit() (v Visit, ok bool) {
	if s == nil || len(s.History) == 0 {
		return Visit{}, false
	}
	k := len(s.History) - 1
	last := s.History[k]
	if last.Node != s.Current || last.Skipped {
		return Visit{}, false
	}
	v = Visit{Node: s.Current, Step: k + 1}
	if !last.EnteredAt.IsZero() {
		v.EnteredMillis = max(0, last.EnteredAt.UnixMilli())
	}
	return v, true
}

// GateVisit is the text of the visit of the human gate the work item waits
// at, or "" when it waits at none (judged by the graph when g is known,
// otherwise by the waiting status the graph package sets on entering a gate).
func (s *State) GateVisit(g *Graph) string {
	if s == nil {
		return ""
	}
	at := s.Status == StatusWaiting
	if g != nil {
		at = s.AtHumanGate(g)
	}
	if !at {
		return ""
	}
	v, ok := s.CurrentVisit()
	if !ok {
		return ""
	}
	return v.String()
}
