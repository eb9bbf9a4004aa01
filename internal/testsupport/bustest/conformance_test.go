package bustest

import (
	"testing"

	"github.com/the-loop/bus/pkg/bus"
)

func TestConformance(t *testing.T) {
	t.Run("inbox", func(t *testing.T) {
		RunConformance(t, ConformanceOptions{Stream: bus.StreamInbox, Service: "ledger-writer"})
	})
	t.Run("events", func(t *testing.T) {
		RunConformance(t, ConformanceOptions{Stream: bus.StreamEvents, Service: "dispatcher"})
	})
}
