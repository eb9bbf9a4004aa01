package envelope

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/the-loop/bus/pkg/jsonstr"
)

// The ledger envelope is a hidden HTML comment in a GitHub comment or issue
// body:
//
//	<!-- the-loop:envelope {"v":2,"id":...,"sig":"..."} -->
//
// Its signature covers the envelope and the record it sits in (Binding): the
// repository, the issue number and a digest of the body's visible text, so a
// copy pasted onto another comment, or an edited comment, does not verify
// (docs/decisions/025-envelope-bound-to-its-record.md).
//
// Its JSON is written so that nothing inside can close the comment, look like
// the self-authored marker, or spell a control keyword: every string value has
// each byte outside a small safe set escaped as \u00XX (so '-', '<', '>', '!'
// and spaces never appear raw), and EncodeLedger refuses the result if any
// forbidden text still shows up.
const (
	envelopeOpen  = "<!-- the-loop:envelope "
	envelopeClose = " -->"
)

// Version is the envelope format version, "v". Version 1 signed the envelope
// alone; its envelopes are no longer records (ErrUnbound).
const Version = 2

// MaxEnvelopeBytes bounds what ParseLedger reads, so a huge comment cannot
// make the ingress spend unbounded work.
const MaxEnvelopeBytes = 8 << 10

// Errors of ParseLedger and EncodeLedger; match with errors.Is.
var (
	// ErrNoEnvelope: the body carries no envelope.
	ErrNoEnvelope = errors.New("no ledger envelope")
	// ErrMalformed: something that starts like an envelope but is not one
	// (bad JSON, several envelopes, an unknown version).
	ErrMalformed = errors.New("malformed ledger envelope")
	// ErrForged: the envelope's signature does not verify. Such a comment is
	// judged as an ordinary comment by its poster
	// (docs/architecture.md#the-ledger).
	ErrForged = errors.New("forged ledger envelope")
	// ErrUnsafe: EncodeLedger would write text that could break out of the
	// envelope or be read as a marker or a control keyword.
	ErrUnsafe = errors.New("unsafe ledger envelope")
	// ErrNoKey: no signing key was given.
	ErrNoKey = errors.New("no envelope key")
	// ErrUnbound: a version 1 envelope. Its signature does not cover the
	// record it sits in, so a copy verifies anywhere: it is not an envelope,
	// whoever signed it (errors.Is(ErrUnbound, ErrForged) holds).
	ErrUnbound = fmt.Errorf("%w: version 1 does not bind its record", ErrForged)
)

// Binding is the record an envelope is bound to, as its reader finds it.
type Binding struct {
	// Repo is the repository, owner/repo, compared case-insensitively.
	Repo string
	// Number is the issue or pull-request number the comment is on, or 0
	// for the body of a new issue: its number is unknown when the writer
	// signs, so an issue body is bound to its repository and text only, and
	// every reader verifies an issue body with 0.
	Number int
}

// IssueBody is the Binding of the body of an issue in repo.
func IssueBody(repo string) Binding { return Binding{Repo: repo} }

// Ledger is the machine-readable record the ledger writes with every event it
// records (R3.2, R5.4).
type Ledger struct {
	V            int                `json:"v"`
	ID           string             `json:"id"`
	Type         string             `json:"type"`
	Source       string             `json:"source"`
	Actor        LedgerActor        `json:"actor"`
	Conversation LedgerConversation `json:"conversation"`
	Sig          string             `json:"sig,omitempty"`
	// Visit is the gate visit a button answer was given for (pkg/graph
	// Visit), signed with the rest, so that the dispatcher applies a relayed
	// answer only to the visit it was meant for. Empty for everything else,
	// and then absent from the JSON: envelopes without it keep their bytes.
	Visit string `json:"visit,omitempty"`
}

// LedgerActor is every id the actor's authorizedUsers entry declares.
type LedgerActor struct {
	GitHub string `json:"github,omitempty"`
	Slack  string `json:"slack,omitempty"`
	Name   string `json:"name,omitempty"`
}

// LedgerConversation is the chat thread the event came from.
type LedgerConversation struct {
	Channel  string `json:"channel,omitempty"`
	ThreadTS string `json:"thread_ts,omitempty"`
}

