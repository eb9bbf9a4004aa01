// Package agent holds the dispatcher's agent-CLI adapters, the harnesses: the
// seam every agent harness comes through (docs/requirements.md K14). A
// harness says how to start an interactive session with a boot prompt and how
// to resume one, which conversation id it can be given, how it loads a plugin
// directory for one session, and which Stop-hook protocol it speaks. Later
// events are typed into the session's terminal by the runner.
//
// Four kinds are built in (ByName): claude (Claude Code), cursor
// (cursor-agent), aider, and generic, any CLI described by argument templates.
// The argv the-loop builds is fixed by the adapter; an operator's extra
// arguments (Extra, routing.harnessArgs) are inserted before the prompt and
// never widened by the-loop.
//
// trust.go answers Claude Code's first-run questions (workspace trust, and the
// bypass-permissions disclaimer when the operator's arguments ask for bypass)
// in its own configuration files before a spawn, so that an unattended
// session starts working instead of waiting on a dialog.
package agent

import (
	"errors"
	"fmt"
	"os/exec"
	"regexp"
	"slices"
	"strings"
)

// Harness is one agent harness, as the dispatcher uses it.
type Harness interface {
	// Name is the harness's config name ("claude", …), recorded with the
	// session: a respawn resumes only a conversation of the same harness.
	Name() string
	// Command is the binary to run.
	Command() string
	// Available reports why the binary cannot be run, or nil.
	Available() error
	// Env is extra environment for the session (may be nil).
	Env() map[string]string
	// SpawnArgv is the argv (without the binary) of a new session whose
	// conversation id is sessionID and whose first turn is prompt. It is
	// nil when the harness would be handed sessionID and sessionID is not
	// ValidSessionID: the caller refuses the spawn.
	SpawnArgv(prompt, sessionID string) []string
	// ResumeArgv is the argv that reopens conversation sessionID with
	// prompt as the next turn; ok is false when the harness cannot resume,
	// or the resume would need sessionID and it is not ValidSessionID.
	ResumeArgv(prompt, sessionID string) (argv []string, ok bool)
	// ChoosesSessionID reports whether the harness picks its own
	// conversation id: SpawnArgv does not hand it sessionID, and the
	// session reports the id it got later (`the-loop sessions register`).
	// Until then the record holds no id and ResumeArgv refuses the empty
	// one, so a respawn starts a fresh conversation.
	ChoosesSessionID() bool
	// BootPromptInArgv reports whether SpawnArgv and ResumeArgv carry the
	// prompt. When false the harness starts without it and the dispatcher
	// types the prompt into the session as its first turn, as it types
	// every later event.
	BootPromptInArgv() bool
	// PluginArgv is the arguments that load the plugin directory dir for
	// this session alone, nil when the harness cannot. They are flags: they
	// go with the extra arguments (Command.WithExtra).
	PluginArgv(dir string) []string
	// HookProtocol is how the harness's Stop hook hands the agent more
	// work: HookClaude, HookCursor, or HookNone when it has no such hook.
	HookProtocol() string
}

// The harness kinds ByName builds.
const (
	KindClaude  = "claude"
	KindCursor  = "cursor"
	KindAider   = "aider"
	KindGeneric = "generic"
)

// Kinds are the harness kinds, in the order they are documented.
func Kinds() []string { return []string{KindClaude, KindCursor, KindAider, KindGeneric} }

// Stop-hook protocols (Harness.HookProtocol).
const (
	// HookClaude: the hook blocks the stop by exiting with code 2, and the
	// agent reads the reason from the hook's standard error.
	HookClaude = "claude"
	// HookCursor: the hook exits 0 after printing
	// {"followup_message": "…"} on its standard output, which the agent
	// takes as its next turn.
	HookCursor = "cursor"
	// HookNone: the harness runs no hooks.
	HookNone = ""
)

// Placeholders in a Command's argument templates.
const (
	PlaceholderPrompt    = "{prompt}"
	PlaceholderSessionID = "{session_id}"
)

// Command is a harness described by argument templates: each element of
// Spawn and Resume is copied with {session_id} and {prompt} replaced (an
// element that is exactly "{prompt}" becomes the prompt, whatever it holds).
// Extra is inserted just before the element holding {prompt}, or at the end
// when there is none. Whether the harness is handed the session id and the
// prompt follows from the templates: see ChoosesSessionID and
// BootPromptInArgv.
type Command struct {
	HarnessName string
	Binary      string
	Spawn       []string
	// Resume is nil for a harness without interactive resume.
	Resume []string
	Extra  []string
	// Environment is added to the session's environment.
	Environment map[string]string
	// PluginFlag is the flag that loads a plugin directory for one
	// session ("" when the harness has none).
	PluginFlag string
	// Hooks is the harness's Stop-hook protocol (HookClaude, …).
	Hooks string
}

// ByName is the harness of kind name, run as binary ("" for the kind's own:
// claude, cursor-agent, aider) with the operator's extra arguments. A generic
// harness needs binary and runs `binary [extra…] PROMPT` without resume; one
// with other templates is built with Generic. It returns the concrete
// *Command so that the caller can add flags (WithExtra, PluginArgv) before
// handing it on as a Harness.
func ByName(name, binary string, extra []string) (*Command, error) {
	var c *Command
	switch name {
	case KindClaude:
		c = Claude(extra...)
	case KindCursor:
		c = Cursor(extra...)
	case KindAider:
		c = Aider(extra...)
	case KindGeneric:
		return Generic(binary, []string{PlaceholderPrompt}, nil, extra)
	default:
		return nil, fmt.Errorf("harness %q is not a harness kind: the kinds are %s", name, strings.Join(Kinds(), ", "))
	}
	return c.WithBinary(binary), nil
}

