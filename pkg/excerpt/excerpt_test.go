package excerpt

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/the-loop/bus/internal/testsupport/testkit"
	"io"
	"math/bits"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// golden compares got with testdata/name; UPDATE=1 rewrites the file. The
// committed goldens were produced by the original Python event_excerpt, except
// sender-not-object, on which the original raised (see senderLogin).
func golden(t *testing.T, name, got string) {
	t.Helper()
	testkit.Golden(t, name, []byte(got))
}

// shape maps each object of a JSON text to its keys in document order: "" is
// the top level, "comment" a top-level member, "check_run.output" one below.
func shape(t *testing.T, text string) map[string][]string {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(text))
	out := map[string][]string{}
	var walk func(path string) error
	walk = func(path string) error {
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		switch tok {
		case json.Delim('{'):
			out[path] = []string{}
			for dec.More() {
				k, err := dec.Token()
				if err != nil {
					return err
				}
				key := k.(string)
				out[path] = append(out[path], key)
				child := key
				if path != "" {
					child = path + "." + key
				}
				if err := walk(child); err != nil {
					return err
				}
			}
			_, err = dec.Token()
			return err
		case json.Delim('['):
			for dec.More() {
				if err := walk(path + "[]"); err != nil {
					return err
				}
			}
			_, err = dec.Token()
			return err
		}
		return nil
	}
	if err := walk(""); err != nil {
		t.Fatalf("excerpt is not JSON: %v\n%s", err, text)
	}
	if _, err := dec.Token(); err != io.EOF {
		t.Fatalf("excerpt has trailing data: %v\n%s", err, text)
	}
	return out
}

// field decodes the string at a dotted path of the excerpt.
func field(t *testing.T, text string, path ...string) any {
	t.Helper()
	var v any
	if err := json.Unmarshal([]byte(text), &v); err != nil {
		t.Fatalf("excerpt is not JSON: %v", err)
	}
	for _, p := range path {
		m, ok := v.(map[string]any)
		if !ok {
			t.Fatalf("%v: not an object at %q", path, p)
		}
		v = m[p]
	}
	return v
}

// checkInvariants asserts what must hold of every excerpt not hard-cut: it is
// one JSON object, ASCII-only, within the cap, and carries nothing from the
// deny side of the allow-list (docs/requirements.md E3).
func checkInvariants(t *testing.T, text string) {
	t.Helper()
	if len(text) > ExcerptMaxChars {
		t.Errorf("excerpt is %d bytes, over %d", len(text), ExcerptMaxChars)
	}
	for i := range len(text) {
		if text[i] >= 0x80 {
			t.Fatalf("non-ASCII byte %#x at %d", text[i], i)
		}
	}
	for _, banned := range []string{"api.github.com", "avatar_url", "performed_via_github_app", "Mallory Name", "site_admin\":", "reactions"} {
		if strings.Contains(text, banned) {
			t.Errorf("excerpt contains %q:\n%s", banned, text)
		}
	}
	for path, keys := range shape(t, text) {
		for _, k := range keys {
			if k == "user" || k == "sender" || k == "repository" || k == "labels" {
				t.Errorf("excerpt carries a %q object at %q:\n%s", k, path, text)
			}
		}
	}
}

