package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/the-loop/bus/pkg/config"
)

// TestInitWritesAStarterConfig: the file authorizes the person on GitHub and
// Slack, turns the channel on, loads as the services load it, and the verb
// says what to do next.
func TestInitWritesAStarterConfig(t *testing.T) {
	path := filepath.Join(t.TempDir(), "the-loop.yaml")
	var out, errb bytes.Buffer
	err := dispatch(context.Background(), []string{"init", "--github", "alice", "--name", "Alice A.", "--slack-user", "U0ALICE", "--slack-channel", "C0LOOP", path},
		config.Env{}, &out, &errb)
	if err != nil {
		t.Fatalf("init: %v\n%s", err, errb.String())
	}
	cfg, warnings, err := config.LoadFile(path)
	if err != nil || len(warnings) > 0 {
		t.Fatalf("the written config: %v %v", err, warnings)
	}
	users := cfg.Routing.AuthorizedUsers.People()
	if len(users) != 1 || users[0].GitHub != "alice" || users[0].Slack != "U0ALICE" || users[0].Name != "Alice A." {
		t.Errorf("authorized users %+v", users)
	}
	if !cfg.Channels.Slack.Enabled || cfg.Channels.Slack.Channel != "C0LOOP" {
		t.Errorf("slack %+v, want enabled on C0LOOP", cfg.Channels.Slack)
	}
	for _, want := range []string{"wrote " + path, "LOOP_CONFIG=" + path, "the-loop start", "Slack thread"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the next steps do not say %q:\n%s", want, out.String())
		}
	}
}

// TestInitRefusesToOverwriteOrWriteNonsense: an existing file is kept as it
// is, and values that are not a login or an id are refused before anything
// is written.
func TestInitRefusesToOverwriteOrWriteNonsense(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "the-loop.yaml")
	if err := os.WriteFile(path, []byte("mine\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	err := dispatch(context.Background(), []string{"init", "--github", "alice", path}, config.Env{}, &out, &errb)
	if err == nil || !strings.Contains(err.Error(), "never overwrites") {
		t.Errorf("init over an existing file: %v", err)
	}
	if b, _ := os.ReadFile(path); string(b) != "mine\n" {
		t.Errorf("the existing file became %q", b)
	}
	for _, args := range [][]string{
		{"--github", "alice\nrouting: {}"},
		{"--github", "alice", "--slack-user", "alice"},
		{"--github", "alice", "--slack-channel", "#general"},
	} {
		p := filepath.Join(dir, "new.yaml")
		err := dispatch(context.Background(), append(append([]string{"init"}, args...), p), config.Env{}, &out, &errb)
		if err == nil {
			t.Errorf("init %q: no error", args)
		}
		if _, serr := os.Stat(p); !errors.Is(serr, os.ErrNotExist) {
			t.Errorf("init %q wrote a file", args)
		}
	}
	if err := dispatch(context.Background(), []string{"init"}, config.Env{}, &out, &errb); !errors.Is(err, errUsage) {
		t.Errorf("init without --github: %v, want a usage error", err)
	}
}
