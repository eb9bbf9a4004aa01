package control

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestCommands(t *testing.T) {
	t.Parallel()
	want := []Command{Start, Stop, Pause, Resume, Execute, Contribute, Cleanup, Do, Adopt, End}
	if diff := cmp.Diff(want, Commands()); diff != "" {
		t.Errorf("Commands() order (-want +got):\n%s", diff)
	}
}

func TestCommandClasses(t *testing.T) {
	t.Parallel()
	tests := []struct {
		command Command
		keyword string
		classes string
	}{
		{Start, "the-loop start", "arming|spawning"},
		{Stop, "the-loop stop", "disarming"},
		{Pause, "the-loop pause", "disarming"},
		{Resume, "the-loop resume", "arming"},
		{Execute, "the-loop execute", "graph"},
		{Contribute, "the-loop contribute", "arming|spawning"},
		{Cleanup, "the-loop cleanup", "disarming|teardown"},
		{Do, "the-loop do", "arming|spawning"},
		{Adopt, "the-loop adopt", "arming"},
		{End, "the-loop end", "arming|spawning|teardown"},
		{Command("review"), "", ""},
		{Command(""), "", ""},
	}
	for _, tt := range tests {
		t.Run(string(tt.command), func(t *testing.T) {
			t.Parallel()
			if got := tt.command.DefaultKeyword(); got != tt.keyword {
				t.Errorf("DefaultKeyword() = %q, want %q", got, tt.keyword)
			}
			if got := tt.command.Classes().String(); got != tt.classes {
				t.Errorf("Classes() = %q, want %q", got, tt.classes)
			}
			if got, want := tt.command.Valid(), tt.keyword != ""; got != want {
				t.Errorf("Valid() = %v, want %v", got, want)
			}
		})
	}
}

// TestClassSets pins the sets the dispatcher branches on
// (docs/requirements.md K7).
func TestClassSets(t *testing.T) {
	t.Parallel()
	members := func(cl Class) []Command {
		var out []Command
		for _, c := range Commands() {
			if c.Is(cl) {
				out = append(out, c)
			}
		}
		return out
	}
	tests := []struct {
		class Class
		want  []Command
	}{
		{Arming, []Command{Start, Resume, Contribute, Do, Adopt, End}},
		{Spawning, []Command{Start, Contribute, Do, End}},
		{Disarming, []Command{Stop, Pause, Cleanup}},
		{Graph, []Command{Execute}},
		{Teardown, []Command{Cleanup, End}},
		{Arming | Spawning, []Command{Start, Contribute, Do, End}},
		{0, nil},
	}
	for _, tt := range tests {
		if diff := cmp.Diff(tt.want, members(tt.class)); diff != "" {
			t.Errorf("members of %q (-want +got):\n%s", tt.class, diff)
		}
	}
}