// TestFixtures: our own small payloads, each pinned by a golden (byte-exact)
// and by the shape the original's tests assert (docs/requirements.md E1, E2).
func TestFixtures(t *testing.T) {
	t.Parallel()
	tests := []struct {
		file  string
		event string
		shape map[string][]string // "" = top level
	}{
		{"issue_comment-conversation", "issue_comment", map[string][]string{"": {"comment"}, "comment": {"body", "html_url", "author"}}},
		{"review_comment-inline", "pull_request_review_comment", map[string][]string{"": {"comment"}, "comment": {"path", "line", "body", "html_url", "author"}}},
		{"review_comment-line-null", "pull_request_review_comment", map[string][]string{"": {"comment"}, "comment": {"path", "body", "html_url", "author"}}},
		{"review-approved", "pull_request_review", map[string][]string{"": {"review"}, "review": {"state", "body", "html_url", "author"}}},
		{"issues-labeled", "issues", map[string][]string{"": {"actor", "issue", "label"}, "issue": {"number", "title", "state", "html_url"}, "label": {"name"}}},
		{"pull_request-merged", "pull_request", map[string][]string{"": {"actor", "pull_request"}, "pull_request": {"number", "title", "state", "draft", "merged", "html_url"}}},
		{"pull_request_review_thread-resolved", "pull_request_review_thread", map[string][]string{"": {"actor", "pull_request"}, "pull_request": {"number", "title", "state", "html_url"}}},
		{"check_run-failed", "check_run", map[string][]string{"": {"check_run"}, "check_run": {"name", "status", "conclusion", "output", "html_url", "details_url"}, "check_run.output": {"title", "summary"}}},
		{"workflow_run-failed", "workflow_run", map[string][]string{"": {"workflow_run"}, "workflow_run": {"name", "event", "status", "conclusion", "head_branch", "html_url"}}},
		{"check_suite-completed", "check_suite", map[string][]string{"": {"check_suite"}, "check_suite": {"status", "conclusion", "head_branch", "head_sha"}}},
		{"status-failure", "status", map[string][]string{"": {"state", "context", "description", "target_url"}}},
		{"unknown-event", "discussion_comment", map[string][]string{"": {"comment", "issue", "label"}, "comment": {"body", "html_url", "author"}, "issue": {"number", "title", "state", "html_url"}, "label": {"name"}}},
		{"unknown-event", "", map[string][]string{"": {"comment", "issue", "label"}, "comment": {"body", "html_url", "author"}, "issue": {"number", "title", "state", "html_url"}, "label": {"name"}}},
		{"ping", "ping", map[string][]string{"": {}}},
		{"nothing-recognised", "ping", map[string][]string{"": {}}},
		{"nothing-recognised", "issue_comment", map[string][]string{"": {}}},
		{"forged-body", "issue_comment", map[string][]string{"": {"comment"}, "comment": {"body", "html_url", "author"}}},
		{"login-json-shaped", "issue_comment", map[string][]string{"": {"comment"}, "comment": {"body", "html_url", "author"}}},
		{"wrong-types", "issues", map[string][]string{"": {}}},
		{"wrong-types", "", map[string][]string{"": {}}},
		{"wrong-types-comment", "issue_comment", map[string][]string{"": {"comment"}, "comment": {"body", "html_url"}}},
		{"wrong-types-user-login", "pull_request_review", map[string][]string{"": {"review"}, "review": {"state", "body", "html_url"}, "review.html_url": {"nested"}}},
		{"empty-containers", "", map[string][]string{"": {"check_run"}, "check_run": {"output"}, "check_run.output": {}}},
		{"sender-not-object", "pull_request", map[string][]string{"": {"pull_request"}, "pull_request": {"number", "state"}}},
		{"unicode", "issue_comment", map[string][]string{"": {"comment"}, "comment": {"body", "html_url", "author"}}},
		{"escapes", "issue_comment", map[string][]string{"": {"comment"}, "comment": {"path", "body", "html_url", "author"}}},
		{"numbers", "", map[string][]string{"": {"issue", "check_suite"}, "issue": {"number", "title"}, "check_suite": {"status", "conclusion", "head_branch", "head_sha"}, "check_suite.head_sha": {"a", "b", "c", "d"}, "check_suite.head_sha.c": {}}},
		{"actor-truthiness", "issues", map[string][]string{"": {"actor", "issue"}, "issue": {"number"}}},
	}
	for _, tt := range tests {
		name := tt.file + "@" + tt.event
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			payload, err := os.ReadFile(filepath.Join("testdata", tt.file+".json"))
			if err != nil {
				t.Fatal(err)
			}
			got, err := Excerpt(tt.event, payload)
			if err != nil {
				t.Fatalf("Excerpt: %v", err)
			}
			checkInvariants(t, got)
			if diff := cmp.Diff(tt.shape, shape(t, got)); diff != "" {
				t.Errorf("shape (-want +got):\n%s", diff)
			}
			golden(t, tt.file+"@"+tt.event+".golden", got)
		})
	}
}

