package pychar

import (
	"testing"
	"unicode/utf8"
)

// TestClasses: a few code points on each side of Python's \w and \s,
// including where Go's unicode.IsSpace disagrees with Python (U+001C..1F
// are spaces to Python) and the invalid-byte rune.
func TestClasses(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		r           rune
		word, space bool
	}{
		{'a', true, false}, {'Z', true, false}, {'_', true, false}, {'7', true, false},
		{'é', true, false}, {'٣', true, false}, {'-', false, false}, {':', false, false},
		{' ', false, true}, {'\t', false, true}, {0x1c, false, true}, {0x85, false, true},
		{0x2003, false, true}, {0x200b, false, false}, {0x3000, false, true},
		{utf8.RuneError, false, false},
	} {
		if got := IsWord(c.r); got != c.word {
			t.Errorf("IsWord(%U) = %v, want %v", c.r, got, c.word)
		}
		if got := IsSpace(c.r); got != c.space {
			t.Errorf("IsSpace(%U) = %v, want %v", c.r, got, c.space)
		}
	}
}
