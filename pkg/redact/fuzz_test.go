package redact

import (
	"strings"
	"testing"
)

// FuzzScrub: Scrub never panics, never lets a masked fact through, and is
// idempotent wherever the original's rules are (see Scrub): always without a
// user name, and with one unless the first pass left the name in the text.
func FuzzScrub(f *testing.F) {
	for _, s := range []string{
		"", "ghp_s3cr3tv4lue", "/home/alice/x", `C:\Users\alice`, "~/.ssh", "/the-loop:stop",
		"alice@example.com", "buildbox-01alice", "x/abc-abcdefghij0123456789", "abcdefghij0123456789é",
		"'/a' \"/b\" `/c` =/d (/e :/f ,/g", "jörg@bücher.de", "hunter22xyz hunter22", "a\r\nb\u2028c",
	} {
		f.Add(s)
	}
	full := New(machine)
	noUser := machine
	noUser.User = ""
	withoutUser := New(noUser)
	facts := []string{"ghp_s3cr3tv4lue", "xoxb-1-2-abc", "hunter22", "Bearer abcdef", "pässwörd", "/home/alice", "buildbox-01"}
	f.Fuzz(func(t *testing.T, text string) {
		once := full.Scrub(text)
		for _, fact := range facts {
			if strings.Contains(once, fact) {
				t.Fatalf("Scrub(%q) = %q still holds %q", text, once, fact)
			}
		}
		if !strings.Contains(once, machine.User) {
			if twice := full.Scrub(once); twice != once {
				t.Fatalf("not idempotent:\n in    %q\n once  %q\n twice %q", text, once, twice)
			}
		}
		plain := withoutUser.Scrub(text)
		if twice := withoutUser.Scrub(plain); twice != plain {
			t.Fatalf("not idempotent without a user:\n in    %q\n once  %q\n twice %q", text, plain, twice)
		}
		q := Quote(once)
		if !strings.HasPrefix(q, "> ") || strings.Count(q, "\n") != max(len(splitLines(once))-1, 0) {
			t.Fatalf("Quote(%q) = %q", once, q)
		}
	})
}
