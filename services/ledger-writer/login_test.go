package ledgerwriter

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/the-loop/bus/internal/testsupport/testkit"
	"github.com/the-loop/bus/pkg/config"
	"github.com/the-loop/bus/pkg/service"
)

// watchedConfig is a real config watcher on a file authorizing octocat and,
// when withBot, the ledger's own login (the token's, which the writer learns
// from GET /user) in another case.
func watchedConfig(t *testing.T, withBot bool) (*config.Watcher, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "loop.yaml")
	writeUsers(t, path, withBot)
	w, err := config.NewWatcher(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	return w, path
}

func writeUsers(t *testing.T, path string, withBot bool) {
	t.Helper()
	users := "\n    - {github: octocat, slack: U123, name: Mona Lisa}"
	if withBot {
		users += "\n    - {github: \"" + strings.ToUpper(botLogin) + "\", slack: U0BOT}"
	}
	body := "version: \"0.7.0\"\nrouting:\n  authorizedUsers:" + users + "\n"
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestLedgerLoginInAuthorizedUsersRefused: attack 4. The writer knows its own
// login (GET /user with its token). A config listing it is refused: at start
// the writer does not run (Run returns the reason, nothing is recorded); on a
// reload the edit is refused and the config in force stays.
func TestLedgerLoginInAuthorizedUsersRefused(t *testing.T) {
	t.Parallel()
	t.Run("start", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, testTopology())
		cw, _ := watchedConfig(t, true)
		w := e.startWith("writer", func(d *service.Deps, _ *Config) { d.Config, d.Checks = cw.Current, cw })
		select {
		case <-w.done:
		case <-time.After(60 * time.Second):
			t.Fatal("the writer runs under a config that lists its own login")
		}
		if !errors.Is(w.err, config.ErrLedgerLogin) || !strings.Contains(w.err.Error(), "agents post with its token") {
			t.Fatalf("Run = %v, want the ledger login refused and why", w.err)
		}
		e.publish(gateEv("slack:EvNotRun", "github:"+testRepo+"#1", "LGTM"))
		if e.inboxEmpty() || e.gh.Counts().Writes != 0 {
			t.Error("a refused writer consumed or wrote")
		}
	})
	t.Run("reload", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, testTopology())
		cw, path := watchedConfig(t, false)
		e.startWith("writer", func(d *service.Deps, _ *Config) { d.Config, d.Checks = cw.Current, cw })
		testkit.WaitWithin(t, 30*time.Second, "the writer to learn its login", func() bool {
			return len(e.logs.WithMessage("ledger-writer: the operator config may not list the ledger's own login")) == 1
		})
		good := cw.Current()
		writeUsers(t, path, true)
		if err := cw.Reload(); !errors.Is(err, config.ErrLedgerLogin) {
			t.Fatalf("Reload = %v, want the ledger login refused", err)
		}
		if cw.Current() != good {
			t.Fatal("the refused config is in force")
		}
	})
}