// TestProperties pins the individual claims of docs/requirements.md E1–E7 on
// the fixtures.
func TestProperties(t *testing.T) {
	t.Parallel()
	run := func(t *testing.T, file, event string) string {
		t.Helper()
		payload, err := os.ReadFile(filepath.Join("testdata", file+".json"))
		if err != nil {
			t.Fatal(err)
		}
		got, err := Excerpt(event, payload)
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	t.Run("comment event drops the issue", func(t *testing.T) {
		t.Parallel()
		got := run(t, "issue_comment-conversation", "issue_comment")
		if strings.Contains(got, `"issue"`) || strings.Contains(got, "Excerpt is too big") {
			t.Errorf("issue carried on a comment event:\n%s", got)
		}
	})
	t.Run("lifecycle carries title not body", func(t *testing.T) {
		t.Parallel()
		got := run(t, "issues-labeled", "issues")
		if field(t, got, "issue", "title") != "Excerpt is too big" || strings.Contains(got, "attacker-controlled") {
			t.Errorf("want the title and not the body:\n%s", got)
		}
		if field(t, got, "actor") != "maintainer" {
			t.Errorf("actor = %v, want the sender, not the opener", field(t, got, "actor"))
		}
	})
	t.Run("merged PR carries merged and draft", func(t *testing.T) {
		t.Parallel()
		got := run(t, "pull_request-merged", "pull_request")
		if field(t, got, "pull_request", "merged") != true || field(t, got, "pull_request", "draft") != false {
			t.Errorf("merged/draft missing:\n%s", got)
		}
	})
	t.Run("failed check run carries its output", func(t *testing.T) {
		t.Parallel()
		got := run(t, "check_run-failed", "check_run")
		if field(t, got, "check_run", "output", "summary") != "excerpt.go:12: unused import" {
			t.Errorf("output summary missing:\n%s", got)
		}
		if strings.Contains(got, "never read") || strings.Contains(got, "pull_request") {
			t.Errorf("CI event pulled in pull_request:\n%s", got)
		}
	})
	t.Run("forged JSON stays inside its string", func(t *testing.T) {
		t.Parallel()
		got := run(t, "forged-body", "issue_comment")
		body, _ := field(t, got, "comment", "body").(string)
		if !strings.HasPrefix(body, `"},"comment":{"body":"rm -rf /"`) {
			t.Errorf("body altered: %q", body)
		}
		if n := len(shape(t, got)["comment"]); n != 3 {
			t.Errorf("comment has %d keys, want exactly 3", n)
		}
		if field(t, got, "comment", "author") != "reviewer" {
			t.Errorf("author forged: %v", field(t, got, "comment", "author"))
		}
	})
	t.Run("JSON-shaped login stays a string", func(t *testing.T) {
		t.Parallel()
		got := run(t, "login-json-shaped", "issue_comment")
		if field(t, got, "comment", "author") != `{"login": "owner", "site_admin": true}` {
			t.Errorf("author = %v", field(t, got, "comment", "author"))
		}
	})
	t.Run("short body is never marked truncated", func(t *testing.T) {
		t.Parallel()
		for file, event := range map[string]string{
			"issue_comment-conversation": "issue_comment",
			"review-approved":            "pull_request_review",
			"unicode":                    "issue_comment",
		} {
			if got := run(t, file, event); strings.Contains(got, "truncated") || strings.Contains(got, `\u2026`) {
				t.Errorf("%s: marked truncated:\n%s", file, got)
			}
		}
	})
}

// TestCaps: the per-field cap takes only the field, and the whole excerpt
// stays under its cap by halving the field budget (docs/requirements.md E4).
func TestCaps(t *testing.T) {
	t.Parallel()
	const url = "https://github.com/o/r/issues/1#issuecomment-1"
	comment := func(body string, extra map[string]any) []byte {
		c := map[string]any{"body": body, "html_url": url, "user": map[string]any{"login": "reviewer"}}
		for k, v := range extra {
			c[k] = v
		}
		b, err := json.Marshal(map[string]any{"comment": c})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	inline := map[string]any{"path": "a/b.go", "line": 7}
	tests := []struct {
		name     string
		payload  []byte
		wantBody string // the carried body, marker included
	}{
		{"10 KB body", comment(strings.Repeat("x", 10_000), nil), strings.Repeat("x", 3_500) + TruncatedMarker},
		{"exactly the cap", comment(strings.Repeat("x", 3_500), nil), strings.Repeat("x", 3_500)},
		{"one over the cap", comment(strings.Repeat("x", 3_501), nil), strings.Repeat("x", 3_500) + TruncatedMarker},
		{"50 KB inline", comment(strings.Repeat("y", 50_000), inline), strings.Repeat("y", 3_500) + TruncatedMarker},
		{"200 000 chars", comment(strings.Repeat("z", 200_000), nil), strings.Repeat("z", 3_500) + TruncatedMarker},
		// Newlines escape to two bytes: 3 500 of them render as 7 000, so the
		// budget halves once to 1 750.
		{"newlines halve the budget", comment(strings.Repeat("\n", 5_000), nil), strings.Repeat("\n", 1_750) + TruncatedMarker},
		// Non-ASCII escapes to six bytes: 3 500 → 1 750 → 875 → 437 → 218 → 109 → 54 … fits at 437 (2 622 bytes).
		{"non-ASCII halves the budget", comment(strings.Repeat("é", 5_000), inline), strings.Repeat("é", 437) + TruncatedMarker},
		{"astral counts one code point", comment(strings.Repeat("😀", 700), nil), strings.Repeat("😀", 218) + TruncatedMarker},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := Excerpt("pull_request_review_comment", tt.payload)
			if err != nil {
				t.Fatal(err)
			}
			checkInvariants(t, got)
			if body := field(t, got, "comment", "body"); body != tt.wantBody {
				t.Errorf("body = %.60q… (%d chars), want %.60q… (%d chars)", body, len([]rune(body.(string))), tt.wantBody, len([]rune(tt.wantBody)))
			}
			if field(t, got, "comment", "html_url") != url || field(t, got, "comment", "author") != "reviewer" {
				t.Errorf("URL or author lost:\n%.300s", got)
			}
			if bytes.Contains(tt.payload, []byte(`"path"`)) {
				if field(t, got, "comment", "path") != "a/b.go" || field(t, got, "comment", "line") != 7.0 {
					t.Errorf("anchor lost:\n%.300s", got)
				}
			}
		})
	}
}

