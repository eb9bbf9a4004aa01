package agent

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
)

// Claude Code asks two questions on first use that no command-line flag
// answers — whether to trust the workspace, and, in bypass-permissions mode,
// whether the operator accepts that mode — and an unattended session would
// wait on them for good. TrustClaude records the answers where Claude Code
// reads them, before the spawn:
//
//   - its configuration directory is $CLAUDE_CONFIG_DIR when set, else
//     ~/.claude; its user config file is <config dir>/.config.json when that
//     file exists, else ${CLAUDE_CONFIG_DIR:-$HOME}/.claude.json; its user
//     settings file is <config dir>/settings.json;
//   - workspace trust is projects["<absolute dir>"].hasTrustDialogAccepted in
//     the user config, with hasCompletedProjectOnboarding beside it (else the
//     onboarding screen replaces the dialog). Both are read from the exact
//     directory's entry, so both are written there, on the directory as
//     given and, when a symbolic link makes it differ, as resolved;
//   - the bypass-permissions disclaimer is skipDangerousModePermissionPrompt
//     in the user settings, and bypassPermissionsModeAccepted at the top of
//     the user config for older builds. It is written only when asked for
//     (BypassWanted): it silences the question in every Claude Code session
//     of the account, so the-loop answers it only for an operator whose own
//     arguments already ask for bypass mode, or who says always.
//
// The account-wide first-run onboarding (top-level hasCompletedOnboarding:
// theme, login) is not answered: the operator goes through it once when
// logging the harness in, and answering it here would hide a harness that is
// not logged in behind a skipped screen.
//
// The files are the operator's: only these keys are written, merged into
// what is there (every other key and its value kept as it was), a file that
// does not hold a JSON object is refused and left alone, nothing is written
// when every key already holds, and a write is a temporary file renamed over
// the old one in its directory (through a symbolic link, to the file it
// names), keeping its mode (0600 for a new file).

// TrustOptions is what TrustClaude answers besides the trust of each
// directory.
type TrustOptions struct {
	// Root is also trusted (hasTrustDialogAccepted alone), so that Claude
	// Code's trust check, which walks up from a session's directory,
	// covers every checkout under it (routing.harnessTrust.scope:
	// workspace-root). It is left out when it does not contain every
	// directory, or is / or the home directory itself.
	Root string
	// AcceptBypass records the bypass-permissions disclaimer as accepted
	// (see BypassWanted).
	AcceptBypass bool
}

// Keys TrustClaude writes.
const (
	keyProjects          = "projects"
	keyTrustAccepted     = "hasTrustDialogAccepted"
	keyProjectOnboarding = "hasCompletedProjectOnboarding"
	keyBypassSetting     = "skipDangerousModePermissionPrompt"
	keyBypassLegacy      = "bypassPermissionsModeAccepted"
)

// TrustClaude marks each of dirs trusted in Claude Code's configuration, and
// answers what opts asks, for the user whose home is home and whose
// CLAUDE_CONFIG_DIR is claudeConfigDir ("" when unset). changed reports
// whether a file was written. Each file is handled on its own: an error names
// the file, which is left as it was, and does not stop the other's write.
// Calls are serialised per file within the process.
func TrustClaude(home, claudeConfigDir string, dirs []string, opts TrustOptions) (changed bool, err error) {
	configFile, settingsFile, err := claudeFiles(home, claudeConfigDir)
	if err != nil {
		return false, err
	}
	if len(dirs) == 0 {
		return false, errors.New("trust: no directory to trust")
	}
	var onboarding []string
	for _, d := range dirs {
		keys, err := projectKeys(d)
		if err != nil {
			return false, err
		}
		onboarding = appendNew(onboarding, keys...)
	}
	trusted := slices.Clone(onboarding)
	if root, ok := trustRoot(opts.Root, dirs, home); ok {
		keys, err := projectKeys(root)
		if err != nil {
			return false, err
		}
		trusted = appendNew(trusted, keys...)
	}

	var errs []error
	wrote, err := updateJSON(configFile, func(obj map[string]json.RawMessage) (bool, error) {
		did := false
		for _, k := range trusted {
			c, err := setTrue(obj, keyProjects, k, keyTrustAccepted)
			if err != nil {
				return false, err
			}
			did = did || c
		}
		for _, k := range onboarding {
			c, err := setTrue(obj, keyProjects, k, keyProjectOnboarding)
			if err != nil {
				return false, err
			}
			did = did || c
		}
		if opts.AcceptBypass {
			c, _ := setTrue(obj, keyBypassLegacy) // a top-level key: never fails
			did = did || c
		}
		return did, nil
	})
	changed = changed || wrote
	errs = append(errs, err)
	if opts.AcceptBypass {
		wrote, err := updateJSON(settingsFile, func(obj map[string]json.RawMessage) (bool, error) {
			return setTrue(obj, keyBypassSetting)
		})
		changed = changed || wrote
		errs = append(errs, err)
	}
	return changed, errors.Join(errs...)
}

