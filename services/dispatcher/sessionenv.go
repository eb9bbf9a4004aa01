package dispatcher

import (
	"maps"
	"os"
	"strconv"
	"strings"

	"github.com/the-loop/bus/services/dispatcher/internal/agent"
	"github.com/the-loop/bus/services/dispatcher/internal/workspace"
	"github.com/the-loop/bus/services/dispatcher/sessionapi"
)

// The environment of an agent session is built, not inherited: the
// dispatcher's own environment holds its bus credential and, in a shared
// .env, every token of the deployment. A session starts with this
// allow-list of it, the harness's own settings, and its endpoint and token
// (docs/architecture.md, trust boundaries).

// sessionAllow are the variables a session inherits by name: what a shell
// and an agent's tools need to run, nothing that grants anything.
var sessionAllow = []string{
	"PATH", "HOME", "USER", "LOGNAME", "SHELL", "TERM", "COLORTERM", "LANG", "LANGUAGE", "TZ", "TMPDIR",
}

// Session endpoint variables, set in every session.
const (
	EnvSessionURL   = "LOOP_SESSION_URL"
	EnvSessionToken = "LOOP_SESSION_TOKEN"
)

// SessionBaseEnv picks from env what every agent session starts with: the
// allow-list (and the locale's LC_* variables) and the names in extra (the
// harness's own settings, such as its API key, which the operator names in
// LOOP_SESSION_ENV). No LOOP_* variable is ever picked.
func SessionBaseEnv(env map[string]string, extra []string) map[string]string {
	out := map[string]string{}
	keep := func(name string) {
		if v, ok := env[name]; ok && !strings.HasPrefix(name, "LOOP_") {
			out[name] = v
		}
	}
	for _, n := range sessionAllow {
		keep(n)
	}
	for n := range env {
		if strings.HasPrefix(n, "LC_") {
			keep(n)
		}
	}
	for _, n := range extra {
		keep(n)
	}
	if out["PATH"] == "" {
		// A harness and its tools are found by PATH; a dispatcher started
		// without one still gives its sessions the usual directories.
		out["PATH"] = defaultPath
	}
	return out
}

// defaultPath is a session's PATH when the dispatcher has none.
const defaultPath = "/usr/local/bin:/usr/bin:/bin"

// osEnv is the process environment as a map.
func osEnv() map[string]string {
	env := map[string]string{}
	for _, kv := range os.Environ() {
		if k, v, ok := strings.Cut(kv, "="); ok {
			env[k] = v
		}
	}
	return env
}

// EnvStopMaxAttempts tells the plugin's Stop hook its bound (the
// `the-loop hook stop` verb reads it).
const EnvStopMaxAttempts = "LOOP_STOP_MAX_ATTEMPTS"

// sessionEnv is the whole environment of a session of harness h started
// with token: `the-loop` first on its PATH, so that the agent and the
// plugin's hooks find the verbs they are told to run.
func (s *Service) sessionEnv(h agent.Harness, token string) map[string]string {
	env := maps.Clone(s.set.SessionEnv)
	for k, v := range h.Env() {
		env[k] = v
	}
	if d := s.set.LoopBinaryDir; d != "" {
		env["PATH"] = d + string(os.PathListSeparator) + env["PATH"]
	}
	if f := s.set.AgentGitCredentials; f != "" {
		// The agent's git fetches and pushes with the operator's grant to
		// agents, through git's credential store.
		for _, kv := range workspace.CredentialEnv(f) {
			if k, v, ok := strings.Cut(kv, "="); ok {
				env[k] = v
			}
		}
	}
	env[EnvSessionURL] = s.sessionURL
	env[EnvSessionToken] = token
	env[EnvStopMaxAttempts] = strconv.Itoa(s.set.StopMaxAttempts)
	return env
}

// newSessionToken is a new token for ref's session and its stored hash.
func newSessionToken(ref string) (string, string, error) { return sessionapi.NewToken(ref) }
