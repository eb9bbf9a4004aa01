package dispatcher

import (
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/the-loop/bus/pkg/sandbox"
	"github.com/the-loop/bus/services/dispatcher/internal/workspace"
)

// Sessions are sandboxed from the loop (SECURITY.md; docs/agents.md,
// "Sandbox"; docs/decisions/097-sessions-under-landlock.md). With
// LOOP_SESSION_SANDBOX=landlock every session's argv runs under
// `the-loop sandbox`, confined to its own workspace (and the parts of its
// repository's mirror its git writes), its harness's files, the system's
// directories, TMPDIR, and TCP to a few ports and its session endpoint's:
// the store, other work items' workspaces, other mirrors and the bus port
// are out of its reach, and so are the tmux servers. Under the tmux runner
// each session has a server of its own, confined as well to what that one
// session may use: a second wall, should a session reach it and have it run
// a command (docs/decisions/100-a-tmux-server-per-session.md).

// Session sandboxes (LOOP_SESSION_SANDBOX).
const (
	SandboxLandlock = "landlock"
	SandboxOff      = "off"
)

// The system's directories a session runs programs from, those it reads,
// and the devices it uses (its own terminal besides, which `the-loop
// sandbox` adds): not /dev/pts, where the user's other terminals are, to
// be read from or typed into. A path this system lacks is skipped.
var (
	sandboxSystemExec = []string{"/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/opt"}
	sandboxSystemRead = []string{"/etc", "/proc", "/sys", "/run/systemd/resolve"}
	sandboxDevices    = []string{"/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom", "/dev/tty", "/dev/ptmx", "/dev/shm"}
)

// sandboxed reports whether sessions start confined: landlock is set, and
// the-loop's binary, which confines them, is known.
func (s *Service) sandboxed() bool {
	return s.set.Sandbox == SandboxLandlock && s.set.LoopBinaryDir != ""
}

// loopBinary is the-loop's binary sessions are confined by.
func (s *Service) loopBinary() string { return filepath.Join(s.set.LoopBinaryDir, "the-loop") }

// sandboxProblem says why sandboxed sessions cannot start here, or nil.
func (s *Service) sandboxProblem() error {
	if !s.sandboxed() {
		return nil
	}
	if _, err := os.Stat(s.loopBinary()); err != nil {
		return fmt.Errorf("LOOP_SESSION_SANDBOX is landlock and sessions are confined by %s, which is missing: %w", s.loopBinary(), err)
	}
	supported := s.sandboxSupported
	if supported == nil {
		supported = sandbox.Supported
	}
	if err := supported(); err != nil {
		return fmt.Errorf("LOOP_SESSION_SANDBOX is landlock and this kernel cannot confine sessions (Landlock ABI %d): %w; sessions do not start here — set LOOP_SESSION_SANDBOX=off to run them unconfined, able to read what this user can (SECURITY.md)",
			sandbox.ABI(), err)
	}
	return nil
}

// confine is argv as a session of ws with environment env runs it: under
// `the-loop sandbox` when sessions are sandboxed, else as it is.
func (s *Service) confine(argv []string, env map[string]string, ws *workspace.Workspace) ([]string, error) {
	if !s.sandboxed() {
		return argv, nil
	}
	p, err := s.sessionPolicy(env, ws)
	if err != nil {
		return nil, err
	}
	return p.Command(s.loopBinary(), argv), nil
}

// sessionPolicy is what a session of ws may do: the base, its own
// workspace, and what git in its checkouts writes of their mirrors.
func (s *Service) sessionPolicy(env map[string]string, ws *workspace.Workspace) (sandbox.Policy, error) {
	p := s.basePolicy(env)
	p.ReadWrite = append(p.ReadWrite, ws.Dir)
	if m, err := s.workspace(); err == nil {
		for _, c := range ws.Checkouts {
			w, r := m.GitDirs(c)
			p.ReadWrite = append(p.ReadWrite, w...)
			p.ReadOnly = append(p.ReadOnly, r...)
		}
	}
	root, err := filepath.Abs(s.set.Workspace.Root)
	if err != nil {
		return sandbox.Policy{}, err
	}
	// The other work items and the mirrors lie under these; a rule that
	// held either whole would hand them over.
	whole := []string{filepath.Join(root, "items"), filepath.Join(root, "mirrors")}
	if err := s.checkPolicy(p, whole); err != nil {
		return sandbox.Policy{}, err
	}
	return p, nil
}

