package jsonstr

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"
)

// decodeStd decodes content (a JSON string between its quotes) with
// DecodeRune the way encoding/json reads it: unpaired surrogates and bytes
// that are not UTF-8 become U+FFFD.
func decodeStd(content []byte) (string, bool) {
	var b []byte
	for i := 0; i < len(content); {
		if content[i] == '"' || content[i] < 0x20 {
			return "", false // not string content: the scanners stop here
		}
		r, n := DecodeRune(content[i:])
		if n == 0 {
			return "", false
		}
		if IsSurrogate(r) {
			r = utf8.RuneError
		}
		b = utf8.AppendRune(b, r)
		i += n
	}
	return string(b), true
}

func checkAsEncodingJSON(t *testing.T, content string) {
	t.Helper()
	var want string
	werr := json.Unmarshal([]byte(`"`+content+`"`), &want)
	got, ok := decodeStd([]byte(content))
	if ok != (werr == nil) {
		t.Fatalf("%q: DecodeRune ok=%v, encoding/json error %v", content, ok, werr)
	}
	if ok && got != want {
		t.Fatalf("%q: DecodeRune %q, encoding/json %q", content, got, want)
	}
}

var cases = []string{
	``, `plain`, `tab\there`, `\"\\\/\b\f\n\r\t`, `\u00e9t\u00C9`, `é — 😀`,
	`\ud83d\ude00`, `\ud83d`, `\ude00\ud83d`, `\ud83dx`, `\ud83d\u0041`, `\ud83d\ud83d\ude00`,
	`\u12`, `\uZZZZ`, `\x`, `\`, "bad\xffbyte", `\u2028\u2029`,
}

// TestDecodeRuneAsEncodingJSON: with encoding/json's reading of unpaired
// surrogates, decoding rune by rune gives what encoding/json gives, and
// refuses what it refuses.
func TestDecodeRuneAsEncodingJSON(t *testing.T) {
	for _, c := range cases {
		checkAsEncodingJSON(t, c)
	}
}

// TestUnpairedSurrogateKept: an unpaired escaped surrogate is returned as
// itself (the excerpt keeps it, as Python does), a pair as one code point.
func TestUnpairedSurrogateKept(t *testing.T) {
	for in, want := range map[string]struct {
		r rune
		n int
	}{
		`\ud83d\ude00`: {0x1F600, 12},
		`\ud83dx`:      {0xD83D, 6},
		`\ude00\ud83d`: {0xDE00, 6},
		`\ud83d\u0041`: {0xD83D, 6},
		`\u004A`:       {'J', 6},
		`\/`:           {'/', 2},
		`é`:            {'é', 2},
		`\q`:           {utf8.RuneError, 0},
	} {
		if r, n := DecodeRune([]byte(in)); r != want.r || n != want.n {
			t.Errorf("DecodeRune(%q) = %U, %d; want %U, %d", in, r, n, want.r, want.n)
		}
	}
}

func FuzzDecodeRune(f *testing.F) {
	for _, c := range cases {
		f.Add(c)
	}
	f.Fuzz(func(t *testing.T, content string) {
		if strings.ContainsAny(content, "\"") {
			return
		}
		checkAsEncodingJSON(t, content)
	})
}