// SealLedger signs l for the record at b whose body compose builds around the
// envelope, and returns that body. compose is called with a placeholder first,
// to learn the visible text the signature covers, then with the envelope; it
// must put its argument in the body once and otherwise not depend on it.
// forbidden lists extra texts (the configured control keywords) that must not
// appear in the envelope; the marker and "-->" are always forbidden.
func SealLedger(key []byte, l Ledger, forbidden []string, b Binding, compose func(envelope string) string) (string, error) {
	if len(key) == 0 {
		return "", ErrNoKey
	}
	if compose == nil {
		compose = func(env string) string { return env }
	}
	visible := VisibleText(compose(placeholder))
	env, err := encode(key, l, forbidden, b, visible)
	if err != nil {
		return "", err
	}
	body := compose(env)
	if VisibleText(body) != visible || strings.Count(body, envelopeOpen) != 1 {
		return "", fmt.Errorf("%w: the body around the envelope is not the one signed", ErrUnsafe)
	}
	return body, nil
}

// placeholder stands for the envelope while SealLedger learns the visible
// text: VisibleText removes it exactly as it removes an envelope.
const placeholder = envelopeOpen + "{}" + envelopeClose

// encode returns the envelope comment for l signed over b and visible.
func encode(key []byte, l Ledger, forbidden []string, b Binding, visible string) (string, error) {
	l.V = Version
	l.Sig = ""
	canon, err := canonical(l)
	if err != nil {
		return "", err
	}
	l.Sig = sign(key, canon, b, visible)
	body, err := canonical(l)
	if err != nil {
		return "", err
	}
	out := envelopeOpen + string(body) + envelopeClose
	inner := string(body)
	if strings.Contains(inner, "--") || strings.Contains(inner, ">") || strings.Contains(inner, "<") {
		return "", fmt.Errorf("%w: comment delimiter inside", ErrUnsafe)
	}
	lower := strings.ToLower(inner)
	for _, f := range forbidden {
		f = strings.TrimSpace(f)
		if f != "" && strings.Contains(lower, strings.ToLower(f)) {
			return "", fmt.Errorf("%w: contains a control keyword", ErrUnsafe)
		}
	}
	if len(out) > MaxEnvelopeBytes {
		return "", fmt.Errorf("%w: %d bytes, limit %d", ErrUnsafe, len(out), MaxEnvelopeBytes)
	}
	return out, nil
}