// TestHardCut: with no free text left to shorten (titles are not capped), the
// excerpt is cut at ExcerptMaxChars and marked after a newline; that form is
// no longer JSON and is 4 014 characters long, as in the original.
func TestHardCut(t *testing.T) {
	t.Parallel()
	payload := fmt.Appendf(nil, `{"sender": {"login": "o"}, "issue": {"number": 1, "title": %q, "body": %q}}`,
		strings.Repeat("t", 5_000), strings.Repeat("b", 5_000))
	got, err := Excerpt("issues", payload)
	if err != nil {
		t.Fatal(err)
	}
	want := (`{` + "\n" + `  "actor": "o",` + "\n" + `  "issue": {` + "\n" + `    "number": 1,` + "\n" + `    "title": "` + strings.Repeat("t", 5_000))[:ExcerptMaxChars] + "\n" + TruncatedMarker
	if got != want {
		t.Errorf("hard cut:\n got %q…%q\nwant %q…%q", got[:80], got[len(got)-30:], want[:80], want[len(want)-30:])
	}
	if n := len([]rune(got)); n != 4_014 {
		t.Errorf("hard-cut excerpt is %d characters, want 4014", n)
	}
}

// TestFloatOverflow: a float literal beyond float64 becomes inf in json.loads,
// which json.dumps writes as the bare word Infinity. The original's output is
// then not strict JSON; the port keeps it byte-identical.
func TestFloatOverflow(t *testing.T) {
	t.Parallel()
	payload, err := os.ReadFile(filepath.Join("testdata", "numbers-overflow.json"))
	if err != nil {
		t.Fatal(err)
	}
	got, err := Excerpt("check_suite", payload)
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "numbers-overflow@check_suite.golden", got)
	checkInvariants(t, pyInfinityAsZero(got))
}

// TestNotAnObject: valid JSON that is not an object renders Empty, no error.
func TestNotAnObject(t *testing.T) {
	t.Parallel()
	for _, payload := range []string{`null`, `[]`, `[{"comment": {"body": "x"}}]`, `"comment"`, `0`, `true`, ` "x" `} {
		got, err := Excerpt("issue_comment", []byte(payload))
		if got != Empty || err != nil {
			t.Errorf("Excerpt(%q) = %q, %v; want %q, nil", payload, got, err, Empty)
		}
	}
}

// TestMalformed: anything that is not one JSON text renders Empty with an
// error wrapping ErrMalformed; Empty remains a correct excerpt to show.
func TestMalformed(t *testing.T) {
	t.Parallel()
	tests := []string{
		``, ` `, `{`, `{"comment": {"body": "x"}`, `{"a": 1,}`, `{"a" 1}`, `{a: 1}`, `{"a": 01}`, `{"a": 1.}`,
		`{"a": .5}`, `{"a": -}`, `{"a": 1e}`, `{"a": +1}`, `{"a": NaN}`, `{"a": Infinity}`, `{"a": tru}`,
		`{"a": "\x"}`, `{"a": "\u12"}`, "{\"a\": \"tab\there\"}", "{\"a\": \"\xff\"}", "{\"a\": \"\xed\xa0\x80\"}",
		`{} {}`, `{"a": 1} x`, `[1, 2`, `{"a": [1 2]}`, `'x'`, strings.Repeat("[", maxDepth+1) + strings.Repeat("]", maxDepth+1),
	}
	for _, payload := range tests {
		got, err := Excerpt("issue_comment", []byte(payload))
		if got != Empty || !errors.Is(err, ErrMalformed) {
			t.Errorf("Excerpt(%.40q) = %q, %v; want %q, ErrMalformed", payload, got, err, Empty)
		}
	}
}

