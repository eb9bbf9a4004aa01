package main

import (
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/the-loop/bus/pkg/sandbox"
)

// TestSandboxVerbConfinesItsCommand runs `the-loop sandbox` as the
// dispatcher does, with a shell as the command: the shell and what it runs
// write in the --rw directory and reach the --connect port, and are refused
// a store's operator seed, another work item's directory, listing /, and
// another TCP port; a `the-loop sandbox --rw /` run inside reads the seed
// no more than its parent: the flags add to nothing already refused.
func TestSandboxVerbConfinesItsCommand(t *testing.T) {
	if err := sandbox.Supported(); err != nil {
		t.Skipf("no Landlock sandbox on this kernel (Landlock ABI %d): %v", sandbox.ABI(), err)
	}
	bin := theLoopBinary(t)
	root := t.TempDir()
	work, other, seed := filepath.Join(root, "items", "mine"), filepath.Join(root, "items", "theirs"), filepath.Join(root, "store", "nats", "operator.nk")
	for _, f := range []string{seed, filepath.Join(other, "notes.md")} {
		if err := os.MkdirAll(filepath.Dir(f), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(f, []byte("SUAMOPERATORSEED\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.MkdirAll(work, 0o700); err != nil {
		t.Fatal(err)
	}
	endpoint := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {}))
	defer endpoint.Close()
	bus, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer bus.Close()
	_, allowed, _ := net.SplitHostPort(endpoint.Listener.Addr().String())

	const script = `try() { name=$1; shift; if out=$("$@" 2>&1); then echo "$name: ok"; else echo "$name: refused: $out"; fi; }
try "write in its checkout" sh -c 'echo written > "$WORK/out" && cat "$WORK/out"'
try "read the store's operator seed" cat "$SEED"
try "list another work item's directory" ls "$OTHER"
try "list /" ls /
try "reach the allowed port" the-loop health --url "$ENDPOINT/healthz"
try "reach the bus port" the-loop health --url "http://$BUS/"
try "sandbox --rw / inside, then read the seed" the-loop sandbox --rw / --exec / -- cat "$SEED"
`
	args := []string{"sandbox", "--rw", work, "--rw", os.DevNull, "--exec", filepath.Dir(bin), "--connect", allowed}
	for _, d := range []string{"/usr", "/bin", "/lib", "/lib64"} {
		args = append(args, "--exec", d)
	}
	cmd := exec.Command(bin, append(args, "--", "sh", "-c", script)...)
	cmd.Env = []string{"PATH=" + filepath.Dir(bin) + ":/usr/bin:/bin", "WORK=" + work, "SEED=" + seed, "OTHER=" + other,
		"ENDPOINT=" + endpoint.URL, "BUS=" + bus.Addr().String()}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the-loop sandbox: %v\n%s", err, out)
	}
	got := map[string]string{}
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		name, result, _ := strings.Cut(l, ": ")
		got[name] = result
		t.Log(l)
	}
	for name, want := range map[string]string{
		"write in its checkout":                     "ok",
		"reach the allowed port":                    "ok",
		"read the store's operator seed":            "refused: cat: " + seed + ": Permission denied",
		"list another work item's directory":        "Permission denied",
		"list /":                                    "Permission denied",
		"reach the bus port":                        "connect: permission denied",
		"sandbox --rw / inside, then read the seed": "refused: cat: " + seed + ": Permission denied",
	} {
		if !strings.Contains(got[name], want) {
			t.Errorf("%s: %q, want %s", name, got[name], want)
		}
	}
	if strings.Contains(string(out), "SUAMOPERATORSEED") {
		t.Errorf("the seed was read:\n%s", out)
	}
}

// TestSandboxVerbUsage: without a command, or with a flag that is not a
// path or a port, the verb runs nothing and exits 2.
func TestSandboxVerbUsage(t *testing.T) {
	for _, args := range [][]string{{"sandbox"}, {"sandbox", "--rw", "/tmp"}, {"sandbox", "--rw", "relative", "--", "true"}, {"sandbox", "--connect", "0", "--", "true"}} {
		code, _, stderr := runVerb(t, nil, args...)
		if code != 2 {
			t.Errorf("%q: exit %d, want 2 (%s)", args, code, stderr)
		}
	}
}