// ParseLedger finds the envelope in a GitHub body and verifies it with key
// against the record the body was read from: b is where the reader found it
// (never what the envelope or the text says). It returns ErrNoEnvelope when
// there is none, ErrMalformed when there is something broken or more than
// one, and ErrForged when the signature does not verify — for another record,
// an edited text, another key or a version 1 envelope (ErrUnbound).
func ParseLedger(key []byte, b Binding, body string) (Ledger, error) {
	i := strings.Index(body, envelopeOpen)
	if i < 0 {
		return Ledger{}, ErrNoEnvelope
	}
	if strings.Count(body, envelopeOpen) > 1 {
		return Ledger{}, fmt.Errorf("%w: more than one envelope", ErrMalformed)
	}
	rest := body[i+len(envelopeOpen):]
	j := strings.Index(rest, envelopeClose)
	if j < 0 {
		return Ledger{}, fmt.Errorf("%w: unterminated", ErrMalformed)
	}
	raw := rest[:j]
	if len(raw) > MaxEnvelopeBytes || !utf8.ValidString(raw) {
		return Ledger{}, fmt.Errorf("%w: too long or not UTF-8", ErrMalformed)
	}
	dec := json.NewDecoder(strings.NewReader(raw))
	dec.DisallowUnknownFields()
	var l Ledger
	if err := dec.Decode(&l); err != nil {
		return Ledger{}, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	if dec.More() {
		return Ledger{}, fmt.Errorf("%w: trailing data", ErrMalformed)
	}
	if l.V == 1 {
		return Ledger{}, ErrUnbound
	}
	if l.V != Version {
		return Ledger{}, fmt.Errorf("%w: version %d", ErrMalformed, l.V)
	}
	if len(key) == 0 {
		return Ledger{}, ErrNoKey
	}
	got := l.Sig
	l.Sig = ""
	canon, err := canonical(l)
	if err != nil {
		return Ledger{}, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	if got == "" || !hmac.Equal([]byte(got), []byte(sign(key, canon, b, VisibleText(body)))) {
		return Ledger{}, ErrForged
	}
	l.Sig = got
	// Only the exact bytes EncodeLedger writes are an envelope: encoding/json
	// also accepts other spellings (keys in another case, other escapes),
	// and one record must have one text.
	if full, err := canonical(l); err != nil || string(full) != raw {
		return Ledger{}, fmt.Errorf("%w: not in canonical form", ErrMalformed)
	}
	return l, nil
}

// StripLedger returns body without its envelope comment (for display and for
// classifiers that must not read it).
func StripLedger(body string) string {
	i := strings.Index(body, envelopeOpen)
	if i < 0 {
		return body
	}
	j := strings.Index(body[i:], envelopeClose)
	if j < 0 {
		return body
	}
	return strings.TrimRight(body[:i], " \n") + body[i+j+len(envelopeClose):]
}

// VisibleText is the text of a record body that its envelope's signature
// covers: the body with the envelope comment removed, line endings made "\n"
// (GitHub may hand back "\r\n") and surrounding white space trimmed. The
// writer and every verifier compute it with this one function from the body
// as posted, so the self-authored marker and the attribution line are part of
// it.
func VisibleText(body string) string {
	body = strings.ReplaceAll(body, "\r\n", "\n")
	body = strings.ReplaceAll(body, "\r", "\n")
	return strings.TrimSpace(StripLedger(body))
}

// sign is the envelope's HMAC: over the version's domain, the canonical
// envelope without sig, and the binding — the lower-cased repository, the
// number and the SHA-256 of the visible text — each length-prefixed so that
// no two bindings share a message.
func sign(key, canon []byte, b Binding, visible string) string {
	digest := sha256.Sum256([]byte(visible))
	m := hmac.New(sha256.New, key)
	m.Write([]byte("the-loop envelope v2\n"))
	for _, part := range [][]byte{
		canon,
		[]byte(strings.ToLower(strings.TrimSpace(b.Repo))),
		[]byte(strconv.Itoa(b.Number)),
		digest[:],
	} {
		m.Write([]byte(strconv.Itoa(len(part)) + ":"))
		m.Write(part)
	}
	return hex.EncodeToString(m.Sum(nil))
}

// canonical is the one byte form of l that is signed and written: fields in
// struct order, string values escaped by safeJSON.
func canonical(l Ledger) ([]byte, error) {
	raw, err := json.Marshal(l)
	if err != nil {
		return nil, fmt.Errorf("encode envelope: %w", err)
	}
	return safeJSON(raw), nil
}

// safeJSON rewrites the string contents of a compact JSON document so that
// every byte outside [A-Za-z0-9_.:/@#+=,] (and every non-ASCII rune) is a
// \uXXXX escape. JSON readers decode it to the same values.
func safeJSON(raw []byte) []byte {
	var out bytes.Buffer
	in := false
	for i := 0; i < len(raw); {
		c := raw[i]
		if !in {
			out.WriteByte(c)
			if c == '"' {
				in = true
			}
			i++
			continue
		}
		if c == '"' {
			out.WriteByte(c)
			in = false
			i++
			continue
		}
		// A rune, or an escape json.Marshal wrote: decode it and re-escape
		// uniformly.
		r, n := jsonstr.DecodeRune(raw[i:])
		if n == 0 { // a broken escape, which json.Marshal never writes
			r, n = utf8.RuneError, 1
		}
		writeRune(&out, r)
		i += n
	}
	return out.Bytes()
}

func writeRune(out *bytes.Buffer, r rune) {
	if r < 0x80 && safeByte(byte(r)) {
		out.WriteByte(byte(r))
		return
	}
	if r > 0xffff {
		r1, r2 := utf16.EncodeRune(r)
		fmt.Fprintf(out, `\u%04x\u%04x`, r1, r2)
		return
	}
	fmt.Fprintf(out, `\u%04x`, r)
}

func safeByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
		strings.IndexByte("_.:/@#+=,", c) >= 0
}
