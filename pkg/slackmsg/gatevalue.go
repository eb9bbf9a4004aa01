package slackmsg

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/the-loop/bus/pkg/graph"
)

// A gate button's value names the work item and the gate visit the button
// was drawn for (docs/decisions/030-gate-visits.md):
//
//	the-loop.gate/1 github:octo/repo#15 requirements-approval.4.1767259800000
//
// The verdict is the button's action id; both buttons of one message carry
// the same value. The value comes back from Slack in the press, so
// ingress-slack reads it as untrusted text: ParseGateValue is strict and
// bounded, and a press is applied only when the visit is still the work
// item's current one.
const gateValuePrefix = "the-loop.gate/1 "

// MaxGateValue bounds a gate value; anything longer is refused unread.
const MaxGateValue = 512

// maxRef bounds the work-item ref inside a gate value.
const maxRef = 300

// Errors of ParseGateValue; match with errors.Is.
var (
	// ErrNotGateValue: the value does not claim to be a gate value at all
	// (free text, abuse case 9).
	ErrNotGateValue = errors.New("not a gate button value")
	// ErrBadGateValue: it claims to be one and is not well formed.
	ErrBadGateValue = errors.New("malformed gate button value")
)

// GateValue is what a gate button's value says.
type GateValue struct {
	// Ref is the work item (github:owner/repo#N).
	Ref string
	// Visit is the gate visit's text (graph.Visit).
	Visit string
}

// String is the button value.
func (v GateValue) String() string { return gateValuePrefix + v.Ref + " " + v.Visit }

// ParseGateValue reads a pressed button's value. It never panics and reads
// at most MaxGateValue bytes: ErrNotGateValue for text that does not start
// like a gate value, ErrBadGateValue for one that does but is malformed
// (oversized, a ref with characters no ref has, a visit graph.ParseVisit
// refuses, anything extra).
func ParseGateValue(s string) (GateValue, error) {
	if !strings.HasPrefix(s, gateValuePrefix) {
		return GateValue{}, ErrNotGateValue
	}
	if len(s) > MaxGateValue {
		return GateValue{}, fmt.Errorf("%w: %d bytes", ErrBadGateValue, len(s))
	}
	ref, visit, ok := strings.Cut(s[len(gateValuePrefix):], " ")
	if !ok || strings.Contains(visit, " ") {
		return GateValue{}, fmt.Errorf("%w: want a ref and a visit", ErrBadGateValue)
	}
	if !validRef(ref) {
		return GateValue{}, fmt.Errorf("%w: ref", ErrBadGateValue)
	}
	if _, err := graph.ParseVisit(visit); err != nil {
		return GateValue{}, fmt.Errorf("%w: %w", ErrBadGateValue, err)
	}
	return GateValue{Ref: ref, Visit: visit}, nil
}

// validRef accepts the characters a work-item ref is made of (the scheme,
// host, owner and repository names, '/', '#' and the number) and nothing
// that could split or disguise it.
func validRef(ref string) bool {
	if ref == "" || len(ref) > maxRef || !strings.Contains(ref, ":") {
		return false
	}
	for i := 0; i < len(ref); i++ {
		c := ref[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case strings.IndexByte(":/#._-", c) >= 0:
		default:
			return false
		}
	}
	return true
}

// LegacyGateValue reports whether value is what gate buttons carried before
// they named a visit (the gate's fixed texts). Such a button is on a message
// posted before visits existed, so nothing says which visit it answers; it
// is refused like a button whose gate has moved on.
func LegacyGateValue(actionID, value string) bool {
	return actionID == ApproveActionID && value == ApproveValue ||
		actionID == RequestChangesActionID && value == RequestChangesValue
}

// ButtonValue finds the value of the button actionID in a message's blocks
// as Slack stores them (JSON): what a press on that button sends. ok is
// false when the message has no such button.
func ButtonValue(blocks []byte, actionID string) (value string, ok bool) {
	var bs []struct {
		Type     string `json:"type"`
		Elements []struct {
			Type     string `json:"type"`
			ActionID string `json:"action_id"`
			Value    string `json:"value"`
		} `json:"elements"`
	}
	if json.Unmarshal(blocks, &bs) != nil {
		return "", false
	}
	for _, b := range bs {
		if b.Type != "actions" {
			continue
		}
		for _, e := range b.Elements {
			if e.Type == "button" && e.ActionID == actionID {
				return e.Value, true
			}
		}
	}
	return "", false
}
