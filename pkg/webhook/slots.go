package webhook

// Slots caps the requests an endpoint handles at once; one over the cap is
// refused at once rather than queued.
type Slots chan struct{}

// NewSlots returns n slots (at least one).
func NewSlots(n int) Slots { return make(Slots, max(n, 1)) }

// Enter takes a slot, or reports that every slot is taken.
func (s Slots) Enter() bool {
	select {
	case s <- struct{}{}:
		return true
	default:
		return false
	}
}

// Leave gives back a slot Enter took.
func (s Slots) Leave() { <-s }

// InUse is the slots taken now.
func (s Slots) InUse() int { return len(s) }
