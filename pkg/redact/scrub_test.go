package redact

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// machine is the fixture every rule table scrubs with: no test reads the
// process environment except TestFromOS.
var machine = Options{
	Env: map[string]string{
		"GITHUB_TOKEN":      "ghp_s3cr3tv4lue",
		"slack_bot_token":   "xoxb-1-2-abc",
		"DB_Password":       "hunter22",
		"AWS_SECRET":        "hunter22xyz", // longer, so masked before "hunter22"
		"MY_AUTH_HEADER":    "Bearer abcdef",
		"API_KEY":           "short", // under 6 characters: never masked
		"LANG":              "en_US.UTF-8",
		"PASSWD_UNICODE":    "pässwörd",
		"PATH":              "/usr/local/bin:/usr/bin",
		"CREDENTIALS_EMPTY": "",
	},
	Home: "/home/alice",
	User: "alice",
	Host: "buildbox-01",
}

func TestScrub(t *testing.T) {
	t.Parallel()
	s := New(machine)
	tests := []struct {
		name string
		in   string
		want string
	}{
		// 1. Environment values.
		{"token value", "using ghp_s3cr3tv4lue now", "using <redacted:env> now"},
		{"name is case-insensitive", "xoxb-1-2-abc", "<redacted:env>"},
		{"longest first", "hunter22xyz and hunter22", "<redacted:env> and <redacted:env>"},
		{"value with a space", "header: Bearer abcdef", "header: <redacted:env>"},
		{"value counted in characters", "pw pässwörd", "pw <redacted:env>"},
		{"short value kept", "short", "short"},
		{"insensitive name kept", "en_US.UTF-8", "en_US.UTF-8"},
		{"inside a word too", "xghp_s3cr3tv4luey", "x<redacted:env>y"},

		// 2. Home.
		{"home", "cd /home/alice/src", "cd <redacted:home>/src"},
		{"home prefix of another", "/home/alicexyz", "<redacted:home>xyz"},

		// 3. Paths.
		{"windows path", `open C:\Users\bob\file.txt now`, "open <redacted:path> now"},
		{"windows path stops at a quote", `"D:\x\y"`, `"<redacted:path>"`},
		{"windows path has no left boundary", `xC:\tmp`, "x<redacted:path>"},
		{"windows drive alone", `C:\ next`, `C:\ next`},
		{"posix at start", "/etc/passwd is", "<redacted:path> is"},
		{"posix after space", "see /var/log/x.log", "see <redacted:path>"},
		{"posix after quote", `'/opt/app' "/srv" ` + "`/tmp`", `'<redacted:path>' "<redacted:path>" ` + "`<redacted:path>`"},
		{"posix after =", "dir=/data/x", "dir=<redacted:path>"},
		{"posix after (", "(/data/x)", "(<redacted:path>)"},
		{"posix after :", "file:/data/x", "file:<redacted:path>"},
		{"posix after ,", "a,/b", "a,<redacted:path>"},
		{"posix after unicode space", "a\u3000/b", "a\u3000<redacted:path>"},
		{"slash command masked", "/the-loop:stop", "<redacted:path>:stop"},
		{"bare api path masked", "GET /api/v1 please", "GET <redacted:path> please"},
		{"url kept", "https://example.com/a/b", "https://example.com/a/b"},
		{"relative kept", "src/main.go", "src/main.go"},
		{"after word kept", "and/or", "and/or"},
		{"lone slash kept", "a / b", "a / b"},
		{"trailing slash left", "/tmp/ x", "<redacted:path>/ x"},
		{"double slash stops", "/a//b", "<redacted:path>//b"},
		{"tilde", "~/.ssh/id_rsa", "<redacted:path>"},
		{"lone tilde", "about ~5 min", "about <redacted:path> min"},

		// 4. User.
		{"user", "ping alice.", "ping <redacted:user>."},
		{"user in email", "alice@example.com", "<redacted:user>@example.com"},
		{"user inside word kept", "malice alicex alice_ alice2", "malice alicex alice_ alice2"},
		{"user next to hyphen kept", "alice-bot x-alice", "alice-bot x-alice"},
		{"user is case-sensitive", "Alice", "Alice"},
		{"user next to unicode letter kept", "éalice", "éalice"},

		// 5. Host.
		{"host", "on buildbox-01.internal", "on <redacted:host>.internal"},
		{"host is a substring rule", "xbuildbox-01y", "x<redacted:host>y"},

		// 6. Email.
		{"email", "mail bob.smith+tag@mail.example.co.uk!", "mail <redacted:email>!"},
		{"unicode email", "jörg@bücher.de", "<redacted:email>"},
		{"no tld kept", "bob@localhost", "bob@localhost"},

		// 7. Tokens.
		{"token", "key abcdefghij0123456789 end", "key <redacted:token> end"},
		{"19 chars kept", "abcdefghij012345678", "abcdefghij012345678"},
		{"no digit kept", "a-very-long-hyphenated-identifier", "a-very-long-hyphenated-identifier"},
		{"after slash kept", "x/abcdefghij0123456789", "x/abcdefghij0123456789"},
		{"after word kept", "éabcdefghij0123456789", "éabcdefghij0123456789"},
		{"followed by unicode letter kept", "abcdefghij0123456789é", "abcdefghij0123456789é"},
		{"unicode digit does not count", "abcdefghijklmnopqrst٣", "abcdefghijklmnopqrst٣"},
		{"restarts after a hyphen", "x/abc-abcdefghij0123456789", "x/abc-<redacted:token>"},
		{"after punctuation", "(ABCDEFGHIJ1234567890)", "(<redacted:token>)"},

		// Order.
		{"empty", "", ""},
		{"plain prose untouched", "Looks good, ship it.", "Looks good, ship it."},
		{"env before path", "/x/ghp_s3cr3tv4lue", "<redacted:path>/<redacted:env>"},
		{"home before path", "'/home/alice/.config'", "'<redacted:home>/.config'"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if diff := cmp.Diff(tt.want, s.Scrub(tt.in)); diff != "" {
				t.Errorf("Scrub(%q) (-want +got):\n%s", tt.in, diff)
			}
		})
	}
}

