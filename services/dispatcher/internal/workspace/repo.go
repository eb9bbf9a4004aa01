package workspace

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// DefaultHost is the host a ref leaves out (docs/requirements.md K1).
const DefaultHost = "github.com"

// ErrInvalid is why a ref, a repository or a branch name is refused: it
// would not name one directory (or one branch) under the root.
var ErrInvalid = errors.New("invalid name")

// Repo is one repository on a GitHub host.
type Repo struct {
	// Host is lowercase; "" is github.com.
	Host string
	// Owner and Name keep the case they were given: GitHub ignores it, and
	// the URL is built from them. Directories and branches use them
	// lowercased, so two spellings of one repository share them.
	Owner, Name string
}

// String is "owner/name", with the host in front only when it is not
// github.com, as in a ref.
func (r Repo) String() string {
	if r.Host == "" || r.Host == DefaultHost {
		return r.Owner + "/" + r.Name
	}
	return r.Host + "/" + r.Owner + "/" + r.Name
}

// ParseRef splits a work-item ref, github:[host/]owner/repo#N
// (docs/requirements.md K1), into its repository and number. Refs may come
// from event payloads, so every part is checked (see ParseRepo): the error
// wraps ErrInvalid.
func ParseRef(ref string) (Repo, int64, error) {
	rest, ok := strings.CutPrefix(ref, "github:")
	if !ok {
		return Repo{}, 0, fmt.Errorf("ref %q: %w: not github:[host/]owner/repo#N", ref, ErrInvalid)
	}
	i := strings.LastIndexByte(rest, '#')
	if i < 0 {
		return Repo{}, 0, fmt.Errorf("ref %q: %w: no #number", ref, ErrInvalid)
	}
	n, err := parseNumber(rest[i+1:])
	if err != nil {
		return Repo{}, 0, fmt.Errorf("ref %q: %w", ref, err)
	}
	r, err := ParseRepo(rest[:i])
	if err != nil {
		return Repo{}, 0, fmt.Errorf("ref %q: %w", ref, err)
	}
	return r, n, nil
}

// ParseRepo reads "owner/name" or "host/owner/name" (a trailing ".git" is
// dropped) and checks it like a ref's repository.
func ParseRepo(s string) (Repo, error) {
	parts := strings.Split(s, "/")
	var r Repo
	switch len(parts) {
	case 2:
		r = Repo{Owner: parts[0], Name: parts[1]}
	case 3:
		if parts[0] == "" {
			return Repo{}, fmt.Errorf("repository %q: %w: empty host", s, ErrInvalid)
		}
		r = Repo{Host: parts[0], Owner: parts[1], Name: parts[2]}
	default:
		return Repo{}, fmt.Errorf("repository %q: %w: not [host/]owner/name", s, ErrInvalid)
	}
	return r.normalize()
}

// SpecID is the name of a work item's artifact directory under docs/specs,
// "issue-<N>": GitHub numbers issues and pull requests in one sequence per
// repository, so one form serves both. It is "" for an invalid ref.
func SpecID(ref string) string {
	_, n, err := ParseRef(ref)
	if err != nil {
		return ""
	}
	return "issue-" + strconv.FormatInt(n, 10)
}

// Name limits: every name becomes a path component, and an item's slug
// (host, owner, repo and number together) must stay one component under
// the common 255-byte limit.
const (
	maxHost  = 64
	maxOwner = 64
	maxName  = 100
)

// component is a name that is safe as one path component: it cannot be
// empty, start with a dot or a dash, or hold a separator.
var component = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*$`)

// hostLabel is one DNS label; a host is labels joined by single dots.
var hostLabel = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]*[a-z0-9])?$`)

// normalize checks r and returns it with its host lowercased (github.com
// when empty) and a trailing ".git" dropped from its name.
func (r Repo) normalize() (Repo, error) {
	r.Host = strings.ToLower(r.Host)
	if r.Host == "" {
		r.Host = DefaultHost
	}
	r.Name = strings.TrimSuffix(r.Name, ".git")
	if err := checkHost(r.Host); err != nil {
		return Repo{}, err
	}
	if err := checkComponent("owner", r.Owner, maxOwner); err != nil {
		return Repo{}, err
	}
	if err := checkComponent("repository name", r.Name, maxName); err != nil {
		return Repo{}, err
	}
	return r, nil
}

func checkHost(h string) error {
	if len(h) > maxHost {
		return fmt.Errorf("host %.20q…: %w: longer than %d bytes", h, ErrInvalid, maxHost)
	}
	for _, l := range strings.Split(h, ".") {
		if !hostLabel.MatchString(l) {
			return fmt.Errorf("host %q: %w: not a DNS name", h, ErrInvalid)
		}
	}
	return nil
}

