package sessionapi

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"strings"
	"testing"
	"time"
)

func TestTokenNamesItsWorkItemAndMatchesOnlyItsHash(t *testing.T) {
	const ref = "github:octo/repo#15"
	tok, hash, err := NewToken(ref)
	if err != nil {
		t.Fatal(err)
	}
	if got, ok := TokenRef(tok); !ok || got != ref {
		t.Errorf("TokenRef = %q, %v", got, ok)
	}
	if !Matches(tok, hash) || strings.Contains(hash, tok[len(tok)-43:]) {
		t.Error("the token does not match its hash, or the hash holds the secret")
	}
	other, otherHash, err := NewToken(ref)
	if err != nil {
		t.Fatal(err)
	}
	if other == tok || Matches(tok, otherHash) || Matches(other, hash) {
		t.Error("two tokens of one work item are interchangeable")
	}
	if Matches(tok, "") {
		t.Error("a session with no stored hash accepted a token")
	}
}

func TestTokenRefRefusesMalformedTokens(t *testing.T) {
	secret := strings.Repeat("A", 43)
	enc := base64.RawURLEncoding.EncodeToString
	for name, tok := range map[string]string{
		"empty":                "",
		"no prefix":            enc([]byte("github:o/r#1")) + "." + secret,
		"another version":      "lst2." + enc([]byte("github:o/r#1")) + "." + secret,
		"no secret":            "lst1." + enc([]byte("github:o/r#1")),
		"short secret":         "lst1." + enc([]byte("github:o/r#1")) + "." + secret[1:],
		"long secret":          "lst1." + enc([]byte("github:o/r#1")) + "." + secret + "A",
		"empty ref":            "lst1.." + secret,
		"ref not base64url":    "lst1.@@@." + secret,
		"ref padded base64":    "lst1." + base64.URLEncoding.EncodeToString([]byte("github:o/r#12")) + "." + secret,
		"ref over 512 bytes":   "lst1." + enc([]byte(strings.Repeat("r", 513))) + "." + secret,
		"a dot in the ref":     "lst1.Z2l0.aHVi." + secret,
		"whitespace around it": " lst1." + enc([]byte("github:o/r#1")) + "." + secret,
	} {
		if ref, ok := TokenRef(tok); ok {
			t.Errorf("%s: TokenRef(%q) = %q, accepted", name, tok, ref)
		}
	}
}

func TestScrubRemovesSessionTokens(t *testing.T) {
	own, _, err := NewToken("github:octo/repo#1")
	if err != nil {
		t.Fatal(err)
	}
	theirs, _, err := NewToken("github:octo/repo#2")
	if err != nil {
		t.Fatal(err)
	}
	digitless := "lst1." + base64.RawURLEncoding.EncodeToString([]byte("github:octo/repo#3")) + "." + strings.Repeat("ab", 21) + "c"
	secret := own[len(own)-43:]
	in := "env: LOOP_SESSION_TOKEN=" + own + "\nsecret alone: " + secret + "\nanother: " + theirs + " and " + digitless + "\nkeep lst1.short"
	got := Scrub(in, own)
	for _, s := range []string{own, secret, theirs, theirs[len(theirs)-43:], strings.Repeat("ab", 21)} {
		if strings.Contains(got, s) {
			t.Errorf("Scrub left a token or a secret:\n%s", got)
		}
	}
	want := "env: LOOP_SESSION_TOKEN=" + TokenPlaceholder + "\nsecret alone: " + TokenPlaceholder + "\nanother: " + TokenPlaceholder + " and " + TokenPlaceholder + "\nkeep lst1.short"
	if got != want {
		t.Errorf("Scrub =\n%s\nwant\n%s", got, want)
	}
	if got := Scrub("no tokens here", ""); got != "no tokens here" {
		t.Errorf("Scrub without an own token = %q", got)
	}
}

func TestDurationIsGoText(t *testing.T) {
	b, err := json.Marshal(AskRequest{Question: "q", Wait: Duration(90 * time.Second)})
	if err != nil || !strings.Contains(string(b), `"wait":"1m30s"`) {
		t.Fatalf("marshal: %s %v", b, err)
	}
	var r AskRequest
	if err := json.Unmarshal(b, &r); err != nil || time.Duration(r.Wait) != 90*time.Second {
		t.Errorf("unmarshal: %v %v", r.Wait, err)
	}
	if err := json.Unmarshal([]byte(`{"wait":"soon"}`), &r); err == nil {
		t.Error("a wait that is no duration was accepted")
	}
}

func TestClientOutsideASession(t *testing.T) {
	_, err := Client{}.Ask(context.Background(), "", "q", time.Second)
	if err == nil || !strings.Contains(err.Error(), "LOOP_SESSION_URL") {
		t.Errorf("a client without an endpoint: %v", err)
	}
}
