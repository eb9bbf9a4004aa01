package config

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/the-loop/bus/internal/testsupport/testkit"
	"github.com/the-loop/bus/pkg/graph"
)

// releaseGraph is an operator graph: the agent builds, a person signs off.
var releaseGraph = testkit.ReadRepoFile("docs/examples/release-graph.yaml")

// graphDir writes the config and its graph files into a fresh directory
// and returns the config's path.
func graphDir(t *testing.T, config string, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, body := range files {
		path := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return writeFile(t, dir, "config.yaml", []byte(config))
}

func TestGraphsLoadFromFiles(t *testing.T) {
	t.Parallel()
	path := graphDir(t, "version: 0.7.0\ngraphs:\n  files: [graphs/release.yaml]\n  workItem: release\n",
		map[string]string{"graphs/release.yaml": releaseGraph})
	cfg, ws, err := LoadFile(path)
	if err != nil || len(ws) != 0 {
		t.Fatalf("LoadFile: %v (warnings %v)", err, ws)
	}
	reg := cfg.Graphs.Registry()
	if want := append(graph.BuiltinNames(), "release"); !slices.Equal(reg.Names(), want) {
		t.Errorf("registry = %v, want %v", reg.Names(), want)
	}
	g, ok := reg.Get("release")
	if !ok || g.Start != "build" || !g.Node("sign-off").IsGate() {
		t.Fatalf("release graph = %+v", g)
	}
	if cfg.Graphs.WorkItem != "release" {
		t.Errorf("workItem = %q", cfg.Graphs.WorkItem)
	}
	if want := []string{filepath.Join(filepath.Dir(path), "graphs", "release.yaml")}; !slices.Equal(cfg.Graphs.Files, want) {
		t.Errorf("files = %v, want %v", cfg.Graphs.Files, want)
	}
	// A config without the section knows the built-ins and follows work-item.
	def, _, err := Parse([]byte("version: 0.7.0\n"))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(def.Graphs.Registry().Names(), graph.BuiltinNames()) || def.Graphs.WorkItem != graph.WorkItemGraph {
		t.Errorf("default graphs = %v, workItem %q", def.Graphs.Registry().Names(), def.Graphs.WorkItem)
	}
	// An absolute path is read where it says.
	abs := filepath.Join(filepath.Dir(path), "graphs", "release.yaml")
	if cfg, _, err := Parse([]byte("graphs:\n  files: [" + abs + "]\n")); err != nil {
		t.Errorf("absolute path: %v", err)
	} else if _, ok := cfg.Graphs.Registry().Get("release"); !ok {
		t.Error("absolute path: release not registered")
	}
}

func TestGraphsRefused(t *testing.T) {
	t.Parallel()
	unknownNode := strings.Replace(releaseGraph, "changes-requested: build", "changes-requested: rebuild", 1)
	unreachable := releaseGraph + "  audit:\n    actor: agent\n    on:\n      done: complete\n"
	noClassifier := strings.Replace(releaseGraph, "    gate: feedback\n", "", 1)
	clash := strings.Replace(releaseGraph, "name: release", "name: work-item", 1)
	tests := []struct {
		name   string
		config string
		files  map[string]string
		want   []string // substrings of the error
	}{
		{"edge to an unknown node", "graphs:\n  files: [graphs/release.yaml]\n", map[string]string{"graphs/release.yaml": unknownNode},
			[]string{"graphs.files[0] (line 3)", "graphs/release.yaml: invalid graph", `node "sign-off": on.changes-requested: edge to nowhere (no node "rebuild")`}},
		{"unreachable node", "graphs:\n  files:\n    - ok.yaml\n    - bad.yaml\n", map[string]string{"ok.yaml": strings.Replace(releaseGraph, "name: release", "name: other", 1), "bad.yaml": unreachable},
			[]string{"graphs.files[1] (line 5)", "bad.yaml: invalid graph", `node "audit" is unreachable from start "build"`}},
		{"human node without a classifier", "graphs:\n  files: [release.yaml]\n", map[string]string{"release.yaml": noClassifier},
			[]string{"graphs.files[0]", "release.yaml", `node "sign-off": human node has no gate classifier`}},
		{"name of a built-in", "graphs:\n  files: [mine.yaml]\n", map[string]string{"mine.yaml": clash},
			[]string{"graphs.files[0]", "mine.yaml", `graph name already registered: "work-item"`}},
		{"same file twice", "graphs:\n  files: [a.yaml, a.yaml]\n", map[string]string{"a.yaml": releaseGraph},
			[]string{"graphs.files[1]", `already registered: "release"`}},
		{"missing file", "graphs:\n  files: [graphs/nope.yaml]\n", nil,
			[]string{"graphs.files[0] (line 3)", "graphs/nope.yaml: no such file", "config file's directory"}},
		{"a directory", "graphs:\n  files: [graphs]\n", map[string]string{"graphs/x.yaml": releaseGraph},
			[]string{"graphs.files[0]", "graphs: not a regular file"}},
		{"not YAML", "graphs:\n  files: [x.yaml]\n", map[string]string{"x.yaml": "name: [unclosed\n"},
			[]string{"graphs.files[0]", "x.yaml: invalid graph"}},
		{"files not a list", "graphs:\n  files: release.yaml\n", nil, []string{"graphs.files (line 3): want a list of graph file paths"}},
		{"an entry not a path", "graphs:\n  files: [{path: x}]\n", nil, []string{"graphs.files[0] (line 3): want the path of a graph file"}},
		{"unknown workItem", "graphs:\n  workItem: release\n", nil,
			[]string{"graphs.workItem (line 3)", `"release" is not a graph this config knows; known: work-item, adhoc`}},
		{"unknown key", "graphs:\n  file: [x.yaml]\n", nil, []string{"graphs.file (line 3): unknown key; graphs accepts files, workItem"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, _, err := LoadFile(graphDir(t, "version: 0.7.0\n"+tt.config, tt.files))
			if err == nil {
				t.Fatal("config accepted")
			}
			if !errors.Is(err, ErrInvalid) && !errors.Is(err, ErrUnknownKey) {
				t.Errorf("error is neither ErrInvalid nor ErrUnknownKey: %v", err)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error does not contain %q:\n%v", w, err)
				}
			}
		})
	}
}

