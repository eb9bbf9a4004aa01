package config

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/the-loop/bus/internal/testsupport/testkit"
)

const (
	slackOff = "version: \"0.7.0\"\nrouting:\n  authorizedUsers: [alice]\n"
	slackOn  = "version: \"0.7.0\"\nrouting:\n  authorizedUsers: [alice, bob]\nchannels:\n  slack:\n    enabled: true\n    channel: C1\n"
	broken   = "version: \"0.7.0\"\nchannels:\n  slack:\n    events: [comment.human]\n"
)

// replace writes body the way editors and kubectl do: a new file renamed
// over the old one, so the watched inode goes away.
func replace(t *testing.T, path, body string) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

func startWatcher(t *testing.T, body string, opts ...WatcherOption) (*Watcher, string, *testkit.SyncBuffer) {
	t.Helper()
	path := writeFile(t, t.TempDir(), "cli-config.yaml", []byte(body))
	logs := &testkit.SyncBuffer{}
	w, err := NewWatcher(path, slog.New(slog.NewTextHandler(logs, nil)), append([]WatcherOption{WithDebounce(10 * time.Millisecond)}, opts...)...)
	if err != nil {
		t.Fatalf("NewWatcher: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run: %v", err)
			}
		case <-time.After(5 * time.Second):
			t.Error("Run did not stop on ctx")
		}
	})
	return w, path, logs
}

func TestWatcherReloadsOnChange(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		write func(t *testing.T, path, body string)
		opts  []WatcherOption
	}{
		{"rename-replace, events only", replace, []WatcherOption{WithPollInterval(0)}},
		{"in-place write, events only", func(t *testing.T, path, body string) {
			if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
				t.Fatal(err)
			}
		}, []WatcherOption{WithPollInterval(0)}},
		{"poll", replace, []WatcherOption{WithPollInterval(20 * time.Millisecond)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			w, path, _ := startWatcher(t, slackOff, tc.opts...)
			updates, cancel := w.Subscribe()
			defer cancel()
			if w.Current().Channels.Slack.Enabled {
				t.Fatal("initial config wrong")
			}
			// Run may not have its watch in place yet, so write again until
			// the change is seen; the content is the same each time.
			deadline := time.After(5 * time.Second)
			var cfg *Config
			for cfg == nil {
				tc.write(t, path, slackOn)
				select {
				case cfg = <-updates:
				case <-time.After(200 * time.Millisecond):
				case <-deadline:
					t.Fatal("no reload after the file changed")
				}
			}
			if !cfg.Channels.Slack.Enabled || cfg.Routing.AuthorizedUsers.Len() != 2 {
				t.Errorf("update is not the new file: %+v", cfg.Channels.Slack)
			}
			if w.Current() != cfg {
				t.Error("Current is not the config just announced")
			}
			if w.Err() != nil {
				t.Errorf("Err = %v", w.Err())
			}
		})
	}
}

func TestWatcherKeepsLastGood(t *testing.T) {
	t.Parallel()
	w, path, logs := startWatcher(t, slackOn, WithPollInterval(20*time.Millisecond))
	good := w.Current()
	updates, cancel := w.Subscribe()
	defer cancel()

	replace(t, path, broken)
	testkit.WaitFor(t, "the broken edit to be refused", func() bool { return w.Err() != nil })
	if !errors.Is(w.Err(), ErrRemovedKey) || !strings.Contains(w.Err().Error(), "the-loop migrate-config") {
		t.Errorf("Err = %v", w.Err())
	}
	if w.Current() != good {
		t.Error("a broken edit replaced the last good config")
	}
	select {
	case cfg := <-updates:
		t.Fatalf("a broken edit was announced: %+v", cfg)
	default:
	}
	testkit.WaitFor(t, "the refusal to be logged", func() bool {
		return strings.Contains(logs.String(), "config change refused; keeping the last good config")
	})

	// The file disappearing is a broken edit too.
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, "the missing file to be reported", func() bool {
		err := w.Err()
		return err != nil && errors.Is(err, os.ErrNotExist)
	})
	if w.Current() != good {
		t.Error("a missing file replaced the last good config")
	}

	replace(t, path, slackOff)
	select {
	case cfg := <-updates:
		if cfg.Channels.Slack.Enabled {
			t.Error("the fixed file was not applied")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no reload after the fix")
	}
	if w.Err() != nil {
		t.Errorf("Err after the fix = %v", w.Err())
	}
}

