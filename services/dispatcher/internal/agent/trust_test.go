package agent

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// readJSON decodes a file as the harness would, numbers kept as written.
func readJSON(t *testing.T, path string) map[string]any {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var m map[string]any
	if err := dec.Decode(&m); err != nil {
		t.Fatalf("%s: %v\n%s", path, err, data)
	}
	return m
}

func project(t *testing.T, cfg map[string]any, dir string) map[string]any {
	t.Helper()
	p, _ := cfg["projects"].(map[string]any)[dir].(map[string]any)
	if p == nil {
		t.Fatalf("no projects entry for %s in %v", dir, cfg["projects"])
	}
	return p
}

func trusted(p map[string]any) bool {
	return p["hasTrustDialogAccepted"] == true && p["hasCompletedProjectOnboarding"] == true
}

func TestTrustFreshHome(t *testing.T) {
	t.Parallel()
	home, dir := t.TempDir(), t.TempDir()
	changed, err := TrustClaude(home, "", []string{dir}, TrustOptions{})
	if err != nil || !changed {
		t.Fatalf("TrustClaude = %v, %v", changed, err)
	}
	path := filepath.Join(home, ".claude.json")
	if !trusted(project(t, readJSON(t, path), dir)) {
		t.Error("the directory is not trusted")
	}
	if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o600 {
		t.Errorf("a new config file has mode %v, want 0600", fi.Mode().Perm())
	}
	if _, err := os.Stat(filepath.Join(home, ".claude", "settings.json")); !os.IsNotExist(err) {
		t.Errorf("the settings file was written without bypass being asked for: %v", err)
	}
	if m := readJSON(t, path); m["bypassPermissionsModeAccepted"] != nil || m["hasCompletedOnboarding"] != nil {
		t.Errorf("wrote more than trust: %v", m)
	}
}

// Every key the operator had keeps its value, the file its mode, and a second
// call writes nothing.
func TestTrustPreservesAndIsIdempotent(t *testing.T) {
	t.Parallel()
	home, dir := t.TempDir(), t.TempDir()
	path := filepath.Join(home, ".claude.json")
	before := `{"numStartups": 12, "big": 123456789012345678901234567890, "html": "<a & b>",
 "oauthAccount": {"emailAddress": "me@example.com", "nested": [1, {"x": null}]},
 "projects": {"/other": {"allowedTools": ["Bash(ls)"], "hasTrustDialogAccepted": false},
   "` + dir + `": {"history": [{"display": "hi"}], "hasTrustDialogAccepted": false}}}`
	if err := os.WriteFile(path, []byte(before), 0o640); err != nil {
		t.Fatal(err)
	}
	if changed, err := TrustClaude(home, "", []string{dir}, TrustOptions{}); err != nil || !changed {
		t.Fatalf("TrustClaude = %v, %v", changed, err)
	}
	got := readJSON(t, path)
	var want map[string]any
	dec := json.NewDecoder(strings.NewReader(before))
	dec.UseNumber()
	if err := dec.Decode(&want); err != nil {
		t.Fatal(err)
	}
	mine := want["projects"].(map[string]any)[dir].(map[string]any)
	mine["hasTrustDialogAccepted"], mine["hasCompletedProjectOnboarding"] = true, true
	if !reflect.DeepEqual(got, want) {
		t.Errorf("the file lost or changed what was there:\n got %v\nwant %v", got, want)
	}
	raw, _ := os.ReadFile(path)
	if !bytes.Contains(raw, []byte("123456789012345678901234567890")) || !bytes.Contains(raw, []byte(`"<a & b>"`)) {
		t.Errorf("a value was rewritten:\n%s", raw)
	}
	fi, _ := os.Stat(path)
	if fi.Mode().Perm() != 0o640 {
		t.Errorf("mode %v, want the file's 0640", fi.Mode().Perm())
	}

	old := time.Now().Add(-time.Hour).Truncate(time.Second)
	if err := os.Chtimes(path, old, old); err != nil {
		t.Fatal(err)
	}
	if changed, err := TrustClaude(home, "", []string{dir}, TrustOptions{}); err != nil || changed {
		t.Errorf("second TrustClaude = %v, %v, want no change", changed, err)
	}
	if fi, _ := os.Stat(path); !fi.ModTime().Equal(old) {
		t.Errorf("the second call wrote the file (mtime %v)", fi.ModTime())
	}
	if again, _ := os.ReadFile(path); !bytes.Equal(again, raw) {
		t.Error("the second call changed the file")
	}
}

