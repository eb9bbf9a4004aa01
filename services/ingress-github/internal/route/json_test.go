package route

import (
	"bytes"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// stdDecode is what Decode did before parseJSON: encoding/json with
// UseNumber, refusing trailing data.
func stdDecode(b []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, io.ErrUnexpectedEOF
	}
	return v, nil
}

var jsonCases = []string{
	`{}`, ` {"a":1} `, `{"a":1}{"b":2}`, `{"a":1} x`, `[1,2,3]`, `"s"`, `12`, `-0`, `-`, `01`, `1.`, `1.5e+3`, `1e`, `1E-2`,
	`{"a":tru}`, `{"a":true,"b":false,"c":null}`, `{"a":nul`, `{"a"}`, `{"a":1,}`, `[1,]`, `[`, `{`, `{"a":[{"b":[]}]}`,
	`{"a":"\u00e9\n\t\"\\\/\b\f\r"}`, `{"a":"\ud83d\ude00"}`, `{"a":"\ud83d"}`, `{"a":"\ud83d\u0041"}`, `{"a":"\ude00\ud83d"}`,
	`{"a":"\ud83d\uZZZZ"}`, `{"a":"\x"}`, "{\"a\":\"\x01\"}", "{\"a\":\"\xff\xfe\"}", "{\"\xc3\":1}", "{\"a\":\"é\"}",
	`{"a":1,"a":2}`, `{"a":"\u0000"}`, "\xef\xbb\xbf{}", ``, `   `, `{"a":"unterminated`, `{"a":"\`, `{"a":"\u12`,
	`{"big":12345678901234567890123}`, `{"a" : [ 1 , { } , [ ] ] }`,
}

// TestParseJSONAsEncodingJSON: parseJSON accepts what encoding/json
// accepts and decodes it to the same value, on hand-picked edge cases and on
// every shared GitHub example.
func TestParseJSONAsEncodingJSON(t *testing.T) {
	for _, in := range jsonCases {
		checkParse(t, []byte(in))
	}
	root := filepath.Join("..", "..", "..", "..", "..", "shared", "testdata", "github-webhooks")
	files, _ := filepath.Glob(filepath.Join(root, "*", "*.json"))
	if len(files) == 0 {
		t.Logf("shared GitHub examples not found under %s: only the hand-picked cases ran", root)
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		checkParse(t, b)
	}
	deep := strings.Repeat("[", maxJSONDepth) + strings.Repeat("]", maxJSONDepth)
	checkParse(t, []byte(deep))
	checkParse(t, []byte("["+deep+"]"))
}

func checkParse(t *testing.T, in []byte) {
	t.Helper()
	want, werr := stdDecode(in)
	got, gerr := parseJSON(in)
	if (werr == nil) != (gerr == nil) {
		t.Fatalf("%.80q: parseJSON error %v, encoding/json error %v", in, gerr, werr)
	}
	if werr == nil && !reflect.DeepEqual(got, want) {
		t.Fatalf("%.80q: parseJSON = %#v, encoding/json = %#v", in, got, want)
	}
}

// FuzzParseJSON holds parseJSON to encoding/json on any input.
func FuzzParseJSON(f *testing.F) {
	for _, in := range jsonCases {
		f.Add([]byte(in))
	}
	f.Fuzz(func(t *testing.T, in []byte) { checkParse(t, in) })
}

// BenchmarkDecode is one routing decode of a typical delivery (a pull
// request opened, 28 kB), with the parser and, as "std", with encoding/json.
func BenchmarkDecode(b *testing.B) {
	body, err := os.ReadFile(filepath.Join("..", "..", "..", "..", "..", "shared", "testdata", "github-webhooks", "pull_request", "opened.json"))
	if err != nil {
		b.Skip("shared GitHub examples not found")
	}
	b.Run("parser", func(b *testing.B) {
		b.SetBytes(int64(len(body)))
		b.ReportAllocs()
		for b.Loop() {
			if _, err := Decode(body); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("std", func(b *testing.B) {
		b.SetBytes(int64(len(body)))
		b.ReportAllocs()
		for b.Loop() {
			if _, err := stdDecode(body); err != nil {
				b.Fatal(err)
			}
		}
	})
}