// TestByteOrderMark: json.loads accepts a UTF-8 BOM before a bytes payload.
func TestByteOrderMark(t *testing.T) {
	t.Parallel()
	got, err := Excerpt("", []byte("\xef\xbb\xbf{\"label\": {\"name\": \"bug\"}}"))
	if want := "{\n  \"label\": {\n    \"name\": \"bug\"\n  }\n}"; got != want || err != nil {
		t.Errorf("got %q, %v; want %q", got, err, want)
	}
}

// TestPayloadExcerpt: the legacy alias distils without an event name.
func TestPayloadExcerpt(t *testing.T) {
	t.Parallel()
	payload := []byte(`{"sender": {"login": "s"}, "pull_request": {"number": 5}, "comment": {"body": "hi"}}`)
	got, err := PayloadExcerpt(payload)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := Excerpt("", payload)
	if got != want || !strings.Contains(got, `"comment"`) || !strings.Contains(got, `"pull_request"`) || strings.Contains(got, "actor") {
		t.Errorf("PayloadExcerpt = %s", got)
	}
}

// TestPyFloat: Python's float repr, which json.dumps writes.
func TestPyFloat(t *testing.T) {
	t.Parallel()
	tests := map[float64]string{
		0: "0.0", 1: "1.0", -1.5: "-1.5", 0.1: "0.1", 1e15: "1000000000000000.0", 1e16: "1e+16",
		1.5e16: "1.5e+16", 123456789012345.6: "123456789012345.6", 1e-4: "0.0001", 1e-5: "1e-05",
		1.25e-7: "1.25e-07", 5e-324: "5e-324", 1e100: "1e+100", 1.7976931348623157e308: "1.7976931348623157e+308",
		12345.678: "12345.678", 100: "100.0",
	}
	for f, want := range tests {
		if got := string(appendPyFloat(nil, f)); got != want {
			t.Errorf("appendPyFloat(%v) = %s, want %s", f, got, want)
		}
	}
}

// pyInfinity matches a rendered line whose scalar value is Python's bare
// Infinity or -Infinity. json.dumps(indent=2) puts every scalar on its own
// line, after its key or alone in an array, so a line-wise match cannot hit
// the inside of a string.
var pyInfinity = regexp.MustCompile(`(?m)^( *(?:"(?:[^"\\]|\\.)*": )?)-?Infinity(,?)$`)

// pyInfinityAsZero replaces Python's Infinity spellings with 0, leaving text
// that strict JSON tooling can check.
func pyInfinityAsZero(text string) string {
	return pyInfinity.ReplaceAllString(text, "${1}0${2}")
}

// TestSpecial8: the eight-byte test of the string scan stops at the first
// byte a string scan must look at, and only there: every byte value in every
// position, and random words.
func TestSpecial8(t *testing.T) {
	special := func(c byte) bool { return c < 0x20 || c >= 0x80 || c == '"' || c == '\\' }
	check := func(w [8]byte) {
		first := -1
		for k, c := range w {
			if special(c) {
				first = k
				break
			}
		}
		m := special8(binary.LittleEndian.Uint64(w[:]))
		got := -1
		if m != 0 {
			got = bits.TrailingZeros64(m) >> 3
		}
		if got != first {
			t.Fatalf("% x: first special byte %d, special8 says %d", w, first, got)
		}
	}
	for p := range 8 {
		for c := range 256 {
			w := [8]byte{'a', 'b', 'c', 'd', 'e', 'f', 'g', 'h'}
			w[p] = byte(c)
			check(w)
		}
	}
	r := rand.New(rand.NewPCG(1, 2))
	for range 200000 {
		var w [8]byte
		for k := range w {
			w[k] = byte(r.IntN(256))
			if r.IntN(4) > 0 {
				w[k] = byte(0x20 + r.IntN(0x60)) // mostly printable
			}
		}
		check(w)
	}
}
