package config

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/the-loop/bus/pkg/catalog"
)

func addSeeds(f *testing.F) {
	f.Helper()
	files, _ := filepath.Glob(filepath.Join("testdata", "*.yaml"))
	for _, p := range files {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	for _, s := range []string{
		"", "~", "[]", "- a", "version: 0.6.0", "version: [1]", "a: &x {b: *x}",
		"channels: {slack: {events: &e [a], subscribe: *e, authorizedUsers: [U1, [x], '', U1]}}",
		"routing: {authorizedUsers: [alice, {github: bob, slack: U1}, {slack: U1}, 5, ~]}",
		"channels:\n  slack:\n    authorizedUsers: U1\n",
		"channels: {slack: {read: {mode: [x], intervalSeconds: 1e3}, maxChars: -1, verbosity: {}}}",
		"version: 0.7.0\n---\nx: 1\n",
		"# c\nchannels: # d\n  slack: # e\n    events: [] # f\n# g\n",
		"polling: {enabled: &r yes, sources: [{provider: github, repos: [a/b], label: *r}, {provider: ~}, 7]}",
		"webhooks: {ghWebhook: {enabled: [x], host: [x], port: {}}}",
		"service: {enabled: ~, port: 1}\nrouting: {workspace: {root: [1]}, harnessTrust: 3}",
		"integrations: {github: {api: {tokenEnv: [LOOP_X, '', Y]}}}\nchannels: {slack: {botTokenEnv: {a: b}}}",
	} {
		f.Add([]byte(s))
	}
}

// FuzzLoad: the loader never panics, and whatever it accepts holds the
// invariants every reader relies on.
func FuzzLoad(f *testing.F) {
	addSeeds(f)
	f.Fuzz(func(t *testing.T, src []byte) {
		cfg, _, err := Parse(src)
		if err != nil {
			if cfg != nil {
				t.Fatal("config returned with an error")
			}
			var ke *KeyError
			if err.Error() == "" || (!errors.As(err, &ke) && !bytes.Contains([]byte(err.Error()), []byte("parse YAML"))) {
				t.Fatalf("unexplained error: %v", err)
			}
			return
		}
		s := cfg.Channels.Slack
		switch {
		case cfg.Channels.Ledger != LedgerGitHub:
			t.Fatalf("ledger %q accepted", cfg.Channels.Ledger)
		case s.Read.Mode != ReadPoll && s.Read.Mode != ReadSocket && s.Read.Mode != ReadEvents && s.Read.Mode != ReadOff:
			t.Fatalf("read mode %q", s.Read.Mode)
		case s.Verbosity != VerbosityQuiet && s.Verbosity != VerbosityNormal && s.Verbosity != VerbosityVerbose:
			t.Fatalf("verbosity %q", s.Verbosity)
		case s.Read.IntervalSeconds < MinReadInterval || s.MaxChars < 1 || s.MaxChars > MaxMaxChars:
			t.Fatalf("out of range: %+v", s)
		case cfg.Routing.AuthorizedUsers == nil:
			t.Fatal("nil directory")
		}
		for _, p := range s.Publish {
			if catalog.Known(p) && !catalog.Publishable(p) {
				t.Fatalf("unpublishable grant %q kept", p)
			}
		}
		for _, p := range cfg.Routing.AuthorizedUsers.People() {
			if len(p.IDs()) == 0 {
				t.Fatalf("entry without ids: %+v", p)
			}
		}
	})
}

// FuzzMigrate: migrate never panics, and migrate∘migrate == migrate whenever
// the first run succeeds.
func FuzzMigrate(f *testing.F) {
	addSeeds(f)
	f.Fuzz(func(t *testing.T, src []byte) {
		out, rep, err := Migrate(src)
		if err != nil {
			return
		}
		if !rep.Changed() && !bytes.Equal(out, src) {
			t.Fatal("unchanged report but different bytes")
		}
		again, rep2, err := Migrate(out)
		if err != nil {
			t.Fatalf("second run failed: %v\n%s", err, out)
		}
		if rep2.Changed() || !bytes.Equal(again, out) {
			t.Fatalf("second run changed something: %+v\n--- first\n%s\n--- second\n%s", rep2, out, again)
		}
		if _, _, err := Parse(out); errors.Is(err, ErrRemovedKey) {
			t.Fatalf("migrated output still has a removed key: %v\n%s", err, out)
		}
	})
}
