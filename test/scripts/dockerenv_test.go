package scripts_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// dockerEnv is a copy of scripts/docker-env.sh in a directory of its own,
// with stand-ins for the commands it looks for on PATH: a Docker engine that
// answers, a docker CLI whose Compose plugin is a file of the test's, and
// mmdebstrap. Nothing else is on PATH but the shell's basics, so the script
// can neither install nor start anything.
type dockerEnv struct {
	root, plugin, bin string
}

func newDockerEnv(t *testing.T, pluginVersion string, engine bool) *dockerEnv {
	t.Helper()
	e := &dockerEnv{root: t.TempDir()}
	script, err := os.ReadFile(filepath.Join("..", "..", "scripts", "docker-env.sh"))
	if err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(e.root, "scripts", "docker-env.sh"), string(script))
	e.bin = filepath.Join(e.root, "stand-ins")
	// The user's own Compose plugin, as the docker CLI would run it.
	e.plugin = filepath.Join(e.root, "docker-config", "cli-plugins", "docker-compose")
	write(t, e.plugin, "#!/bin/sh\necho 'Docker Compose version v"+pluginVersion+"'\n")
	info := "exit 0"
	if !engine {
		info = "exit 1"
	}
	write(t, filepath.Join(e.bin, "docker"), `#!/bin/sh
case "$1" in
info) `+info+` ;;
compose) shift; exec "$DOCKER_CONFIG/cli-plugins/docker-compose" "$@" ;;
version) echo "docker-env: engine 27.5.1, client 27.5.1" ;;
esac
`)
	write(t, filepath.Join(e.bin, "dockerd"), "#!/bin/sh\nexit 0\n")
	write(t, filepath.Join(e.bin, "mmdebstrap"), "#!/bin/sh\nexit 0\n")
	// What a previous run built into the clone's own tool directory.
	write(t, filepath.Join(e.root, "bin", "tools", "docker-compose"), "#!/bin/sh\necho 'Docker Compose version v2.40.3'\n")
	return e
}

func write(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o755); err != nil {
		t.Fatal(err)
	}
}

// run runs the copy, without LOOP_TEST_REQUIRE_DOCKER, and returns its exit
// code and output.
func (e *dockerEnv) run(t *testing.T) (int, string) {
	t.Helper()
	cmd := exec.Command("bash", filepath.Join(e.root, "scripts", "docker-env.sh"))
	cmd.Env = []string{
		"PATH=" + e.bin + ":/usr/bin:/bin",
		"HOME=" + e.root,
		"DOCKER_CONFIG=" + filepath.Join(e.root, "docker-config"),
		"TMPDIR=" + e.root,
	}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return code, out.String()
}

// TestDockerEnvLeavesTheMachinesComposeAlone: the compose stage's set-up
// uses a Compose plugin of another version as it is when it is recent
// enough, and otherwise runs the one in the clone's bin/tools; either way
// the user's plugin is left byte for byte and time for time as it was.
// Without an engine (and without LOOP_TEST_REQUIRE_DOCKER) it skips with one
// line and exit 3, which the Makefile reports as a skipped stage.
func TestDockerEnvLeavesTheMachinesComposeAlone(t *testing.T) {
	for _, c := range []struct {
		name, version, wantEnv string
	}{
		{"a newer plugin, used as it is", "2.30.1", "LOOP_TEST_COMPOSE=\n"},
		{"an older plugin, left alone for bin/tools", "2.20.0", "LOOP_TEST_COMPOSE=<root>/bin/tools/docker-compose\n"},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := newDockerEnv(t, c.version, true)
			before, err := os.ReadFile(e.plugin)
			if err != nil {
				t.Fatal(err)
			}
			old := time.Date(2020, 1, 2, 3, 4, 5, 0, time.UTC)
			if err := os.Chtimes(e.plugin, old, old); err != nil {
				t.Fatal(err)
			}
			code, out := e.run(t)
			if code != 0 {
				t.Fatalf("docker-env.sh exited %d:\n%s", code, out)
			}
			after, err := os.ReadFile(e.plugin)
			if err != nil {
				t.Fatal(err)
			}
			fi, err := os.Stat(e.plugin)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(before, after) || !fi.ModTime().Equal(old) {
				t.Fatalf("the user's Compose plugin changed (modified %s):\n%s", fi.ModTime(), after)
			}
			env, err := os.ReadFile(filepath.Join(e.root, "bin", "tools", "compose.env"))
			if err != nil {
				t.Fatal(err)
			}
			if want := strings.ReplaceAll(c.wantEnv, "<root>", e.root); string(env) != want {
				t.Fatalf("compose.env %q, want %q\n%s", env, want, out)
			}
			t.Logf("Compose v%s on the machine: %s", c.version, strings.TrimSpace(out))
		})
	}
	t.Run("no engine", func(t *testing.T) {
		e := newDockerEnv(t, "2.30.1", false)
		code, out := e.run(t)
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if code != 3 || len(lines) != 1 || !strings.HasPrefix(lines[0], "compose-e2e: skipped: ") {
			t.Fatalf("exit %d, output:\n%s\nwant exit 3 and one line saying the stage is skipped", code, out)
		}
		t.Log(out)
	})
}