// Claude is Claude Code: `claude --session-id <id> <extra…> <prompt>`,
// resumed with `claude --resume <id> <extra…> <prompt>`. It loads a plugin
// directory with --plugin-dir and speaks the exit-code-2 hook protocol.
func Claude(extra ...string) *Command {
	return &Command{
		HarnessName: KindClaude,
		Binary:      "claude",
		Spawn:       []string{"--session-id", PlaceholderSessionID, PlaceholderPrompt},
		Resume:      []string{"--resume", PlaceholderSessionID, PlaceholderPrompt},
		Extra:       extra,
		PluginFlag:  "--plugin-dir",
		Hooks:       HookClaude,
	}
}

// Cursor is cursor-agent in its interactive mode: `cursor-agent <extra…>
// <prompt>`. It cannot be handed a chat id; the session registers the one it
// got, and resume is `cursor-agent --resume <chat id> <extra…> <prompt>`. It
// has no plugin flag, and its hooks answer with a followup_message.
func Cursor(extra ...string) *Command {
	return &Command{
		HarnessName: KindCursor,
		Binary:      "cursor-agent",
		Spawn:       []string{PlaceholderPrompt},
		Resume:      []string{"--resume", PlaceholderSessionID, PlaceholderPrompt},
		Extra:       extra,
		Hooks:       HookCursor,
	}
}

// Aider is aider in its interactive mode: `aider <extra…>`, the boot prompt
// typed as the first turn (its --message runs one turn and exits, which ends
// the session). Aider has no conversation ids: resume is `aider
// --restore-chat-history <extra…>`, which reloads the chat history aider keeps
// in its working directory. No plugin flag, no hooks.
func Aider(extra ...string) *Command {
	return &Command{
		HarnessName: KindAider,
		Binary:      "aider",
		Spawn:       []string{},
		Resume:      []string{"--restore-chat-history"},
		Extra:       extra,
	}
}

// Generic is any CLI, described by argument templates with {prompt} and
// {session_id} (see Command): spawn is required, resume nil when the CLI
// cannot resume. A template without {prompt} means the prompt is typed as the
// first turn, so spawn and resume must agree on that. A spawn template
// without {session_id} whose resume has one means the CLI picks its own id
// and the session registers it. No plugin flag, no hooks.
func Generic(binary string, spawn, resume, extra []string) (*Command, error) {
	if strings.TrimSpace(binary) == "" {
		return nil, errors.New("harness generic: no command configured (LOOP_HARNESS_BINARY)")
	}
	if spawn == nil {
		return nil, errors.New("harness generic: no spawn template")
	}
	if resume != nil && mentions(spawn, PlaceholderPrompt) != mentions(resume, PlaceholderPrompt) {
		return nil, fmt.Errorf("harness generic: the spawn and resume templates must both hold %s or both leave it out (the prompt is then typed)", PlaceholderPrompt)
	}
	return &Command{
		HarnessName: KindGeneric,
		Binary:      binary,
		Spawn:       slices.Clone(spawn),
		Resume:      slices.Clone(resume),
		Extra:       extra,
	}, nil
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

// WithExtra returns c with args added in front of its extra arguments: the
// flags the-loop itself passes (PluginArgv) come first, the operator's after.
func (c *Command) WithExtra(args ...string) *Command {
	if len(args) == 0 {
		return c
	}
	cp := *c
	cp.Extra = append(slices.Clip(args), c.Extra...)
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
	if mentions(c.Spawn, PlaceholderSessionID) && !ValidSessionID(sessionID) {
		return nil
	}
	return c.expand(c.Spawn, prompt, sessionID)
}

// ResumeArgv implements Harness.
func (c *Command) ResumeArgv(prompt, sessionID string) ([]string, bool) {
	if c.Resume == nil || mentions(c.Resume, PlaceholderSessionID) && !ValidSessionID(sessionID) {
		return nil, false
	}
	return c.expand(c.Resume, prompt, sessionID), true
}

// ChoosesSessionID implements Harness: the spawn template does not hand the
// harness an id, and the resume template needs one.
func (c *Command) ChoosesSessionID() bool {
	return !mentions(c.Spawn, PlaceholderSessionID) && mentions(c.Resume, PlaceholderSessionID)
}

// BootPromptInArgv implements Harness.
func (c *Command) BootPromptInArgv() bool { return mentions(c.Spawn, PlaceholderPrompt) }

// PluginArgv implements Harness.
func (c *Command) PluginArgv(dir string) []string {
	if c.PluginFlag == "" || dir == "" {
		return nil
	}
	return []string{c.PluginFlag, dir}
}

// HookProtocol implements Harness.
func (c *Command) HookProtocol() string { return c.Hooks }

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

// mentions reports whether an element of tmpl holds placeholder.
func mentions(tmpl []string, placeholder string) bool {
	return slices.ContainsFunc(tmpl, func(a string) bool { return strings.Contains(a, placeholder) })
}

var sessionIDPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)

// ValidSessionID reports whether id may be put on a command line
// (docs/requirements.md K12): anything else never is. It starts with a letter
// or digit, so it is never read as a flag.
func ValidSessionID(id string) bool { return sessionIDPattern.MatchString(id) }