// Bypass-permissions acceptance modes (routing.harnessTrust.acceptBypassPermissions).
const (
	BypassAuto   = "auto"
	BypassAlways = "always"
	BypassNever  = "never"
)

// BypassWanted reports whether TrustClaude should record the
// bypass-permissions disclaimer for a harness run with args: always, never,
// or (auto, and any other mode) only when args already ask for bypass mode.
func BypassWanted(mode string, args []string) bool {
	switch mode {
	case BypassAlways:
		return true
	case BypassNever:
		return false
	}
	return RequestsBypass(args)
}

// RequestsBypass reports whether Claude Code arguments ask for
// bypass-permissions mode: --dangerously-skip-permissions, or
// --permission-mode bypassPermissions in either spelling.
func RequestsBypass(args []string) bool {
	for i, a := range args {
		switch {
		case a == "--dangerously-skip-permissions", a == "--permission-mode=bypassPermissions":
			return true
		case a == "--permission-mode" && i+1 < len(args) && args[i+1] == "bypassPermissions":
			return true
		}
	}
	return false
}

// claudeFiles are Claude Code's user config and user settings files.
func claudeFiles(home, configDir string) (config, settings string, err error) {
	if configDir == "" && home == "" {
		return "", "", errors.New("trust: neither a home directory nor CLAUDE_CONFIG_DIR to find Claude Code's configuration in")
	}
	dir := configDir
	if dir == "" {
		dir = filepath.Join(home, ".claude")
	}
	settings = filepath.Join(dir, "settings.json")
	if fi, err := os.Stat(filepath.Join(dir, ".config.json")); err == nil && !fi.IsDir() {
		return filepath.Join(dir, ".config.json"), settings, nil
	}
	base := configDir
	if base == "" {
		base = home
	}
	return filepath.Join(base, ".claude.json"), settings, nil
}

// projectKeys are the projects entries standing for dir: absolute and clean,
// and resolved when a symbolic link makes that differ.
func projectKeys(dir string) ([]string, error) {
	if strings.TrimSpace(dir) == "" {
		return nil, errors.New("trust: an empty directory")
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("trust %s: %w", dir, err)
	}
	keys := []string{abs}
	if real, err := filepath.EvalSymlinks(abs); err == nil && real != abs {
		keys = append(keys, real)
	}
	return keys, nil
}

// trustRoot is root, absolute, when it may be trusted for dirs: it contains
// each of them and is neither / nor home.
func trustRoot(root string, dirs []string, home string) (string, bool) {
	if strings.TrimSpace(root) == "" {
		return "", false
	}
	r, err := filepath.Abs(root)
	if err != nil || r == filepath.Dir(r) {
		return "", false
	}
	if h, err := filepath.Abs(home); home != "" && err == nil && h == r {
		return "", false
	}
	for _, d := range dirs {
		a, err := filepath.Abs(d)
		if err != nil {
			return "", false
		}
		rel, err := filepath.Rel(r, a)
		if err != nil || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
			return "", false
		}
	}
	return r, true
}

func appendNew(list []string, items ...string) []string {
	for _, it := range items {
		if !slices.Contains(list, it) {
			list = append(list, it)
		}
	}
	return list
}