// TestWatcherReloadsOnGraphFileChange: editing a graph file the config
// names reloads the config (the poll notices it, the file living outside the
// watched directory), and a broken edit keeps the last good config.
func TestWatcherReloadsOnGraphFileChange(t *testing.T) {
	t.Parallel()
	w, path, _ := startWatcher(t, "version: 0.7.0\n", WithPollInterval(20*time.Millisecond))
	graphFile := filepath.Join(filepath.Dir(path), "graphs", "release.yaml")
	if err := os.MkdirAll(filepath.Dir(graphFile), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(graphFile, []byte(releaseGraph), 0o644); err != nil {
		t.Fatal(err)
	}
	updates, cancel := w.Subscribe()
	defer cancel()
	replace(t, path, "version: 0.7.0\ngraphs:\n  files: [graphs/release.yaml]\n")
	next := func(what string) *Config {
		t.Helper()
		select {
		case cfg := <-updates:
			return cfg
		case <-time.After(time.Minute):
			t.Fatalf("no reload after %s", what)
		}
		return nil
	}
	cfg := next("the config named the graph file")
	if g, ok := cfg.Graphs.Registry().Get("release"); !ok || !strings.HasPrefix(g.Description, "The agent builds") {
		t.Fatalf("release graph = %+v", g)
	}
	replace(t, graphFile, strings.Replace(releaseGraph, "description: The agent builds", "description: Edited, the agent builds", 1))
	cfg = next("the graph file changed")
	if g, _ := cfg.Graphs.Registry().Get("release"); !strings.HasPrefix(g.Description, "Edited") {
		t.Errorf("the reload did not read the edited graph: %q", g.Description)
	}
	replace(t, graphFile, strings.Replace(releaseGraph, "done: sign-off", "done: nowhere", 1))
	for deadline := time.Now().Add(time.Minute); w.Err() == nil; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the broken graph edit was not refused")
		}
	}
	if !strings.Contains(w.Err().Error(), "graphs/release.yaml") || w.Current() != cfg {
		t.Errorf("after a broken graph edit: Err %v, config replaced %v", w.Err(), w.Current() != cfg)
	}
	replace(t, graphFile, releaseGraph)
	cfg = next("the graph file was fixed")
	if w.Err() != nil || !strings.HasPrefix(cfg.Graphs.Registry().Names()[len(graph.BuiltinNames())], "release") {
		t.Errorf("after the fix: Err %v, graphs %v", w.Err(), cfg.Graphs.Registry().Names())
	}
}

// TestOriginalFileFollowsTheOriginalsLoop: a file written for the original
// (an older version) follows the original's work-item loop unless it names
// graphs.workItem; a current file keeps the default; the migrated file says
// so explicitly and keeps it.
func TestOriginalFileFollowsTheOriginalsLoop(t *testing.T) {
	for _, tt := range []struct {
		src, want string
	}{
		{"version: \"0.6.0\"\n", graph.PDLCWorkItemGraph},
		{"version: \"0.1.0\"\nrouting:\n  enabled: true\n", graph.PDLCWorkItemGraph},
		{"version: \"0.6.0\"\ngraphs:\n  workItem: work-item\n", graph.WorkItemGraph},
		{"version: \"0.7.0\"\n", graph.WorkItemGraph},
		{"", graph.WorkItemGraph},
	} {
		cfg, _, err := Parse([]byte(tt.src))
		if err != nil {
			t.Fatalf("%q: %v", tt.src, err)
		}
		if cfg.Graphs.WorkItem != tt.want {
			t.Errorf("%q: graphs.workItem = %s, want %s", tt.src, cfg.Graphs.WorkItem, tt.want)
		}
	}
	out, _, err := Migrate([]byte("version: \"0.6.0\"\n"))
	if err != nil {
		t.Fatal(err)
	}
	cfg, _, err := Parse(out)
	if err != nil || cfg.Graphs.WorkItem != graph.PDLCWorkItemGraph {
		t.Errorf("migrated: %v, %+v\n%s", err, cfg, out)
	}
}
