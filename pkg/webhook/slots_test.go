package webhook

import "testing"

// TestSlots: n requests enter, one more is refused at once, and a slot that
// is left can be taken again.
func TestSlots(t *testing.T) {
	s := NewSlots(2)
	for i := range 2 {
		if !s.Enter() {
			t.Fatalf("two slots, but request %d could not enter", i+1)
		}
	}
	if s.Enter() {
		t.Error("a third request entered two slots")
	}
	if s.InUse() != 2 {
		t.Errorf("in use %d, want 2", s.InUse())
	}
	s.Leave()
	if !s.Enter() {
		t.Error("a slot left could not be taken again")
	}
	if !NewSlots(0).Enter() {
		t.Error("NewSlots(0) has no slot; want at least one")
	}
}