// fileLocks holds one mutex per file path: several spawns at once each
// read, change and write the same files.
var fileLocks sync.Map

func lockFile(path string) (unlock func()) {
	m, _ := fileLocks.LoadOrStore(path, new(sync.Mutex))
	mu := m.(*sync.Mutex)
	mu.Lock()
	return mu.Unlock
}

// updateJSON applies mutate to the JSON object in the file at path (an
// absent or empty file is {}), and writes the result back when mutate reports
// a change. A file that does not hold a JSON object, or a mutate error, leaves
// the file as it was.
func updateJSON(path string, mutate func(map[string]json.RawMessage) (bool, error)) (bool, error) {
	target := path
	if real, err := filepath.EvalSymlinks(path); err == nil {
		target = real // a config linked from elsewhere stays linked
	}
	defer lockFile(target)()
	obj := map[string]json.RawMessage{}
	mode := fs.FileMode(0o600)
	data, err := os.ReadFile(target)
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return false, fmt.Errorf("trust: read %s: %w", target, err)
	default:
		if fi, err := os.Stat(target); err == nil {
			mode = fi.Mode().Perm()
		}
		if len(bytes.TrimSpace(data)) > 0 {
			if err := decodeObject(data, &obj); err != nil {
				return false, fmt.Errorf("trust: %s left as it is: %w", target, err)
			}
		}
	}
	changed, err := mutate(obj)
	if err != nil {
		return false, fmt.Errorf("trust: %s left as it is: %w", target, err)
	}
	if !changed {
		return false, nil
	}
	out, err := encodeObject(obj)
	if err != nil {
		return false, fmt.Errorf("trust: %s: %w", target, err)
	}
	if err := writeFileAtomic(target, out, mode); err != nil {
		return false, fmt.Errorf("trust: write %s: %w", target, err)
	}
	return true, nil
}

// setTrue sets obj[path[0]]…[path[n-1]] to true, creating the objects on the
// way, and reports whether that changed anything. A value on the way that is
// not an object is an error: it is the operator's, not ours to replace.
func setTrue(obj map[string]json.RawMessage, path ...string) (bool, error) {
	key := path[0]
	if len(path) == 1 {
		if bytes.Equal(bytes.TrimSpace(obj[key]), []byte("true")) {
			return false, nil
		}
		obj[key] = json.RawMessage("true")
		return true, nil
	}
	inner := map[string]json.RawMessage{}
	if raw, ok := obj[key]; ok && !bytes.Equal(bytes.TrimSpace(raw), []byte("null")) {
		if err := decodeObject(raw, &inner); err != nil {
			return false, fmt.Errorf("%s: %w", key, err)
		}
	}
	changed, err := setTrue(inner, path[1:]...)
	if err != nil {
		return false, fmt.Errorf("%s: %w", key, err)
	}
	if !changed {
		return false, nil
	}
	b, err := encodeObject(inner)
	if err != nil {
		return false, err
	}
	obj[key] = b
	return true, nil
}

// decodeObject decodes a JSON object, and only an object, into dst.
func decodeObject(data []byte, dst *map[string]json.RawMessage) error {
	if t := bytes.TrimSpace(data); len(t) == 0 || t[0] != '{' {
		return errors.New("does not hold a JSON object")
	}
	if err := json.Unmarshal(data, dst); err != nil {
		return fmt.Errorf("not valid JSON: %w", err)
	}
	return nil
}

// encodeObject writes obj indented, its values as they were (no HTML
// escaping added), keys in order, with a final newline.
func encodeObject(obj map[string]json.RawMessage) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(obj); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// writeFileAtomic replaces path by data through a temporary file in its
// directory, so a reader sees the old file or the new one, never half of
// one.
func writeFileAtomic(path string, data []byte, mode fs.FileMode) (err error) {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".the-loop-*")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			_ = tmp.Close()
			_ = os.Remove(tmp.Name())
		}
	}()
	if err := tmp.Chmod(mode); err != nil {
		return err
	}
	if _, err := tmp.Write(data); err != nil {
		return err
	}
	if err := tmp.Sync(); err != nil {
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}