func TestTrustConfigLocations(t *testing.T) {
	t.Parallel()
	t.Run("CLAUDE_CONFIG_DIR", func(t *testing.T) {
		t.Parallel()
		home, cfgDir, dir := t.TempDir(), t.TempDir(), t.TempDir()
		if _, err := TrustClaude(home, cfgDir, []string{dir}, TrustOptions{AcceptBypass: true}); err != nil {
			t.Fatal(err)
		}
		if !trusted(project(t, readJSON(t, filepath.Join(cfgDir, ".claude.json")), dir)) {
			t.Error("not trusted in $CLAUDE_CONFIG_DIR/.claude.json")
		}
		if readJSON(t, filepath.Join(cfgDir, "settings.json"))["skipDangerousModePermissionPrompt"] != true {
			t.Error("bypass not accepted in $CLAUDE_CONFIG_DIR/settings.json")
		}
		if entries, _ := os.ReadDir(home); len(entries) != 0 {
			t.Errorf("wrote in the home directory: %v", entries)
		}
	})
	t.Run(".config.json preferred", func(t *testing.T) {
		t.Parallel()
		home, dir := t.TempDir(), t.TempDir()
		scoped := filepath.Join(home, ".claude", ".config.json")
		if err := os.MkdirAll(filepath.Dir(scoped), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(scoped, []byte(`{"theme": "dark"}`), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := TrustClaude(home, "", []string{dir}, TrustOptions{}); err != nil {
			t.Fatal(err)
		}
		cfg := readJSON(t, scoped)
		if !trusted(project(t, cfg, dir)) || cfg["theme"] != "dark" {
			t.Errorf(".config.json = %v", cfg)
		}
		if _, err := os.Stat(filepath.Join(home, ".claude.json")); !os.IsNotExist(err) {
			t.Error("~/.claude.json written although .config.json exists")
		}
	})
	t.Run("symlinked directory and config", func(t *testing.T) {
		t.Parallel()
		home, real := t.TempDir(), t.TempDir()
		link := filepath.Join(t.TempDir(), "checkout")
		if err := os.Symlink(real, link); err != nil {
			t.Fatal(err)
		}
		dotfile := filepath.Join(t.TempDir(), "claude.json")
		if err := os.WriteFile(dotfile, []byte(`{}`), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(dotfile, filepath.Join(home, ".claude.json")); err != nil {
			t.Fatal(err)
		}
		if _, err := TrustClaude(home, "", []string{link}, TrustOptions{}); err != nil {
			t.Fatal(err)
		}
		if fi, err := os.Lstat(filepath.Join(home, ".claude.json")); err != nil || fi.Mode()&os.ModeSymlink == 0 {
			t.Error("the linked config was replaced by a file")
		}
		cfg := readJSON(t, dotfile)
		realDir, _ := filepath.EvalSymlinks(real)
		if !trusted(project(t, cfg, link)) || !trusted(project(t, cfg, realDir)) {
			t.Errorf("want both the link and its target trusted: %v", cfg["projects"])
		}
	})
}

func TestTrustRefusesWhatItCannotRead(t *testing.T) {
	t.Parallel()
	for name, body := range map[string]string{
		"truncated":         `{"projects": {`,
		"an array":          `[1, 2]`,
		"null":              `null`,
		"projects a string": `{"projects": "mine"}`,
		"entry a list":      `{"projects": {"DIR": [true]}}`,
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			home, dir := t.TempDir(), t.TempDir()
			body := strings.ReplaceAll(body, "DIR", dir)
			path := filepath.Join(home, ".claude.json")
			if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
				t.Fatal(err)
			}
			changed, err := TrustClaude(home, "", []string{dir}, TrustOptions{})
			if err == nil || changed || !strings.Contains(err.Error(), path) {
				t.Errorf("TrustClaude = %v, %v, want an error naming %s", changed, err, path)
			}
			if got, _ := os.ReadFile(path); string(got) != body {
				t.Errorf("the file was touched: %s", got)
			}
			if entries, _ := os.ReadDir(home); len(entries) != 1 {
				t.Errorf("left files behind: %v", entries)
			}
		})
	}
	// The settings file is handled on its own: a broken config file does
	// not stop its write.
	home, dir := t.TempDir(), t.TempDir()
	if err := os.WriteFile(filepath.Join(home, ".claude.json"), []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	changed, err := TrustClaude(home, "", []string{dir}, TrustOptions{AcceptBypass: true})
	if err == nil || !changed || readJSON(t, filepath.Join(home, ".claude", "settings.json"))["skipDangerousModePermissionPrompt"] != true {
		t.Errorf("TrustClaude = %v, %v: want the error and the settings write", changed, err)
	}
}

func TestTrustBypassOnlyWhenAsked(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		mode string
		args []string
		want bool
	}{
		{BypassAuto, nil, false},
		{BypassAuto, []string{"--permission-mode", "acceptEdits"}, false},
		{BypassAuto, []string{"--model", "opus", "--dangerously-skip-permissions"}, true},
		{BypassAuto, []string{"--permission-mode", "bypassPermissions"}, true},
		{BypassAuto, []string{"--permission-mode=bypassPermissions"}, true},
		{BypassAuto, []string{"--permission-mode"}, false},
		{"", []string{"--dangerously-skip-permissions"}, true},
		{"sometimes", nil, false},
		{BypassAlways, nil, true},
		{BypassNever, []string{"--dangerously-skip-permissions"}, false},
	} {
		if got := BypassWanted(tt.mode, tt.args); got != tt.want {
			t.Errorf("BypassWanted(%q, %q) = %v, want %v", tt.mode, tt.args, got, tt.want)
		}
	}

	home, dir := t.TempDir(), t.TempDir()
	settings := filepath.Join(home, ".claude", "settings.json")
	if err := os.MkdirAll(filepath.Dir(settings), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(settings, []byte(`{"permissions": {"allow": ["Bash(go test:*)"]}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := TrustClaude(home, "", []string{dir}, TrustOptions{AcceptBypass: true}); err != nil {
		t.Fatal(err)
	}
	s := readJSON(t, settings)
	if s["skipDangerousModePermissionPrompt"] != true || s["permissions"] == nil {
		t.Errorf("settings = %v", s)
	}
	if readJSON(t, filepath.Join(home, ".claude.json"))["bypassPermissionsModeAccepted"] != true {
		t.Error("the legacy key is not set")
	}
}

func TestTrustRoot(t *testing.T) {
	t.Parallel()
	home := t.TempDir()
	root := t.TempDir()
	dir := filepath.Join(root, "octo", "repo")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if _, err := TrustClaude(home, "", []string{dir}, TrustOptions{Root: root}); err != nil {
		t.Fatal(err)
	}
	cfg := readJSON(t, filepath.Join(home, ".claude.json"))
	if r := project(t, cfg, root); r["hasTrustDialogAccepted"] != true || r["hasCompletedProjectOnboarding"] != nil {
		t.Errorf("root entry = %v, want trust alone", r)
	}
	if !trusted(project(t, cfg, dir)) {
		t.Error("the directory itself is not trusted")
	}
	// A root that does not hold the directory, /, or the home directory
	// itself is never trusted.
	for _, r := range []string{t.TempDir(), "/", home} {
		h := t.TempDir()
		if _, err := TrustClaude(h, "", []string{dir}, TrustOptions{Root: r}); err != nil {
			t.Fatal(err)
		}
		if ps := readJSON(t, filepath.Join(h, ".claude.json"))["projects"].(map[string]any); len(ps) != 1 {
			t.Errorf("root %s: projects %v, want the directory alone", r, ps)
		}
	}
	if _, ok := trustRoot("/ws", []string{"/ws-other/x"}, ""); ok {
		t.Error("/ws taken for a root of /ws-other")
	}
}

// Spawns at once, each trusting its own directory in one file: none is lost.
func TestTrustConcurrent(t *testing.T) {
	t.Parallel()
	home := t.TempDir()
	const n = 24
	dirs := make([]string, n)
	for i := range dirs {
		dirs[i] = filepath.Join(home, "work", fmt.Sprint(i))
	}
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for _, d := range dirs {
		wg.Go(func() {
			if _, err := TrustClaude(home, "", []string{d}, TrustOptions{AcceptBypass: true}); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	cfg := readJSON(t, filepath.Join(home, ".claude.json"))
	for _, d := range dirs {
		if !trusted(project(t, cfg, d)) {
			t.Errorf("%s lost", d)
		}
	}
	var names []string
	entries, _ := os.ReadDir(home)
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if !slices.Equal(names, []string{".claude", ".claude.json"}) {
		t.Errorf("home holds %v, want .claude and .claude.json alone (no temporary files)", names)
	}
}

func TestTrustNeedsAHome(t *testing.T) {
	t.Parallel()
	if _, err := TrustClaude("", "", []string{t.TempDir()}, TrustOptions{}); err == nil {
		t.Error("trusted without a home or config dir")
	}
	if _, err := TrustClaude(t.TempDir(), "", nil, TrustOptions{}); err == nil {
		t.Error("trusted no directory")
	}
}
