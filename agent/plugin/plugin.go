// Package plugin is the loop's plugin for the agent harness (a Claude Code
// plugin): the commands a session's boot prompt names, a skill with the
// loop's rules, and the SessionStart and Stop hooks that run `the-loop hook`
// (docs/agents.md). The tree lives beside this file in the-loop/ and is
// embedded in the binary; Install writes it where a harness loads it from.
//
// It also reads a plugin directory the way the harness does (ReadManifest,
// ReadHooks, ResolveCommand), so a stand-in harness can load a plugin, ours
// or a test's, without the harness installed.
//
// It imports nothing of the loop's: the product binary, the dispatcher and
// the test-support tree all use it.
package plugin

import (
	"bufio"
	"bytes"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
)

// Name is the plugin's name: its manifest's, and the namespace of its
// commands (/the-loop:work-on).
const Name = "the-loop"

// Paths inside a plugin directory, as the harness reads them.
const (
	ManifestPath = ".claude-plugin/plugin.json"
	HooksPath    = "hooks/hooks.json"
	CommandsDir  = "commands"
)

// installedList, in an installed tree, lists the files Install wrote, so a
// later Install removes those no longer shipped and nothing else.
const installedList = ".the-loop-installed"

//go:embed all:the-loop
var tree embed.FS

// FS is the plugin's tree, rooted at the plugin directory (its
// .claude-plugin/plugin.json is at ManifestPath).
func FS() fs.FS {
	sub, err := fs.Sub(tree, Name)
	if err != nil {
		panic(err) // the embedded tree is the program's own
	}
	return sub
}

// Version is the plugin's version, as its manifest states it.
func Version() string {
	b, err := fs.ReadFile(FS(), ManifestPath)
	if err != nil {
		return ""
	}
	var m Manifest
	if json.Unmarshal(b, &m) != nil {
		return ""
	}
	return m.Version
}

// Install writes the plugin's tree under dir, creating dir if need be, so
// that dir is a plugin directory the harness loads (dir/ManifestPath
// exists afterwards). It is idempotent: a file already as shipped is left
// alone; a missing or changed one (a session can write there: it runs as
// the same user) is replaced atomically, by a rename, never written through
// a symbolic link; files an earlier Install wrote and this version no
// longer ships are removed. Nothing else under dir is touched. Files are
// 0644, directories 0755.
func Install(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("plugin install: %w", err)
	}
	src := FS()
	var shipped []string
	err := fs.WalkDir(src, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p == "." {
			return nil
		}
		dst := filepath.Join(dir, filepath.FromSlash(p))
		if d.IsDir() {
			return ensureDir(dst)
		}
		b, err := fs.ReadFile(src, p)
		if err != nil {
			return err
		}
		shipped = append(shipped, p)
		return writeFile(dst, b)
	})
	if err != nil {
		return fmt.Errorf("plugin install: %w", err)
	}
	for _, p := range previouslyInstalled(dir) {
		if slices.Contains(shipped, p) {
			continue
		}
		if !underRealDirs(dir, p) {
			continue // a link on the way could lead anywhere: not ours to remove
		}
		dst := filepath.Join(dir, filepath.FromSlash(p))
		if st, err := os.Lstat(dst); err == nil && !st.IsDir() {
			if err := os.Remove(dst); err != nil {
				return fmt.Errorf("plugin install: %w", err)
			}
		}
		// Empty directories the file leaves behind go too; a directory
		// holding anything else stays (Remove refuses it).
		for parent := path.Dir(p); parent != "."; parent = path.Dir(parent) {
			if os.Remove(filepath.Join(dir, filepath.FromSlash(parent))) != nil {
				break
			}
		}
	}
	slices.Sort(shipped)
	if err := writeFile(filepath.Join(dir, installedList), []byte(strings.Join(shipped, "\n")+"\n")); err != nil {
		return fmt.Errorf("plugin install: %w", err)
	}
	return nil
}

// underRealDirs reports whether every directory on the way from dir to its
// entry p (slash-separated) is a directory, not a link to one.
func underRealDirs(dir, p string) bool {
	for parent := path.Dir(p); parent != "."; parent = path.Dir(parent) {
		st, err := os.Lstat(filepath.Join(dir, filepath.FromSlash(parent)))
		if err != nil || !st.IsDir() {
			return false
		}
	}
	return true
}

// ensureDir makes p a directory: whatever else stands there (a file, a
// symbolic link) is replaced.
func ensureDir(p string) error {
	st, err := os.Lstat(p)
	switch {
	case err == nil && st.IsDir():
		if st.Mode().Perm() != 0o755 {
			return os.Chmod(p, 0o755)
		}
		return nil
	case err == nil:
		if err := os.Remove(p); err != nil {
			return err
		}
	case !errors.Is(err, fs.ErrNotExist):
		return err
	}
	return os.Mkdir(p, 0o755)
}

