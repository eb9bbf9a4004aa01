package excerpt

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"
)

// topKeys is every key the excerpt may carry at its top level.
var topKeys = map[string]bool{
	"state": true, "context": true, "description": true, "target_url": true, "actor": true,
	"comment": true, "review": true, "issue": true, "pull_request": true, "label": true,
	"workflow_run": true, "check_run": true, "check_suite": true,
}

// FuzzExcerpt: for any event name and any bytes, Excerpt never panics and
// returns either Empty with ErrMalformed, agreeing with encoding/json on what
// is JSON, or an ASCII excerpt that is a JSON object within ExcerptMaxChars
// (Python's bare Infinity aside), or the documented hard-cut form.
func FuzzExcerpt(f *testing.F) {
	files, _ := filepath.Glob(filepath.Join("testdata", "*.json"))
	for _, file := range files {
		payload, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		for _, event := range []string{"issue_comment", "pull_request_review", "issues", "pull_request", "check_run", "status", ""} {
			f.Add(event, payload)
		}
	}
	for _, s := range []string{`{}`, `[]`, `null`, `{"comment": null}`, `{"a": "\ud800"}`, `{"a":1e400}`, "\xef\xbb\xbf{}", `{"comment":{"body":"` + strings.Repeat(`\n`, 3000) + `"}}`} {
		f.Add("issue_comment", []byte(s))
	}
	hardCutLen := ExcerptMaxChars + len("\n"+TruncatedMarker)
	f.Fuzz(func(t *testing.T, event string, payload []byte) {
		got, err := Excerpt(event, payload)
		again, err2 := Excerpt(event, payload)
		if got != again || (err == nil) != (err2 == nil) {
			t.Fatalf("not deterministic: %q / %q", got, again)
		}
		stdValid := json.Valid(bytes.TrimPrefix(payload, []byte("\xef\xbb\xbf")))
		if err != nil {
			if !errors.Is(err, ErrMalformed) || got != Empty {
				t.Fatalf("error %v with excerpt %q; want ErrMalformed with Empty", err, got)
			}
			// encoding/json does not check UTF-8, nor nest as deep as we allow.
			if stdValid && utf8.Valid(payload) && len(payload) < maxDepth {
				t.Fatalf("rejected JSON that encoding/json accepts: %v", err)
			}
			return
		}
		if !stdValid {
			t.Fatalf("accepted %q, which encoding/json rejects", payload)
		}
		text := got
		if len(got) == hardCutLen && strings.HasSuffix(got, "\n"+TruncatedMarker) {
			text = got[:ExcerptMaxChars]
		} else if len(got) > ExcerptMaxChars {
			t.Fatalf("excerpt is %d bytes, over %d", len(got), ExcerptMaxChars)
		} else {
			var top map[string]json.RawMessage
			if err := json.Unmarshal([]byte(pyInfinityAsZero(got)), &top); err != nil {
				t.Fatalf("excerpt is not a JSON object: %v\n%s", err, got)
			}
			for k := range top {
				if !topKeys[k] {
					t.Fatalf("excerpt carries top-level key %q", k)
				}
			}
		}
		for i := range len(text) {
			if text[i] < 0x20 && text[i] != '\n' || text[i] >= 0x7f {
				t.Fatalf("byte %#x at %d: excerpt must be printable ASCII", text[i], i)
			}
		}
	})
}
