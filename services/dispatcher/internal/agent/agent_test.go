package agent

import (
	"slices"
	"testing"
)

func TestClaudeArgv(t *testing.T) {
	h := Claude("--model", "opus")
	if got, want := h.SpawnArgv("do it", "id-1"), []string{"--session-id", "id-1", "--model", "opus", "do it"}; !slices.Equal(got, want) {
		t.Errorf("spawn argv = %q, want %q", got, want)
	}
	got, ok := h.ResumeArgv("{prompt} $x", "id-1")
	if want := []string{"--resume", "id-1", "--model", "opus", "{prompt} $x"}; !ok || !slices.Equal(got, want) {
		t.Errorf("resume argv = %q, %v, want %q", got, ok, want)
	}
	if _, ok := h.ResumeArgv("p", "-rf /"); ok {
		t.Error("an unsafe session id reached a resume argv")
	}
	if _, ok := (&Command{HarnessName: "cursor", Binary: "cursor-agent", Spawn: []string{"{prompt}"}}).ResumeArgv("p", "id"); ok {
		t.Error("a harness without resume resumed")
	}
}