func TestWatcherReload(t *testing.T) {
	t.Parallel()
	path := writeFile(t, t.TempDir(), "c.yaml", []byte(slackOff))
	w, err := NewWatcher(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte("version: 0.7.0\nwat: 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := w.Reload(); !errors.Is(err, ErrUnknownKey) || !strings.Contains(err.Error(), "wat") {
		t.Errorf("Reload = %v", err)
	}
	if err := os.WriteFile(path, []byte(slackOn), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := w.Reload(); err != nil || !w.Current().Channels.Slack.Enabled {
		t.Errorf("Reload = %v", err)
	}
}

func TestNewWatcherRefusesBadFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if _, err := NewWatcher(filepath.Join(dir, "missing.yaml"), nil); err == nil {
		t.Error("missing file accepted")
	}
	path := writeFile(t, dir, "old.yaml", []byte(broken))
	if _, err := NewWatcher(path, nil); !errors.Is(err, ErrRemovedKey) {
		t.Errorf("NewWatcher(old) = %v", err)
	}
}

// TestLedgerLoginRefused: attack 4. A config listing the ledger's own login
// in routing.authorizedUsers — in any case, as a plain login or inside a
// mapping — is refused: at start AddCheck returns the error (the service
// exits), and on reload the edit is refused, the previous config stays, and
// the refusal is logged with the reason.
func TestLedgerLoginRefused(t *testing.T) {
	t.Parallel()
	const (
		withBot    = "version: \"0.7.0\"\nrouting:\n  authorizedUsers: [alice, Loop-BOT]\n"
		withBotMap = "version: \"0.7.0\"\nrouting:\n  authorizedUsers:\n    - alice\n    - {github: loop-bot, slack: U0BOT}\n"
	)
	for _, body := range []string{withBot, withBotMap} {
		path := writeFile(t, t.TempDir(), "c.yaml", []byte(body))
		w, err := NewWatcher(path, nil)
		if err != nil {
			t.Fatal(err)
		}
		err = w.AddCheck(RefuseLedgerLogin("loop-bot"))
		if !errors.Is(err, ErrLedgerLogin) || !strings.Contains(err.Error(), "agents post with its token") ||
			!strings.Contains(err.Error(), "list people only") {
			t.Errorf("start with %q: AddCheck = %v, want the ledger login refused and why", body, err)
		}
	}

	w, path, logs := startWatcher(t, slackOff, WithPollInterval(20*time.Millisecond))
	if err := w.AddCheck(RefuseLedgerLogin("loop-bot")); err != nil {
		t.Fatalf("a config without the ledger login refused: %v", err)
	}
	var reportsMu sync.Mutex
	var reports []error
	w.OnReload(func(err error) {
		reportsMu.Lock()
		defer reportsMu.Unlock()
		reports = append(reports, err)
	})
	good := w.Current()
	replace(t, path, withBotMap)
	if err := w.Reload(); !errors.Is(err, ErrLedgerLogin) {
		t.Fatalf("Reload = %v, want ErrLedgerLogin", err)
	}
	if w.Current() != good || !errors.Is(w.Err(), ErrLedgerLogin) {
		t.Error("the refused config replaced the previous one")
	}
	if !strings.Contains(logs.String(), "config change refused; keeping the last good config") || !strings.Contains(logs.String(), "agents post with its token") {
		t.Errorf("refusal not logged with its reason: %s", logs.String())
	}
	// The host hears of the refusal (its config.reload_failed record), and
	// of the good edit that follows (config.reloaded).
	replace(t, path, slackOn)
	if err := w.Reload(); err != nil {
		t.Fatalf("Reload of a good edit = %v", err)
	}
	reportsMu.Lock()
	if len(reports) < 2 || !errors.Is(reports[0], ErrLedgerLogin) || reports[len(reports)-1] != nil {
		t.Errorf("reports = %v, want the refusal, then nil", reports)
	}
	for _, err := range reports { // the poll may have seen an edit first
		if err != nil && !errors.Is(err, ErrLedgerLogin) {
			t.Errorf("reports = %v, want only the refusal and nil", reports)
		}
	}
	reportsMu.Unlock()
	// A check with no login known checks nothing.
	if err := RefuseLedgerLogin("")(w.Current()); err != nil {
		t.Errorf("empty login: %v", err)
	}
}

// TestReloadWarnsProcessSettingsWaitForRestart: a reload that changes a key
// which sets a process setting (routing.autoExecuteLabel) is taken, with a
// warning that the setting changes only when the services restart; one
// that leaves those keys alone says nothing of the kind.
func TestReloadWarnsProcessSettingsWaitForRestart(t *testing.T) {
	t.Parallel()
	const base = "version: \"0.7.0\"\nrouting:\n  autoExecuteLabel: go\n"
	w, path, _ := startWatcher(t, base, WithPollInterval(0))
	replace(t, path, base+"  authorizedUsers: [alice]\n")
	if err := w.Reload(); err != nil {
		t.Fatal(err)
	}
	for _, ws := range w.Warnings() {
		if strings.Contains(ws.Message, "restart") {
			t.Errorf("warned of a restart when no setting changed: %s", ws)
		}
	}
	replace(t, path, "version: \"0.7.0\"\nrouting:\n  autoExecuteLabel: run\n")
	if err := w.Reload(); err != nil {
		t.Fatal(err)
	}
	var found bool
	for _, ws := range w.Warnings() {
		found = found || ws.Path == "routing.autoExecuteLabel" && strings.Contains(ws.Message, "when the services restart")
	}
	if !found {
		t.Errorf("no restart warning for routing.autoExecuteLabel: %v", w.Warnings())
	}
}
