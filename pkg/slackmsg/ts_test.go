package slackmsg

import "testing"

func TestCompareTS(t *testing.T) {
	for _, c := range []struct {
		a, b string
		want int
	}{
		{"999.000100", "1000.000100", -1},
		{"1000.000100", "999.000100", 1},
		{"1700000000.000100", "1700000000.000100", 0},
		{"1700000000.1", "1700000000.000100", 1}, // short fractions are padded, not compared as text
		{"1700000000.000099", "1700000000.0001", -1},
		{"1700000000", "1700000000.000000", 0},
	} {
		if got := CompareTS(c.a, c.b); got != c.want {
			t.Errorf("CompareTS(%q, %q) = %d, want %d", c.a, c.b, got, c.want)
		}
	}
}