// writeFile makes p a regular 0644 file holding b, unless it already is.
func writeFile(p string, b []byte) error {
	if st, err := os.Lstat(p); err == nil && st.Mode().IsRegular() && st.Mode().Perm() == 0o644 {
		if cur, err := os.ReadFile(p); err == nil && bytes.Equal(cur, b) {
			return nil
		}
	} else if err == nil && st.IsDir() {
		if err := os.RemoveAll(p); err != nil {
			return err
		}
	}
	// A new file beside p, then a rename over it: a reader never sees a
	// half-written file, and a symbolic link at p is replaced, not followed.
	f, err := os.CreateTemp(filepath.Dir(p), ".install-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	_, werr := f.Write(b)
	if err := errors.Join(werr, f.Chmod(0o644), f.Close()); err != nil {
		os.Remove(tmp)
		return err
	}
	if err := os.Rename(tmp, p); err != nil {
		os.Remove(tmp)
		return err
	}
	return nil
}

// previouslyInstalled reads the list an earlier Install left in dir; an
// entry that is not a clean relative path is ignored (the list lies in a
// directory a session can write to).
func previouslyInstalled(dir string) []string {
	b, err := os.ReadFile(filepath.Join(dir, installedList))
	if err != nil {
		return nil
	}
	var out []string
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		p := sc.Text()
		if fs.ValidPath(p) && p != "." && p != installedList {
			out = append(out, p)
		}
	}
	return out
}

// Manifest is a plugin's .claude-plugin/plugin.json, the fields the loop
// reads.
type Manifest struct {
	Name        string  `json:"name"`
	Version     string  `json:"version,omitempty"`
	Description string  `json:"description,omitempty"`
	Author      *Author `json:"author,omitempty"`
	Homepage    string  `json:"homepage,omitempty"`
	Repository  string  `json:"repository,omitempty"`
	License     string  `json:"license,omitempty"`
}

// Author is a manifest's author.
type Author struct {
	Name  string `json:"name"`
	Email string `json:"email,omitempty"`
	URL   string `json:"url,omitempty"`
}

// maxConfigBytes bounds a manifest or hooks file read from a plugin
// directory.
const maxConfigBytes = 1 << 20

// ReadManifest reads the manifest of the plugin in dir. A manifest without
// a name is an error: the harness namespaces the plugin's commands by it.
func ReadManifest(dir string) (Manifest, error) {
	var m Manifest
	if err := readJSON(filepath.Join(dir, filepath.FromSlash(ManifestPath)), &m); err != nil {
		return Manifest{}, fmt.Errorf("plugin manifest: %w", err)
	}
	if m.Name == "" {
		return Manifest{}, fmt.Errorf("plugin manifest %s: no name", filepath.Join(dir, filepath.FromSlash(ManifestPath)))
	}
	return m, nil
}

// Hooks is a plugin's hooks/hooks.json: for each event (SessionStart,
// Stop, …) the matcher groups the harness runs.
type Hooks map[string][]MatcherGroup

// MatcherGroup is the hooks an event runs when its matcher matches (for
// SessionStart the start's source, startup or resume; Stop has none).
type MatcherGroup struct {
	Matcher string `json:"matcher,omitempty"`
	Hooks   []Hook `json:"hooks"`
}

// Hook is one hook: Type "command" runs Command with a shell; Timeout is in
// seconds, 0 for the harness's default.
type Hook struct {
	Type    string `json:"type"`
	Command string `json:"command,omitempty"`
	Timeout int    `json:"timeout,omitempty"`
}

// Matches reports whether g applies to value (an event's matcher field): an
// empty matcher or "*" matches everything, anything else is a regular
// expression that must match the whole value ("startup|resume").
func (g MatcherGroup) Matches(value string) bool {
	if g.Matcher == "" || g.Matcher == "*" {
		return true
	}
	re, err := regexp.Compile("^(?:" + g.Matcher + ")$")
	if err != nil {
		return g.Matcher == value
	}
	return re.MatchString(value)
}

// ReadHooks reads the hooks of the plugin in dir; a plugin without a hooks
// file has none (nil, nil).
func ReadHooks(dir string) (Hooks, error) {
	var f struct {
		Hooks Hooks `json:"hooks"`
	}
	err := readJSON(filepath.Join(dir, filepath.FromSlash(HooksPath)), &f)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("plugin hooks: %w", err)
	}
	return f.Hooks, nil
}

func readJSON(p string, v any) error {
	f, err := os.Open(p)
	if err != nil {
		return err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxConfigBytes+1))
	if err != nil {
		return fmt.Errorf("%s: %w", p, err)
	}
	if len(b) > maxConfigBytes {
		return fmt.Errorf("%s: larger than %d bytes", p, maxConfigBytes)
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("%s: %w", p, err)
	}
	return nil
}

// commandName is a command's name as the harness forms it from a file name.
var commandName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]*$`)

// ResolveCommand maps a namespaced slash command ("/the-loop:work-on") of
// the plugin in dir, whose manifest is named manifestName, to its command
// file (dir/commands/work-on.md), as the harness does. ok is false for
// another plugin's command, a malformed one, or one the plugin does not
// ship.
func ResolveCommand(dir, manifestName, slash string) (file string, ok bool) {
	ns, cmd, found := strings.Cut(strings.TrimPrefix(slash, "/"), ":")
	if !found || ns != manifestName || !commandName.MatchString(cmd) || strings.Contains(cmd, "..") {
		return "", false
	}
	file = filepath.Join(dir, CommandsDir, cmd+".md")
	st, err := os.Stat(file)
	if err != nil || !st.Mode().IsRegular() {
		return "", false
	}
	return file, true
}
