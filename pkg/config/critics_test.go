package config

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestCriticKeys: routing.critics is read as written, and an entry that
// could not run as written (or would run something the operator did not
// write) refuses the config, naming the entry.
func TestCriticKeys(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		in    string
		check func(t *testing.T, c *Config)
		errs  []string
	}{
		{name: "a command and a built-in harness", in: "routing:\n  critics:\n" +
			"    - {name: aider-review, harness: aider, model: gpt-5, command: aider, args: [--message-file, \"{promptFile}\", --model, \"{model}\"], timeout: 90s}\n" +
			"    - {name: cursor-gpt, harness: cursor, model: gpt-5.5, enabled: false}\n",
			check: func(t *testing.T, c *Config) {
				a, ok := c.Routing.Critic("aider-review")
				if !ok || a.Timeout != 90*time.Second || !a.Enabled || a.OutputFormat() != CriticOutputText ||
					!slices.Equal(a.Argv(), []string{"aider", "--message-file", "{promptFile}", "--model", "{model}"}) {
					t.Errorf("aider-review = %+v, argv %q", a, a.Argv())
				}
				cu, ok := c.Routing.Critic("cursor-gpt")
				if !ok || cu.Enabled || cu.Timeout != DefaultCriticTimeout || cu.OutputFormat() != CriticOutputJSON ||
					!slices.Equal(cu.Argv(), []string{"cursor-agent", "-p", "{prompt}", "--output-format", "json", "-m", "{model}"}) {
					t.Errorf("cursor-gpt = %+v, argv %q", cu, cu.Argv())
				}
				if _, ok := c.Routing.Critic("nobody"); ok {
					t.Error("a critic nobody configured was found")
				}
			}},
		{name: "none by default", in: "routing: {}\n", check: func(t *testing.T, c *Config) {
			if len(c.Routing.Critics) != 0 {
				t.Errorf("critics = %+v", c.Routing.Critics)
			}
		}},
		{name: "no command and no known harness", in: "routing:\n  critics: [{name: x, harness: aider}]\n",
			errs: []string{"routing.critics[0] (line 3): critic x: set command (and args), or a harness whose invocation the-loop knows (claude, cursor)"}},
		{name: "nothing handed over", in: "routing:\n  critics: [{name: x, command: review, args: [--all]}]\n",
			errs: []string{"its args hold neither {prompt} nor {promptFile}"}},
		{name: "an unknown placeholder", in: "routing:\n  critics: [{name: x, command: review, args: [\"{prompt}\", \"{secret}\"]}]\n",
			errs: []string{"unknown placeholder {secret}"}},
		{name: "a command line as the command", in: "routing:\n  critics: [{name: x, command: \"sh -c {prompt}\", args: [\"{prompt}\"]}]\n",
			errs: []string{"is one executable's name or path"}},
		{name: "a bad name", in: "routing:\n  critics: [{name: \"Bad Name\", harness: claude}]\n", errs: []string{`name "Bad Name"`}},
		{name: "two of one name", in: "routing:\n  critics: [{name: x, harness: claude}, {name: x, harness: cursor}]\n",
			errs: []string{`routing.critics[1].name (line 3): "x" names another critic already`}},
		{name: "a bad timeout", in: "routing:\n  critics: [{name: x, harness: claude, timeout: 3h}]\n", errs: []string{"want more than 0 and at most 2h0m0s"}},
		{name: "an unknown key", in: "routing:\n  critics: [{name: x, harness: claude, env: {A: b}}]\n", errs: []string{"routing.critics[0].env (line 3): unknown key"}},
		{name: "not a list", in: "routing:\n  critics: {x: y}\n", errs: []string{"routing.critics (line 3): want a list of critics"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cfg, _, err := Parse([]byte("version: 0.7.0\n" + tt.in))
			for _, e := range tt.errs {
				if err == nil || !strings.Contains(err.Error(), e) || !errors.Is(err, ErrUnknownKey) && !errors.Is(err, ErrInvalid) {
					t.Errorf("error %v, want it to contain %q", err, e)
				}
			}
			if len(tt.errs) > 0 {
				return
			}
			if err != nil {
				t.Fatalf("refused: %v", err)
			}
			tt.check(t, cfg)
		})
	}
	ref := ReferenceMarkdown()
	for _, k := range []string{"routing.critics", "routing.critics[].command", "routing.critics[].args", "routing.critics[].timeout"} {
		if strings.Count(ref, "| `"+k+"` |") != 1 {
			t.Errorf("the reference lists %s other than once", k)
		}
	}
}
