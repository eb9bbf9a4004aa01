package main

import (
	"encoding/binary"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/the-loop/bus/pkg/bus"
	"github.com/the-loop/bus/pkg/config"
)

// aclReaders are the named users an ACL lets read (for tests).
func aclReaders(path string) ([]int, error) {
	b := make([]byte, 256)
	n, err := unix.Getxattr(path, aclAttribute, b)
	if err != nil {
		return nil, err
	}
	var out []int
	for i := 4; i+8 <= n; i += 8 {
		tag, perm, id := binary.LittleEndian.Uint16(b[i:]), binary.LittleEndian.Uint16(b[i+2:]), binary.LittleEndian.Uint32(b[i+4:])
		if tag == aclUser && perm&aclRead != 0 {
			out = append(out, int(id))
		}
	}
	return out, nil
}

// TestAuthInitSeedsReadableByTheServices: the seeds `auth init` writes are
// read by the services' uid 65532 as compose mounts them (the file alone,
// not its directory), with no chown by hand, and by no other uid.
func TestAuthInitSeedsReadableByTheServices(t *testing.T) {
	dir := t.TempDir()
	code, stdout, stderr := runVerb(t, config.Env{}, "auth", "init", dir)
	if code != 0 {
		t.Fatalf("auth init: %d %s %s", code, stdout, stderr)
	}
	if !strings.Contains(stdout, "readable by uid 65532") {
		t.Errorf("auth init does not say who may read the seeds:\n%s", stdout)
	}
	for _, id := range bus.Identities() {
		path := filepath.Join(dir, identitiesDir, id+".nk")
		readers, err := aclReaders(path)
		if err != nil {
			st, serr := os.Stat(path)
			if serr != nil || st.Sys().(*syscall.Stat_t).Uid != servicesUID {
				t.Errorf("%s: no ACL (%v) and not chowned to %d", id, err, servicesUID)
			}
			continue
		}
		if !slices.Equal(readers, []int{servicesUID}) {
			t.Errorf("%s: readers %v, want [%d]", id, readers, servicesUID)
		}
	}
	// The grant adds no reader on the host: only the owner reaches the
	// seeds' directory.
	if st, err := os.Stat(filepath.Join(dir, identitiesDir)); err != nil {
		t.Error(err)
	} else if st.Mode().Perm() != 0o700 {
		t.Errorf("the seeds' directory is %v, want 0700", st.Mode().Perm())
	}
	if os.Geteuid() != 0 {
		return
	}
	// As root, read each seed as the services' uid and as another: the
	// directories opened up for the walk, as a bind mount of the file is.
	for _, d := range []string{filepath.Dir(dir), dir, filepath.Join(dir, identitiesDir)} {
		if err := os.Chmod(d, 0o711); err != nil {
			t.Fatal(err)
		}
	}
	seed := filepath.Join(dir, identitiesDir, bus.IdentityLedgerWriter+".nk")
	for uid, may := range map[uint32]bool{servicesUID: true, servicesUID + 1: false} {
		cat := exec.Command("cat", seed)
		cat.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: uid}}
		out, err := cat.CombinedOutput()
		if may != (err == nil) {
			t.Errorf("uid %d reads the seed: %v, want %v (%s)", uid, err == nil, may, out)
		}
	}
}
