package main

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestHardenWipesTheEnvironmentBlock: a loop process started with a secret
// in its environment shows, in /proc/<pid>/environ, the secret's name and
// not its value — to whoever can read that file at all (root's
// capabilities pass over non-dumpable; another user's process cannot open
// it).
func TestHardenWipesTheEnvironmentBlock(t *testing.T) {
	const token = "ghp_wipeTestToken0123456789abcdefABCDEF"
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(self)
	cmd.Env = append(os.Environ(), envHardenChild+"=1", "LOOP_GITHUB_TOKEN="+token, "LOOP_GITHUB_LOGIN=kept-as-is")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { stdin.Close(); _ = cmd.Wait() }()
	if line, err := bufio.NewReader(stdout).ReadString('\n'); err != nil || line != "hardened\n" {
		t.Fatalf("the child said %q (%v)", line, err)
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", cmd.Process.Pid))
	if errors.Is(err, fs.ErrPermission) {
		t.Skipf("this user cannot read a non-dumpable process's environment at all: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	env := string(b)
	if strings.Contains(env, token) {
		t.Errorf("/proc/<pid>/environ still shows the token")
	}
	if !strings.Contains(env, "LOOP_GITHUB_TOKEN=\x00") || !strings.Contains(env, "LOOP_GITHUB_LOGIN=kept-as-is\x00") {
		t.Errorf("the block lost more than the secret's value: %q", env)
	}
}
