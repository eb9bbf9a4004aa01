package excerpt

import (
	"encoding/json"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/the-loop/bus/internal/testsupport/testkit"
)

// delivery is one shared webhook fixture and the original's excerpt of it.
type delivery struct {
	name    string // path under github-webhooks/, e.g. "issue_comment/created.json"
	event   string // the X-GitHub-Event value: the file's directory
	payload []byte
	want    string
}

// sharedDeliveries loads every delivery of expected.json, in name order, or
// skips the test or benchmark when the shared workspace is absent.
func sharedDeliveries(tb testing.TB) []delivery {
	tb.Helper()
	hooks := testkit.SharedTestdata(tb, "github-webhooks")
	raw, err := os.ReadFile(testkit.SharedTestdata(tb, "excerpt", "expected.json"))
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
		payload, err := os.ReadFile(filepath.Join(hooks, filepath.FromSlash(name)))
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