// serverPolicy is what the tmux server of the session of ws runs with:
// that session's own policy (so a command the server were made to run
// reaches nothing the session could not), the socket directory, where it
// makes its socket, the terminals it opens for its pane, and its
// configuration (docs/decisions/100-a-tmux-server-per-session.md).
func (s *Service) serverPolicy(env map[string]string, ws *workspace.Workspace) (sandbox.Policy, error) {
	p, err := s.sessionPolicy(env, ws)
	if err != nil {
		return sandbox.Policy{}, err
	}
	sockets := s.set.TmuxDir
	for _, path := range p.ReadWrite {
		if within(sockets, path) {
			return sandbox.Policy{}, fmt.Errorf("the session sandbox would give sessions %s, which holds the tmux socket directory %s: move LOOP_TMUX_DIR", path, sockets)
		}
	}
	p.ReadWrite = append(p.ReadWrite, sockets, "/dev")
	p.UnixSockets = []string{sockets}
	if home := env["HOME"]; home != "" {
		p.ReadOnly = append(p.ReadOnly, filepath.Join(home, ".tmux.conf"), filepath.Join(home, ".config", "tmux"))
	}
	if err := s.checkPolicy(p, nil); err != nil {
		return sandbox.Policy{}, err
	}
	return p, nil
}

// confineSession is confine, and when sessions are sandboxed it also
// settles the command target's own tmux server is started through
// (serverLaunch): the server is started by the spawn that follows.
func (s *Service) confineSession(target string, argv []string, env map[string]string, ws *workspace.Workspace) ([]string, error) {
	argv, err := s.confine(argv, env, ws)
	if err != nil || !s.sandboxed() {
		return argv, err
	}
	p, err := s.serverPolicy(env, ws)
	if err != nil {
		return nil, err
	}
	s.launches.Store(target, p.Command(s.loopBinary(), nil))
	return argv, nil
}

// serverLaunch is the command target's tmux server is started through
// (tmux.Servers.Launch): `the-loop sandbox` with the policy confineSession
// settled for it, when sessions are sandboxed.
func (s *Service) serverLaunch(target string) ([]string, error) {
	if !s.sandboxed() {
		return nil, nil
	}
	// Taken, not kept: each spawn settles its own first.
	l, ok := s.launches.LoadAndDelete(target)
	if !ok {
		return nil, fmt.Errorf("no sandbox settled for the tmux server of %s", target)
	}
	return l.([]string), nil
}

// basePolicy is what every session may do, whatever its work item: run the
// system's programs, the-loop's and its harness's; read the system's
// configuration, the plugin and the credentials the operator grants
// agents; write TMPDIR, the usual devices and its harness's
// state in HOME (LOOP_SESSION_SANDBOX_WRITE); reach the TCP ports of
// LOOP_SESSION_SANDBOX_PORTS and its session endpoint's.
func (s *Service) basePolicy(env map[string]string) sandbox.Policy {
	home := env["HOME"]
	tmp := env["TMPDIR"]
	if tmp == "" || !filepath.IsAbs(tmp) {
		tmp = "/tmp"
	}
	p := sandbox.Policy{
		ReadWrite: append(append([]string{tmp}, sandboxDevices...), expandHome(s.set.SandboxWrite, home)...),
		ReadOnly:  slices.Clone(sandboxSystemRead),
		Exec:      append(slices.Clone(sandboxSystemExec), s.set.LoopBinaryDir),
	}
	if d := env["CLAUDE_CONFIG_DIR"]; filepath.IsAbs(d) {
		p.ReadWrite = append(p.ReadWrite, d)
	}
	if dir := s.harnessDir(env); dir != "" {
		p.Exec = append(p.Exec, dir)
	}
	p.Exec = append(p.Exec, expandHome(s.set.SandboxRead, home)...)
	p.ReadOnly = append(p.ReadOnly, s.set.PluginDir)
	if f := s.set.AgentGitCredentials; f != "" {
		if abs, err := filepath.Abs(f); err == nil {
			p.ReadOnly = append(p.ReadOnly, abs)
		}
	}
	if home != "" {
		p.ReadOnly = append(p.ReadOnly, filepath.Join(home, ".gitconfig"))
	}
	p.ConnectTCP = slices.Clone(s.set.SandboxPorts)
	if port := endpointPort(s.sessionURL); port != 0 && !slices.Contains(p.ConnectTCP, port) {
		p.ConnectTCP = append(p.ConnectTCP, port)
	}
	return p
}

