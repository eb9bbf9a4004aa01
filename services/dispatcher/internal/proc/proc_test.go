package proc

import (
	"context"
	"errors"
	"os"
	"testing"

	"github.com/the-loop/bus/internal/testsupport/standin"
	"github.com/the-loop/bus/internal/testsupport/testkit"
	"github.com/the-loop/bus/internal/testsupport/tmuxtest"
	"github.com/the-loop/bus/services/dispatcher/internal/tmux"
)

func TestMain(m *testing.M) {
	tmuxtest.MaybeRunStandIn()
	os.Exit(m.Run())
}

// The runner's contract is tmux's: spawn refuses a live name, delivery is a
// bracketed paste then a carriage return (the stand-in records exactly the
// text), an exited harness is dead until cleared, kill makes it absent.
func TestSessionLifecycle(t *testing.T) {
	ctx := context.Background()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	s := &Server{}
	t.Cleanup(func() { _ = s.Close() })
	env := map[string]string{tmuxtest.EnvDir: dir}
	const target = "loop-github-octo-repo-1"

	if st := s.Probe(ctx, target); st != tmux.Absent {
		t.Fatalf("before spawn: %s", st)
	}
	if err := s.Deliver(ctx, target, "x"); !errors.Is(err, tmux.ErrMissing) {
		t.Fatalf("deliver to absent: %v", err)
	}
	if err := s.Spawn(ctx, target, t.TempDir(), env, []string{exe, "--session-id", "S1", "boot prompt"}); err != nil {
		t.Fatal(err)
	}
	if st := s.Probe(ctx, target); st != tmux.Live {
		t.Fatalf("after spawn: %s", st)
	}
	if err := s.Spawn(ctx, target, "", env, []string{exe, "--session-id", "S2", "again"}); !errors.Is(err, tmux.ErrOccupied) {
		t.Fatalf("spawn over a live session: %v", err)
	}
	testkit.WaitFor(t, "the boot record", func() bool { b, _ := standin.ReadBoots(dir); return len(b) == 1 })
	for _, p := range []string{"first line\nsecond line", "third; with a semicolon;"} {
		if err := s.Deliver(ctx, target, p); err != nil {
			t.Fatal(err)
		}
	}
	testkit.WaitFor(t, "two inputs", func() bool { in, _ := standin.ReadInputs(dir); return len(in) == 2 })
	in, _ := standin.ReadInputs(dir)
	if in[0].Text != "first line\nsecond line" || in[1].Text != "third; with a semicolon;" || in[0].SessionID != "S1" {
		t.Errorf("inputs = %+v", in)
	}
	boots, _ := standin.ReadBoots(dir)
	if b := boots[0]; b.Mode != "spawn" || b.SessionID != "S1" || b.Prompt != "boot prompt" {
		t.Errorf("boot = %+v", b)
	}
	// The session's environment is exactly what it was given: nothing of
	// the dispatcher's own.
	if len(boots[0].Env) != len(env) || boots[0].Env[tmuxtest.EnvDir] != dir {
		t.Errorf("session environment = %v, want exactly %v", boots[0].Env, env)
	}
	if ok, err := s.Shows(ctx, target, "second line"); !ok || err != nil {
		t.Errorf("Shows(a typed line) = %v, %v", ok, err)
	}
	if ok, _ := s.Shows(ctx, target, "second lin"); ok {
		t.Error("Shows matched part of a line's word")
	}
	if names, _ := s.Sessions(ctx); len(names) != 1 || names[0] != target {
		t.Errorf("sessions = %v", names)
	}
	if err := s.Kill(ctx, target); err != nil {
		t.Fatal(err)
	}
	if st := s.Probe(ctx, target); st != tmux.Absent {
		t.Fatalf("after kill: %s", st)
	}
	if err := s.Kill(ctx, target); err != nil {
		t.Errorf("killing an absent session: %v", err)
	}
}

// A harness that exits leaves a dead session (tmux's remain-on-exit), which
// a spawn clears.
func TestExitedHarnessIsDead(t *testing.T) {
	ctx := context.Background()
	s := &Server{}
	t.Cleanup(func() { _ = s.Close() })
	if err := s.Spawn(ctx, "t", "", nil, []string{"true"}); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, "the harness to exit", func() bool { return s.Probe(ctx, "t") == tmux.Dead })
	if err := s.Deliver(ctx, "t", "x"); !errors.Is(err, tmux.ErrMissing) {
		t.Errorf("deliver to dead: %v", err)
	}
	if err := s.Spawn(ctx, "t", "", nil, []string{"sleep", "30"}); err != nil {
		t.Fatalf("spawn over a dead session: %v", err)
	}
	if st := s.Probe(ctx, "t"); st != tmux.Live {
		t.Errorf("respawned: %s", st)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if names, _ := s.Sessions(ctx); len(names) != 0 {
		t.Errorf("after Close: %v", names)
	}
}