// checkComponent also refuses "..": beside being a parent directory on its
// own, it is never allowed in a git branch name, which owner and name
// become part of.
func checkComponent(what, s string, max int) error {
	switch {
	case len(s) > max:
		return fmt.Errorf("%s %.20q…: %w: longer than %d bytes", what, s, ErrInvalid, max)
	case !component.MatchString(s) || strings.Contains(s, ".."):
		return fmt.Errorf("%s %q: %w: want letters, digits, '.', '_' or '-', not starting with '.' or '-', without '..'", what, s, ErrInvalid)
	}
	return nil
}

func parseNumber(s string) (int64, error) {
	if s == "" || strings.TrimLeft(s, "0123456789") != "" {
		return 0, fmt.Errorf("%w: number %q is not decimal digits", ErrInvalid, s)
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("%w: number %q is not a positive 64-bit integer", ErrInvalid, s)
	}
	return n, nil
}

// refString is the ref of repository r's item n as ingress-github writes it.
func refString(r Repo, n int64) string {
	return fmt.Sprintf("github:%s#%d", r.String(), n)
}

// key is r's identity on disk: the same for every spelling of one
// repository.
func (r Repo) key() Repo {
	return Repo{Host: r.Host, Owner: strings.ToLower(r.Owner), Name: strings.ToLower(r.Name)}
}

// slugSep joins an item's slug. It is outside the component alphabet, so a
// slug splits back into exactly its parts.
const slugSep = "+"

// slug is the name of item n's directory: "<host>+<owner>+<repo>+<N>",
// lowercase.
func slug(r Repo, n int64) string {
	k := r.key()
	return strings.Join([]string{k.Host, k.Owner, k.Name, strconv.FormatInt(n, 10)}, slugSep)
}

// parseSlug is slug's inverse; ok is false for a name slug cannot produce.
func parseSlug(s string) (Repo, int64, bool) {
	p := strings.Split(s, slugSep)
	if len(p) != 4 {
		return Repo{}, 0, false
	}
	r, err := Repo{Host: p[0], Owner: p[1], Name: p[2]}.normalize()
	if err != nil || r.key() != r {
		return Repo{}, 0, false
	}
	n, err := parseNumber(p[3])
	if err != nil || slug(r, n) != s {
		return Repo{}, 0, false
	}
	return r, n, true
}

// branchPrefix is where the-loop's branches live, apart from anyone else's.
const branchPrefix = "the-loop/"

// workBranch is the branch item n (of repository primary) works on in
// repository r. In its own repository that is the-loop/issue-N. In another
// one the item's repository is named too — the-loop/<owner>+<repo>+issue-N,
// with the host first when it is not github.com — because that repository's
// own issue N has the-loop/issue-N there, and git checks a branch out in
// one worktree only.
func workBranch(primary Repo, n int64, r Repo) string {
	id := "issue-" + strconv.FormatInt(n, 10)
	p, k := primary.key(), r.key()
	if p == k {
		return branchPrefix + id
	}
	parts := []string{p.Owner, p.Name, id}
	if p.Host != DefaultHost {
		parts = append([]string{p.Host}, parts...)
	}
	return branchPrefix + strings.Join(parts, slugSep)
}

// checkBranch applies git's rules for a branch name (git-check-ref-format)
// and refuses a leading '-', so that a name from a payload is never read as
// an option or a revision expression.
func checkBranch(b string) error {
	bad := func(why string) error {
		return fmt.Errorf("branch %q: %w: %s", b, ErrInvalid, why)
	}
	switch {
	case b == "" || b == "@" || b == "HEAD":
		return bad("not a branch name")
	case len(b) > 200:
		return bad("longer than 200 bytes")
	case strings.HasPrefix(b, "-"):
		return bad("starts with '-'")
	case strings.HasSuffix(b, "/") || strings.HasSuffix(b, "."):
		return bad("ends with '/' or '.'")
	case strings.Contains(b, "..") || strings.Contains(b, "//") || strings.Contains(b, "@{"):
		return bad("holds '..', '//' or '@{'")
	case strings.ContainsAny(b, " ~^:?*[\\\x7f"):
		return bad("holds a character git refuses")
	}
	for _, c := range b {
		if c < 0x20 {
			return bad("holds a control character")
		}
	}
	for _, part := range strings.Split(b, "/") {
		if strings.HasPrefix(part, ".") || strings.HasSuffix(part, ".lock") {
			return bad("a part starts with '.' or ends with '.lock'")
		}
	}
	return nil
}
