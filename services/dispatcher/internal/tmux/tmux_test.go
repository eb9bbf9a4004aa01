package tmux

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/the-loop/bus/pkg/harness/tmuxtest"
)

func TestTarget(t *testing.T) {
	for ref, want := range map[string]string{
		"github:octo/repo#15":                 "loop-github-octo-repo-15",
		"github:octo/foo.js#15":               "loop-github-octo-foo_js-15",
		"github:ghe.corp.example/octo/repo#7": "loop-github-ghe_corp_example-octo-repo-7",
		"github:o w/r$x#1":                    "loop-github-o-w-r-x-1",
		"github:ghe.corp.example:8443/o/r#2":  "loop-github-ghe_corp_example-8443-o-r-2",
	} {
		if got := Target(ref); got != want {
			t.Errorf("Target(%q) = %q, want %q", ref, got, want)
		}
	}
}

// TestProbeSpawnKill runs the protocol against a private tmux server: a
// prefix never matches another session, a live name is never replaced, a
// dead pane is cleared by a spawn.
func TestProbeSpawnKill(t *testing.T) {
	s := &Server{Socket: tmuxtest.Socket(t), RemainOnExit: true}
	ctx := context.Background()
	if st := s.Probe(ctx, "loop-x-1"); st != Absent {
		t.Fatalf("no server: %v, want absent", st)
	}
	if err := s.Spawn(ctx, "loop-x-10", t.TempDir(), map[string]string{"A": "1"}, []string{"sleep", "600"}); err != nil {
		t.Fatal(err)
	}
	if st := s.Probe(ctx, "loop-x-1"); st != Absent {
		t.Errorf("loop-x-1 probed %v: a prefix of loop-x-10 matched", st)
	}
	if st := s.Probe(ctx, "loop-x-10"); st != Live {
		t.Errorf("loop-x-10: %v, want live", st)
	}
	if err := s.Spawn(ctx, "loop-x-10", "", nil, []string{"sleep", "600"}); !errors.Is(err, ErrOccupied) {
		t.Errorf("spawn over a live session: %v, want ErrOccupied", err)
	}
	if err := s.Spawn(ctx, "loop-x-2", "", nil, []string{"true"}); err != nil {
		t.Fatal(err)
	}
	deadline := 0
	for s.Probe(ctx, "loop-x-2") != Dead && deadline < 500 {
		_ = exec.Command("sleep", "0.02").Run()
		deadline++
	}
	if st := s.Probe(ctx, "loop-x-2"); st != Dead {
		t.Fatalf("exited harness with remain-on-exit: %v, want dead", st)
	}
	if err := s.Deliver(ctx, "loop-x-2", "hi"); !errors.Is(err, ErrMissing) {
		t.Errorf("deliver to a dead pane: %v, want ErrMissing", err)
	}
	if err := s.Spawn(ctx, "loop-x-2", "", nil, []string{"sleep", "600"}); err != nil {
		t.Errorf("spawn over a dead pane: %v", err)
	}
	if err := s.Kill(ctx, "loop-x-10"); err != nil {
		t.Fatal(err)
	}
	if err := s.Kill(ctx, "loop-x-10"); err != nil {
		t.Errorf("killing an absent session: %v", err)
	}
	names, err := s.Sessions(ctx)
	if err != nil || len(names) != 1 || names[0] != "loop-x-2" {
		t.Errorf("Sessions = %v, %v", names, err)
	}
}

// TestArgumentsEndingInSemicolon: tmux reads an argument ending in ';' as a
// command separator; a prompt ending in one must still arrive whole.
func TestArgumentsEndingInSemicolon(t *testing.T) {
	s := &Server{Socket: tmuxtest.Socket(t), RemainOnExit: true}
	out := filepath.Join(t.TempDir(), "argv")
	ctx := context.Background()
	err := s.Spawn(ctx, "loop-semi-1", "", nil, []string{"sh", "-c", `printf '%s|%s' "$0" "$1" > ` + out + `.tmp && mv ` + out + `.tmp ` + out + ` && sleep 600`, `end;`, `x\;`})
	if err != nil {
		t.Fatal(err)
	}
	var got []byte
	for i := 0; i < 1000; i++ {
		if got, err = os.ReadFile(out); err == nil {
			break
		}
		_ = exec.Command("sleep", "0.02").Run()
	}
	if string(got) != `end;|x\;` {
		t.Errorf("argv arrived as %q", got)
	}
}

func TestContains(t *testing.T) {
	const screen = "── typed ──\n- delivery: gh:abc-10\nmore   \n- delivery: slack:C1:1.2 \nend"
	for _, tt := range []struct {
		text string
		want bool
	}{
		{"- delivery: gh:abc-10", true},
		{"- delivery: gh:abc-1", false}, // a prefix of another id
		{"- delivery: slack:C1:1.2", true},
		{"end", true},
		{"more", true},
		{"- delivery: gh:abc", false},
		{"", false},
	} {
		if got := Contains(screen, tt.text); got != tt.want {
			t.Errorf("Contains(%q) = %v, want %v", tt.text, got, tt.want)
		}
	}
}
