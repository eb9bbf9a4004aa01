// Package agent holds the dispatcher's agent-CLI adapters, the harnesses: the
// seam every agent harness comes through
// (docs/requirements.md K14): how to start an interactive session with a
// pre-assigned session id and a boot prompt, and how to resume one. The boot
// prompt is an argv element, not a paste: a harness reads it as its first
// turn. Later events are typed into the session's terminal by the runner.
//
// The argv the-loop builds is fixed by the adapter; an operator's extra
// arguments (Extra) are inserted before the prompt and never widened by
// the-loop.
package agent

import (
	"errors"
	"fmt"
	"os/exec"
	"regexp"
	"slices"
	"strings"
)

// Harness is one agent harness.
type Harness interface {
	// Name is the harness's config name ("claude", …), recorded with the
	// session.
	Name() string
	// Command is the binary to run.
	Command() string
	// Available reports why the binary cannot be run, or nil.
	Available() error
	// Env is extra environment for the session (may be nil).
	Env() map[string]string
	// SpawnArgv is the argv (without the binary) of a new session whose
	// conversation id is sessionID and whose first turn is prompt.
	SpawnArgv(prompt, sessionID string) []string
	// ResumeArgv is the argv that reopens conversation sessionID with
	// prompt as the next turn; ok is false when the harness cannot resume.
	ResumeArgv(prompt, sessionID string) (argv []string, ok bool)
}

// Placeholders in a Command's argument templates.
const (
	PlaceholderPrompt    = "{prompt}"
	PlaceholderSessionID = "{session_id}"
)

// Command is a harness described by argument templates: each element of
// Spawn and Resume is copied with {session_id} and {prompt} replaced (an
// element that is exactly "{prompt}" becomes the prompt, whatever it holds).
// Extra is inserted just before the element holding {prompt}.
type Command struct {
	HarnessName string
	Binary      string
	Spawn       []string
	// Resume is nil for a harness without interactive resume.
	Resume []string
	Extra  []string
	// Environment is added to the session's environment.
	Environment map[string]string
}

// Claude is Claude Code: `claude --session-id <id> <extra…> <prompt>`,
// resumed with `claude --resume <id> <extra…> <prompt>`.
func Claude(extra ...string) *Command {
	return &Command{
		HarnessName: "claude",
		Binary:      "claude",
		Spawn:       []string{"--session-id", PlaceholderSessionID, PlaceholderPrompt},
		Resume:      []string{"--resume", PlaceholderSessionID, PlaceholderPrompt},
		Extra:       extra,
	}
}

// WithBinary returns c running binary instead (an absolute path, or another
// name on PATH); "" keeps c's.
func (c *Command) WithBinary(binary string) *Command {
	if binary == "" {
		return c
	}
	cp := *c
	cp.Binary = binary
	return &cp
}

// Name implements Harness.
func (c *Command) Name() string { return c.HarnessName }

// Command implements Harness.
func (c *Command) Command() string { return c.Binary }

// Env implements Harness.
func (c *Command) Env() map[string]string { return c.Environment }

// Available implements Harness.
func (c *Command) Available() error {
	if c.Binary == "" {
		return errors.New("harness: no command configured")
	}
	if _, err := exec.LookPath(c.Binary); err != nil {
		return fmt.Errorf("harness %s: %s not found on PATH", c.HarnessName, c.Binary)
	}
	return nil
}

// SpawnArgv implements Harness.
func (c *Command) SpawnArgv(prompt, sessionID string) []string {
	return c.expand(c.Spawn, prompt, sessionID)
}

// ResumeArgv implements Harness.
func (c *Command) ResumeArgv(prompt, sessionID string) ([]string, bool) {
	if c.Resume == nil || !ValidSessionID(sessionID) {
		return nil, false
	}
	return c.expand(c.Resume, prompt, sessionID), true
}

func (c *Command) expand(tmpl []string, prompt, sessionID string) []string {
	out := make([]string, 0, len(tmpl)+len(c.Extra))
	extraDone := false
	for _, a := range tmpl {
		if strings.Contains(a, PlaceholderPrompt) && !extraDone {
			out = append(out, c.Extra...)
			extraDone = true
		}
		if a == PlaceholderPrompt {
			out = append(out, prompt)
			continue
		}
		a = strings.ReplaceAll(a, PlaceholderSessionID, sessionID)
		out = append(out, strings.ReplaceAll(a, PlaceholderPrompt, prompt))
	}
	if !extraDone {
		out = append(out, c.Extra...)
	}
	return slices.Clip(out)
}

var sessionIDPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)

// ValidSessionID reports whether id may be passed to a resume argv
// (docs/requirements.md K12): anything else is never put on a command line.
func ValidSessionID(id string) bool { return sessionIDPattern.MatchString(id) }