// harnessDir is the directory of the harness's binary, found on the
// session's PATH and its links followed (a harness installed under HOME,
// or as a script beside its files): the session runs it from there.
func (s *Service) harnessDir(env map[string]string) string {
	bin := s.harness().Command()
	if !filepath.IsAbs(bin) {
		path := env["PATH"]
		if d := s.set.LoopBinaryDir; d != "" {
			path = d + string(os.PathListSeparator) + path
		}
		bin = lookPathIn(bin, path)
	}
	if bin == "" {
		return ""
	}
	real, err := filepath.EvalSymlinks(bin)
	if err != nil {
		return ""
	}
	return filepath.Dir(real)
}

// lookPathIn is name's executable file in the directories of path, or "".
func lookPathIn(name, path string) string {
	if strings.Contains(name, "/") {
		return ""
	}
	for _, dir := range filepath.SplitList(path) {
		if !filepath.IsAbs(dir) {
			continue
		}
		f := filepath.Join(dir, name)
		if fi, err := os.Stat(f); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return f
		}
	}
	return ""
}

// checkPolicy refuses a policy that would give a session a path of
// Settings.SandboxHidden (the store), or one inside it, or a whole
// directory of whole (the other work items' and the mirrors' parents): a
// HOME setting, TMPDIR or the harness's directory placed there would
// otherwise open it.
func (s *Service) checkPolicy(p sandbox.Policy, whole []string) error {
	var errs []error
	for _, set := range [][]string{p.ReadWrite, p.ReadOnly, p.Exec} {
		for _, path := range set {
			for _, h := range s.set.SandboxHidden {
				if within(h, path) || within(path, h) {
					errs = append(errs, fmt.Errorf("the session sandbox would give sessions %s, and %s is the loop's own (its store): move one of the two", path, h))
				}
			}
			for _, w := range whole {
				if within(w, path) {
					errs = append(errs, fmt.Errorf("the session sandbox would give sessions %s, which holds %s, every work item's", path, w))
				}
			}
		}
	}
	return errors.Join(errs...)
}

// within reports whether path is dir or inside it, as written or with
// their links followed.
func within(path, dir string) bool {
	in := func(p, d string) bool {
		rel, err := filepath.Rel(filepath.Clean(d), filepath.Clean(p))
		return err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator))
	}
	if in(path, dir) {
		return true
	}
	rp, err1 := filepath.EvalSymlinks(path)
	rd, err2 := filepath.EvalSymlinks(dir)
	return err1 == nil && err2 == nil && in(rp, rd)
}

// expandHome is paths with a leading ~ replaced by home; those naming ~
// without a home are dropped.
func expandHome(paths []string, home string) []string {
	var out []string
	for _, p := range paths {
		switch {
		case p == "~" || strings.HasPrefix(p, "~/"):
			if home != "" {
				out = append(out, filepath.Join(home, strings.TrimPrefix(p, "~")))
			}
		default:
			out = append(out, p)
		}
	}
	return out
}

// endpointPort is the session endpoint URL's port, 0 when it has none.
func endpointPort(u string) uint16 {
	parsed, err := url.Parse(u)
	if err != nil {
		return 0
	}
	n, err := strconv.ParseUint(parsed.Port(), 10, 16)
	if err != nil {
		return 0
	}
	return uint16(n)
}