func TestNewThresholds(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		opts Options
		in   string
		want string
	}{
		{"env 5 chars", Options{Env: map[string]string{"TOKEN": "abcde"}}, "abcde", "abcde"},
		{"env 6 chars", Options{Env: map[string]string{"TOKEN": "abcdef"}}, "abcdef", "<redacted:env>"},
		{"env 5 runes, 10 bytes", Options{Env: map[string]string{"TOKEN": "ééééé"}}, "ééééé", "ééééé"},
		{"home 3", Options{Home: "/ab"}, "x/ab", "x/ab"},
		{"home 4", Options{Home: "/abc"}, "x/abc", "x<redacted:home>"},
		{"user 2", Options{User: "al"}, "al", "al"},
		{"user 3", Options{User: "ali"}, "ali", "<redacted:user>"},
		{"host 3", Options{Host: "box"}, "box", "box"},
		{"host 4", Options{Host: "box1"}, "box1", "<redacted:host>"},
		{"localhost kept", Options{Host: "localhost"}, "localhost", "localhost"},
		{"zero options", Options{}, "alice at /tmp", "alice at <redacted:path>"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := New(tt.opts).Scrub(tt.in); got != tt.want {
				t.Errorf("Scrub(%q) = %q, want %q", tt.in, got, tt.want)
			}
		})
	}
}

// TestScrubNotIdempotent pins the corners where the original's rules are not
// idempotent (see Scrub): masking the host, the one plain-substring rule after
// the user rule, can leave the user name standing alone, and a fact inside a
// placeholder is masked again.
func TestScrubNotIdempotent(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name        string
		opts        Options
		in          string
		once, twice string
	}{
		{"host glued to user", machine, "buildbox-01alice", "<redacted:host>alice", "<redacted:host><redacted:user>"},
		{"user named like a placeholder", Options{User: "user"}, "user", "<redacted:user>", "<redacted:<redacted:user>>"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := New(tt.opts)
			once := s.Scrub(tt.in)
			twice := s.Scrub(once)
			if once != tt.once || twice != tt.twice {
				t.Errorf("Scrub = %q then %q, want %q then %q", once, twice, tt.once, tt.twice)
			}
		})
	}
}

func TestFromOS(t *testing.T) {
	t.Setenv("THE_LOOP_TEST_TOKEN", "fromos-s3cr3t")
	t.Setenv("HOME", "/home/fromos-test")
	t.Setenv("LOGNAME", "fromos-user")
	s := FromOS()
	got := s.Scrub("fromos-s3cr3t /home/fromos-test/x and fromos-user.")
	want := "<redacted:env> <redacted:home>/x and <redacted:user>."
	if got != want {
		t.Errorf("Scrub = %q, want %q", got, want)
	}
}

func TestQuote(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in, want string
	}{
		{"", "> "},
		{"hello", "> hello"},
		{"a\nb", "> a\n> b"},
		{"a\n", "> a"},
		{"\n", "> "},
		{"a\n\nb", "> a\n> \n> b"},
		{"a\r\nb\rc", "> a\n> b\n> c"},
		{"a\r\n\r\nb", "> a\n> \n> b"},
		{"a\vb\fc\x1cd\u0085e\u2028f\u2029g", "> a\n> b\n> c\n> d\n> e\n> f\n> g"},
		{"a\x1fb", "> a\x1fb"}, // unit separator is whitespace, not a line break
		{"> quoted", "> > quoted"},
	}
	for _, tt := range tests {
		if got := Quote(tt.in); got != tt.want {
			t.Errorf("Quote(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestPlaceholdersAreInert(t *testing.T) {
	t.Parallel()
	s := New(machine)
	all := strings.Join([]string{PlaceholderEnv, PlaceholderHome, PlaceholderPath, PlaceholderUser, PlaceholderHost, PlaceholderEmail, PlaceholderToken}, " ")
	if got := s.Scrub(all); got != all {
		t.Errorf("placeholders changed: %q", got)
	}
}
