package sandbox_test

import (
	"flag"
	"io"
	"slices"
	"testing"

	"github.com/the-loop/bus/pkg/sandbox"
)

// TestPolicyFlagsRoundTrip: a Policy written as flags (what the
// dispatcher puts before a session's argv) reads back the same, and the
// flags refuse what is not a path or a port.
func TestPolicyFlagsRoundTrip(t *testing.T) {
	p := sandbox.Policy{ReadWrite: []string{"/w", "/tmp"}, ReadOnly: []string{"/etc"}, Exec: []string{"/usr"}, ConnectTCP: []uint16{443, 22},
		UnixSockets: []string{"/tmp/tmux-1000"}}
	argv := p.Command("/opt/the-loop", []string{"claude", "--rw", "x"})
	want := []string{"/opt/the-loop", "sandbox", "--rw", "/w", "--rw", "/tmp", "--ro", "/etc", "--exec", "/usr",
		"--connect", "443", "--connect", "22", "--unix", "/tmp/tmux-1000", "--", "claude", "--rw", "x"}
	if !slices.Equal(argv, want) {
		t.Fatalf("Command:\n got %q\nwant %q", argv, want)
	}
	fs := flag.NewFlagSet("sandbox", flag.ContinueOnError)
	var back sandbox.Policy
	back.Flags(fs)
	if err := fs.Parse(argv[2:]); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(back.ReadWrite, p.ReadWrite) || !slices.Equal(back.ReadOnly, p.ReadOnly) ||
		!slices.Equal(back.Exec, p.Exec) || !slices.Equal(back.ConnectTCP, p.ConnectTCP) || !slices.Equal(back.UnixSockets, p.UnixSockets) {
		t.Errorf("read back %+v, want %+v", back, p)
	}
	if rest := fs.Args(); !slices.Equal(rest, []string{"claude", "--rw", "x"}) {
		t.Errorf("the command after --: %q", rest)
	}
	for _, bad := range [][]string{{"--rw", "relative"}, {"--unix", "sockets"}, {"--ro", ""}, {"--connect", "0"}, {"--connect", "65536"}, {"--connect", "https"}} {
		fs := flag.NewFlagSet("sandbox", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		var q sandbox.Policy
		q.Flags(fs)
		if err := fs.Parse(bad); err == nil {
			t.Errorf("%q was accepted", bad)
		}
	}
	if err := (sandbox.Policy{Exec: []string{"usr"}}).Validate(); err == nil {
		t.Error("a relative path passed Validate")
	}
}
