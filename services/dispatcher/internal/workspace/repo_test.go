package workspace

import (
	"errors"
	"strings"
	"testing"
)

func TestParseRef(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		ref  string
		repo Repo
		n    int64
		str  string
	}{
		{"github:owner/repo#15", Repo{"github.com", "owner", "repo"}, 15, "owner/repo"},
		{"github:Owner/Re.po_x-1#1", Repo{"github.com", "Owner", "Re.po_x-1"}, 1, "Owner/Re.po_x-1"},
		{"github:owner/repo.git#2", Repo{"github.com", "owner", "repo"}, 2, "owner/repo"},
		{"github:GHE.Example.com/o/r#9", Repo{"ghe.example.com", "o", "r"}, 9, "ghe.example.com/o/r"},
		{"github:github.com/o/r#3", Repo{"github.com", "o", "r"}, 3, "o/r"},
	} {
		r, n, err := ParseRef(tc.ref)
		if err != nil || r != tc.repo || n != tc.n || r.String() != tc.str {
			t.Errorf("ParseRef(%q) = %+v, %d, %v; want %+v, %d (%s)", tc.ref, r, n, err, tc.repo, tc.n, tc.str)
		}
	}
}

// hostileRefs name something outside the root, or nothing at all.
var hostileRefs = []string{
	"", "owner/repo#1", "gitlab:o/r#1", "github:o/r", "github:o/r#", "github:o/r#0", "github:o/r#-1",
	"github:o/r#+1", "github:o/r#1x", "github:o/r#99999999999999999999",
	"github:../x#1", "github:o/..#1", "github:./r#1", "github:o/.#1", "github:o/.git#1",
	"github:../o/r#1", "github:a..b/o/r#1", "github:.example.com/o/r#1", "github:ex_ample.com/o/r#1",
	"github:o/x/y/r#1", "github:/o/r#1", "github:o//r#1", "github:o/r/#1", "github:o/a..b#1",
	"github:-o/r#1", "github:o/-r#1", "github:o/r r#1", "github:o/r\n#1", "github:o\\r/x#1",
	"github:o/r%2f..#1", "github:~/r#1", "github:o/" + strings.Repeat("r", maxName+1) + "#1",
}

func TestParseRefRefusesHostileRefs(t *testing.T) {
	t.Parallel()
	for _, ref := range hostileRefs {
		if r, n, err := ParseRef(ref); !errors.Is(err, ErrInvalid) {
			t.Errorf("ParseRef(%q) = %+v, %d, %v; want ErrInvalid", ref, r, n, err)
		}
	}
}

func TestParseRepo(t *testing.T) {
	t.Parallel()
	if r, err := ParseRepo("ghe.example.com/o/r.git"); err != nil || r != (Repo{"ghe.example.com", "o", "r"}) {
		t.Errorf("ParseRepo = %+v, %v", r, err)
	}
	for _, s := range []string{"o", "o/", "a/b/c/d", "o/..", "../r", "o/r/"} {
		if _, err := ParseRepo(s); !errors.Is(err, ErrInvalid) {
			t.Errorf("ParseRepo(%q) = %v, want ErrInvalid", s, err)
		}
	}
}

func TestSpecID(t *testing.T) {
	t.Parallel()
	if got := SpecID("github:o/r#15"); got != "issue-15" {
		t.Errorf("SpecID = %q", got)
	}
	if got := SpecID("github:../r#15"); got != "" {
		t.Errorf("SpecID of a hostile ref = %q, want empty", got)
	}
}

func TestSlugRoundTrips(t *testing.T) {
	t.Parallel()
	for _, r := range []Repo{{"github.com", "O", "R.x"}, {"ghe.example.com", "a-b", "c_d"}} {
		s := slug(r, 42)
		got, n, ok := parseSlug(s)
		if !ok || got != r.key() || n != 42 {
			t.Errorf("parseSlug(%q) = %+v, %d, %v; want %+v", s, got, n, ok, r.key())
		}
	}
	for _, s := range []string{"github.com+o+r", "github.com+o+r+1+2", "github.com+O+r+1", "github.com+o+r+01", "x+..+r+1"} {
		if _, _, ok := parseSlug(s); ok {
			t.Errorf("parseSlug(%q) accepted a name slug never makes", s)
		}
	}
}

