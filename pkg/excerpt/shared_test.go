package excerpt

import (
	"encoding/json"
	"errors"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// delivery is one shared webhook fixture and the original's excerpt of it.
type delivery struct {
	name    string // path under github-webhooks/, e.g. "issue_comment/created.json"
	event   string // the X-GitHub-Event value: the file's directory
	payload []byte
	want    string
}

// sharedDir finds ../shared/testdata from the repository root, or reports why
// it cannot: the shared workspace is not part of a clone.
func sharedDir() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			break
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.mod above the package: cannot find the repository root")
		}
		dir = parent
	}
	td := filepath.Join(dir, "..", "shared", "testdata")
	for _, sub := range []string{"github-webhooks", filepath.Join("excerpt", "expected.json")} {
		if _, err := os.Stat(filepath.Join(td, sub)); errors.Is(err, fs.ErrNotExist) {
			return "", errors.New(filepath.Join(td, sub) + " not found (clone outside the shared workspace)")
		}
	}
	return td, nil
}

// sharedDeliveries loads every delivery of expected.json, in name order, or
// skips the test or benchmark when the shared workspace is absent.
func sharedDeliveries(tb testing.TB) []delivery {
	tb.Helper()
	td, err := sharedDir()
	if err != nil {
		tb.Skipf("shared webhook fixtures unavailable, skipping: %v", err)
	}
	raw, err := os.ReadFile(filepath.Join(td, "excerpt", "expected.json"))
	if err != nil {
		tb.Fatal(err)
	}
	var expected map[string]string
	if err := json.Unmarshal(raw, &expected); err != nil {
		tb.Fatalf("expected.json: %v", err)
	}
	var out []delivery
	for _, name := range slices.Sorted(maps.Keys(expected)) {
		event, _, ok := strings.Cut(name, "/")
		if !ok {
			tb.Fatalf("expected.json key %q has no event directory", name)
		}
		payload, err := os.ReadFile(filepath.Join(td, "github-webhooks", filepath.FromSlash(name)))
		if err != nil {
			tb.Fatal(err)
		}
		out = append(out, delivery{name: name, event: event, payload: payload, want: expected[name]})
	}
	return out
}

// TestSharedDeliveries: every shared delivery renders byte for byte what the
// original Python implementation rendered (the expected.json beside them).
func TestSharedDeliveries(t *testing.T) {
	t.Parallel()
	ds := sharedDeliveries(t)
	if len(ds) != 283 {
		t.Errorf("expected.json holds %d deliveries, want 283", len(ds))
	}
	matched := 0
	for _, d := range ds {
		got, err := Excerpt(d.event, d.payload)
		if err != nil {
			t.Errorf("%s: %v", d.name, err)
			continue
		}
		checkInvariants(t, got)
		if got != d.want {
			t.Errorf("%s (event %s) mismatch (-want +got):\n%s", d.name, d.event, cmp.Diff(d.want, got))
			continue
		}
		matched++
	}
	t.Logf("%d/%d shared deliveries match the original byte for byte", matched, len(ds))
}

// BenchmarkExcerpt distils every shared delivery once per iteration; ns/op and
// allocs/op are per delivery.
func BenchmarkExcerpt(b *testing.B) {
	ds := sharedDeliveries(b)
	var bytes int64
	for _, d := range ds {
		bytes += int64(len(d.payload))
	}
	b.SetBytes(bytes / int64(len(ds)))
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		d := ds[i%len(ds)]
		if _, err := Excerpt(d.event, d.payload); err != nil {
			b.Fatal(err)
		}
	}
}
