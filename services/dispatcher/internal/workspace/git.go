package workspace

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// passedEnv are the variables of the process environment git commands
// see: what git needs to find its programs, its configuration, a proxy, an
// SSH agent and TLS roots. The rest — the dispatcher's own settings and
// tokens among them — stays out, since a checkout's repository belongs to
// an agent.
var passedEnv = []string{
	"PATH", "HOME", "USER", "LOGNAME", "TMPDIR", "TZ", "XDG_CONFIG_HOME",
	"GIT_CONFIG_GLOBAL", "GIT_CONFIG_SYSTEM", "GIT_CONFIG_NOSYSTEM",
	"GIT_SSH", "GIT_SSH_COMMAND", "GIT_SSL_CAINFO", "GIT_SSL_CAPATH", "SSL_CERT_FILE", "SSL_CERT_DIR",
	"SSH_AUTH_SOCK",
	"HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "no_proxy", "all_proxy",
}

// quietEnv keeps every git command from waiting for a person: no terminal
// prompt, no askpass program (an empty GIT_ASKPASS stops git from trying
// core.askPass and SSH_ASKPASS too), and messages in one language so that
// errors read the same everywhere.
var quietEnv = []string{"GIT_TERMINAL_PROMPT=0", "GIT_ASKPASS=", "SSH_ASKPASS_REQUIRE=never", "LC_ALL=C"}

// guardArgs come before every command: a repository an agent can write to
// must not make the dispatcher's git run the agent's programs.
var guardArgs = []string{"-c", "core.hooksPath=" + os.DevNull, "-c", "core.fsmonitor=false"}

// gitEnv is the environment of every git command: passedEnv, quietEnv,
// then extra (Config.Env), later entries winning.
func gitEnv(extra []string) []string {
	env := make([]string, 0, len(passedEnv)+len(quietEnv)+len(extra))
	for _, k := range passedEnv {
		if v, ok := os.LookupEnv(k); ok {
			env = append(env, k+"="+v)
		}
	}
	env = append(env, quietEnv...)
	return append(env, extra...)
}

// maxStderr bounds the stderr an error carries: git's reason is in its last
// lines.
const maxStderr = 1024

// git runs the manager's git in dir and returns its trimmed stdout. The
// command gets a session of its own, so that an SSH or HTTP helper it starts
// has no terminal to prompt on and dies with it when ctx ends.
func (m *Manager) git(ctx context.Context, dir string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, m.cfg.GitBinary, append(guardArgs[:len(guardArgs):len(guardArgs)], args...)...)
	cmd.Dir = dir
	cmd.Env = m.env
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		if ctx.Err() != nil {
			err = fmt.Errorf("%w (%w)", ctx.Err(), err)
		}
		return "", &gitError{args: args, stderr: tail(stderr.String()), err: err}
	}
	return strings.TrimSpace(stdout.String()), nil
}

// exitCode is the exit status of the git command err comes from, -1 when
// it did not exit.
func exitCode(err error) int {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	return -1
}

// gitError is a failed git command: its arguments and stderr, with any
// URL's user information removed.
type gitError struct {
	args   []string
	stderr string
	err    error
}

func (e *gitError) Error() string {
	msg := "git " + strings.Join(e.args, " ") + ": " + e.err.Error()
	if e.stderr != "" {
		msg += ": " + e.stderr
	}
	return stripUserinfo(msg)
}

func (e *gitError) Unwrap() error { return e.err }

func tail(s string) string {
	s = strings.TrimSpace(s)
	if len(s) > maxStderr {
		s = "…" + strings.ToValidUTF8(s[len(s)-maxStderr:], "")
	}
	return strings.Join(strings.Fields(strings.ReplaceAll(s, "\n", " | ")), " ")
}

// userinfo is the user[:password]@ of a URL (scheme://user:pass@host):
// the scheme, then the user information.
var userinfo = regexp.MustCompile(`([A-Za-z][A-Za-z0-9+.-]*://)([^/\s@]*)@`)

// stripUserinfo removes user information from every URL in s, so that an
// error never prints a credential.
func stripUserinfo(s string) string { return userinfo.ReplaceAllString(s, "$1") }

// CredentialEnv is the environment that makes git take its credentials from
// storeFile (git's built-in store helper, one URL with user and password a
// line) and from nothing else: the list of helpers is emptied first, so a
// helper of the host's own git configuration, which may hold the loop's own
// tokens, is never asked. Agents push with the credentials the operator
// grants to agents; the dispatcher puts these entries in its sessions'
// environment and in Config.Env.
//
// The entries are git's GIT_CONFIG_COUNT, GIT_CONFIG_KEY_<i> and
// GIT_CONFIG_VALUE_<i>, numbered from 0: they replace configuration passed
// the same way in the environment they are added to, so build a fresh
// environment (or one without GIT_CONFIG_*) and add them last.
func CredentialEnv(storeFile string) []string {
	if abs, err := filepath.Abs(storeFile); err == nil {
		storeFile = abs // sessions run in other directories
	}
	pairs := [][2]string{
		{"credential.helper", ""},
		{"credential.helper", "store --file=" + shellQuote(storeFile)},
	}
	env := []string{"GIT_CONFIG_COUNT=" + strconv.Itoa(len(pairs))}
	for i, p := range pairs {
		n := strconv.Itoa(i)
		env = append(env, "GIT_CONFIG_KEY_"+n+"="+p[0], "GIT_CONFIG_VALUE_"+n+"="+p[1])
	}
	return env
}

// shellQuote quotes s for sh: git runs a credential helper's command line
// with the shell.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