// TestWorkBranchesDiffer: one repository's issue 15 and another item's
// checkout of that repository never share a branch.
func TestWorkBranchesDiffer(t *testing.T) {
	t.Parallel()
	a, b := Repo{"github.com", "o", "a"}, Repo{"github.com", "o", "b"}
	ghe := Repo{"ghe.example.com", "o", "a"}
	got := map[string]string{
		"b#15 in b":   workBranch(b, 15, b),
		"a#15 in b":   workBranch(a, 15, b),
		"ghe#15 in b": workBranch(ghe, 15, b),
		"b#16 in b":   workBranch(b, 16, b),
	}
	want := map[string]string{
		"b#15 in b":   "the-loop/issue-15",
		"a#15 in b":   "the-loop/o+a+issue-15",
		"ghe#15 in b": "the-loop/ghe.example.com+o+a+issue-15",
		"b#16 in b":   "the-loop/issue-16",
	}
	for k, w := range want {
		if got[k] != w {
			t.Errorf("%s: branch %q, want %q", k, got[k], w)
		}
		if err := checkBranch(got[k]); err != nil {
			t.Errorf("%s: %v", k, err)
		}
	}
}

func TestCheckBranch(t *testing.T) {
	t.Parallel()
	for _, b := range []string{"feature/x", "the-loop/issue-15", "fix-1.2", "a@b"} {
		if err := checkBranch(b); err != nil {
			t.Errorf("checkBranch(%q) = %v", b, err)
		}
	}
	for _, b := range []string{"", "-f", "--upload-pack=x", "a..b", "a b", "a~1", "a^", "a:b", "a?", "a*", "a[",
		"a\\b", "a/", "a.", ".a", "a/.b", "a.lock", "a/b.lock/c", "a//b", "a@{1}", "@", "HEAD", "a\x01", "a\x7f"} {
		if err := checkBranch(b); !errors.Is(err, ErrInvalid) {
			t.Errorf("checkBranch(%q) = %v, want ErrInvalid", b, err)
		}
	}
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	ok := []Config{
		{Root: "r"},
		{Root: "r", Strategy: Clone, URLTemplate: "file:///upstream/{owner}/{repo}.git"},
		{Root: "r", Strategy: Dir},
		{Root: "r", URLTemplate: "ssh://git@{host}/{owner}/{repo}.git"},
		{Root: "r", URLTemplate: "git@{host}:{owner}/{repo}.git"},
	}
	for _, c := range ok {
		if err := c.Validate(); err != nil {
			t.Errorf("%+v: %v", c, err)
		}
	}
	bad := []Config{
		{},
		{Root: "r", Strategy: "copy"},
		{Root: "r", URLTemplate: "https://{host}/{owner}/x.git"},
		{Root: "r", URLTemplate: "https://x-access-token:ghs_secret@{host}/{owner}/{repo}.git"},
		{Root: "r", URLTemplate: "https://ghs_secret@{host}/{owner}/{repo}.git"},
		{Root: "r", URLTemplate: "ssh://git:pw@{host}/{owner}/{repo}.git"},
		{Root: "r", Env: []string{"NOEQUALS"}},
	}
	for _, c := range bad {
		err := c.Validate()
		if err == nil {
			t.Errorf("%+v: accepted", c)
		} else if strings.Contains(err.Error(), "secret") || strings.Contains(err.Error(), ":pw") {
			t.Errorf("%+v: the error shows the credential: %v", c, err)
		}
	}
}

func TestStripUserinfo(t *testing.T) {
	t.Parallel()
	in := "fatal: unable to access 'https://agent:s3cret@example.test/o/r.git/': and ssh://git:pw@h/x, not a@b"
	got := stripUserinfo(in)
	want := "fatal: unable to access 'https://example.test/o/r.git/': and ssh://h/x, not a@b"
	if got != want {
		t.Errorf("stripUserinfo = %q, want %q", got, want)
	}
	e := &gitError{args: []string{"clone", "https://tok@example.test/o/r"}, stderr: "https://u:p@x/ failed", err: errors.New("exit status 128")}
	if s := e.Error(); strings.Contains(s, "tok") || strings.Contains(s, "u:p") || !strings.HasPrefix(s, "git clone ") {
		t.Errorf("gitError = %q", s)
	}
}

func TestTailIsBounded(t *testing.T) {
	t.Parallel()
	got := tail(strings.Repeat("x", 5000) + "\nfatal: the reason\n")
	if len(got) > maxStderr+10 || !strings.HasSuffix(got, "| fatal: the reason") {
		t.Errorf("tail = %d bytes ending %q", len(got), got[len(got)-30:])
	}
}
