package dispatcher

import "github.com/the-loop/bus/services/dispatcher/internal/agent"

// Harness is the agent CLI a session runs (Settings.Harness). Its adapters
// live in the dispatcher's internal/agent; a host picks one with the
// constructors below.
type Harness = agent.Harness

// ClaudeCode is Claude Code run as binary ("" for `claude` on PATH), with env
// added to each session's environment.
func ClaudeCode(binary string, env map[string]string) Harness {
	h := agent.Claude().WithBinary(binary)
	if len(env) > 0 {
		c := *h
		c.Environment = env
		h = &c
	}
	return h
}
