package graph

import (
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/the-loop/bus/pkg/control"
	"github.com/the-loop/bus/pkg/envelope"
)

// The fixed texts a renderer's gate buttons inject (R4.3, decision 014). A
// press enters the pipeline as a reply carrying exactly this text, and the
// Feedback classifier reads ApproveText as approved and RequestChangesText as
// changes-requested. "Approve" alone is not an approval phrase, so a button
// must never inject its label.
const (
	ApproveText        = "Approved — LGTM"
	RequestChangesText = "Request changes"
)

// AttributionPrefix starts the visible attribution line of a relayed record
// ("📨 Relayed from `U123` on the **slack** channel:", written by the
// ledger-writer, R3.5). RelayedText drops every line that starts with it,
// after leading spaces and markdown emphasis or quote marks ('_', '*', '>'),
// so the record's wording is never classified.
const AttributionPrefix = "📨 "

// NegationWindow is how many characters before a phrase a negation word
// still negates it (docs/requirements.md K20).
const NegationWindow = 40

// Phrases matched by the classifiers, lower case (docs/requirements.md K20).
var (
	changePhrases   = []string{"changes requested", "request changes", "please change", "rejected"}
	approvalPhrases = []string{"approved", "lgtm", "looks good", "ship it"}
	donePhrases     = []string{
		"done", "all done", "we're done", "that's all", "thats all", "nothing else", "no more",
		"all set", "close it", "close this", "lgtm", "looks good", "ship it", "approved",
	}
	// negations: whole words; any word ending in "n't" negates too.
	negations = []string{"not", "no", "nope", "never", "cannot", "dont", "isnt", "arent", "doesnt", "cant", "wont"}
)

// RelayedText is the part of a comment body a person wrote: the ledger
// envelope, every other HTML comment (invisible on GitHub, and where the
// self-authored marker lives) and the leading attribution lines are removed,
// and the rest is trimmed. Every classifier reads bodies through it, so callers
// may pass raw bodies; envelope.StripLedger first is harmless.
func RelayedText(body string) string {
	body = envelope.StripLedger(body)
	var b strings.Builder
	for {
		i := strings.Index(body, "<!--")
		if i < 0 {
			b.WriteString(body)
			break
		}
		b.WriteString(body[:i])
		j := strings.Index(body[i+4:], "-->")
		if j < 0 {
			break // an unclosed comment hides the rest
		}
		body = body[i+4+j+3:]
	}
	// Attribution lines head a record; only leading ones are dropped, so a
	// line in the middle of a person's text is always read.
	lines := strings.Split(b.String(), "\n")
	i := 0
	for i < len(lines) && (strings.TrimSpace(lines[i]) == "" || IsAttributionLine(lines[i])) {
		i++
	}
	return strings.TrimSpace(strings.Join(lines[i:], "\n"))
}

// IsAttributionLine reports whether line is a relayed record's attribution
// line (see AttributionPrefix).
func IsAttributionLine(line string) bool {
	return strings.HasPrefix(strings.TrimLeft(line, " \t>*_"), AttributionPrefix)
}

// Verdict is a classifier's answer.
type Verdict struct {
	Outcome Outcome
	// Reason says why, in fixed words (never comment text).
	Reason string
	// Deciders are the indexes (into the bodies given) of the comments that
	// decided the outcome: the approvers of an approval, the comment that
	// said done or carried the execute keyword. Empty for wait,
	// changes-requested and more-work.
	Deciders []int
}

// Verdict reasons.
const (
	ReasonNoComments   = "no authorized feedback yet"
	ReasonNotDecisive  = "feedback so far is not decisive; the gate stays open"
	ReasonObjection    = "an authorized comment negates or questions an approval; the gate stays open"
	ReasonChanges      = "changes were requested"
	ReasonApproved     = "approved"
	ReasonWithComments = "approved, with comments"
	ReasonDone         = "the newest reply says the work is done"
	ReasonMoreWork     = "the newest reply asks for more"
	ReasonNoKeyword    = "no authorized comment carries the execute keyword"
	ReasonNoExecute    = "the execute keyword is disabled"
	ReasonExecute      = "the execute keyword was given"
)

// Classify runs classifier c over the bodies of authorized comments, oldest
// first. executeKeyword is the configured execute keyword (routing.control
// keywords, "the-loop execute" by default); only Execute reads it, and an
// empty keyword means execution is disabled, so the gate waits.
func Classify(c Classifier, bodies []string, executeKeyword string) Verdict {
	switch c {
	case Feedback:
		return ClassifyFeedback(bodies)
	case Reply:
		return ClassifyReply(bodies)
	case Execute:
		return ClassifyExecute(bodies, executeKeyword)
	}
	return Verdict{Outcome: OutcomeWait, Reason: "unknown classifier"}
}

// texts returns the relayed, normalised text of each body, "" for a body
// with nothing a person wrote, and how many are non-empty.
func texts(bodies []string) ([]string, int) {
	out := make([]string, len(bodies))
	n := 0
	for i, b := range bodies {
		out[i] = normalise(RelayedText(b))
		if out[i] != "" {
			n++
		}
	}
	return out, n
}

// normalise lower-cases s, folds typographic apostrophes to ' and removes
// zero-width characters (which would otherwise hide a visible "not").
func normalise(s string) string {
	s = strings.Map(func(r rune) rune {
		switch r {
		case '\u2019', '\u2018', '\u02bc':
			return '\''
		case '\u200b', '\u200c', '\u200d', '\u2060', '\ufeff', '\u00ad':
			return -1
		}
		return r
	}, s)
	return strings.ToLower(s)
}

// ClassifyFeedback is the feedback gate (docs/requirements.md K20), with one
// tightening so that an objection or a question is never an approval:
//
//  1. If the joined text contains (as a substring) "changes requested",
//     "request changes", "please change" or "rejected": changes-requested.
//  2. Each comment is then read for the approval phrases "approved", "lgtm",
//     "looks good", "ship it", matched as whole words. An occurrence is an
//     objection when it is negated (a negation word — not, no, nope, never,
//     cannot, or any word ending in n't — among the NegationWindow characters
//     before it, counted back no further than the start of its sentence) or
//     questioned (the first sentence end after it is '?'). If any comment
//     holds an objection: wait.
//  3. Otherwise, if any comment holds an approval: approved-with-comments
//     when more than one comment has text or the joined text contains the
//     substring "but" or "nit" (exactly docs/requirements.md K20, pitfalls
//     included: "unit", "distributed"), approved otherwise. The deciders are
//     the approving comments.
//  4. Otherwise wait.
//
// Bodies go through RelayedText first; a body with no text left is not a
// comment.
func ClassifyFeedback(bodies []string) Verdict {
	ts, n := texts(bodies)
	if n == 0 {
		return Verdict{Outcome: OutcomeWait, Reason: ReasonNoComments}
	}
	joined := strings.Join(ts, "\n")
	for _, p := range changePhrases {
		if strings.Contains(joined, p) {
			return Verdict{Outcome: OutcomeChangesRequested, Reason: ReasonChanges}
		}
	}
	var approvers []int
	for i, t := range ts {
		found, objection := scan(t, approvalPhrases)
		if objection {
			return Verdict{Outcome: OutcomeWait, Reason: ReasonObjection}
		}
		if found {
			approvers = append(approvers, i)
		}
	}
	if len(approvers) == 0 {
		return Verdict{Outcome: OutcomeWait, Reason: ReasonNotDecisive}
	}
	if n > 1 || strings.Contains(joined, "but") || strings.Contains(joined, "nit") {
		return Verdict{Outcome: OutcomeApprovedWithComments, Reason: ReasonWithComments, Deciders: approvers}
	}
	return Verdict{Outcome: OutcomeApproved, Reason: ReasonApproved, Deciders: approvers}
}

// ClassifyReply is the reply gate (docs/requirements.md K20): only the newest
// comment with text counts. It is done when it holds a done phrase ("done",
// "all set", "that's all", "lgtm", …, whole phrases) and no occurrence of one
// is negated or questioned (the rule of ClassifyFeedback; a negation word that
// is itself part of a phrase, as in "no more", negates nothing). Any other
// reply is more-work; no reply is wait.
func ClassifyReply(bodies []string) Verdict {
	ts, _ := texts(bodies)
	for i := len(ts) - 1; i >= 0; i-- {
		if ts[i] == "" {
			continue
		}
		if found, objection := scan(ts[i], donePhrases); found && !objection {
			return Verdict{Outcome: OutcomeDone, Reason: ReasonDone, Deciders: []int{i}}
		}
		return Verdict{Outcome: OutcomeMoreWork, Reason: ReasonMoreWork}
	}
	return Verdict{Outcome: OutcomeWait, Reason: ReasonNoComments}
}

// ClassifyExecute is the phase-selection gate (docs/requirements.md K20):
// execute once any comment carries keyword, matched exactly as the control
// grammar matches it (case-insensitive, whole token: no word character, '-' or
// ':' against either end), else wait. The decider is the newest such comment.
// Only the relayed text is searched, so a keyword inside an envelope or an
// HTML comment does not count.
func ClassifyExecute(bodies []string, keyword string) Verdict {
	keyword = strings.TrimSpace(keyword)
	if keyword == "" {
		return Verdict{Outcome: OutcomeWait, Reason: ReasonNoExecute}
	}
	overrides := map[string]string{}
	for _, c := range control.Commands() {
		overrides[string(c)] = ""
	}
	overrides[string(control.Execute)] = keyword
	g, err := control.New(true, overrides)
	if err != nil {
		return Verdict{Outcome: OutcomeWait, Reason: ReasonNoExecute}
	}
	for i := len(bodies) - 1; i >= 0; i-- {
		if g.Parse(RelayedText(bodies[i])).Command == control.Execute {
			return Verdict{Outcome: OutcomeExecute, Reason: ReasonExecute, Deciders: []int{i}}
		}
	}
	return Verdict{Outcome: OutcomeWait, Reason: ReasonNoKeyword}
}

type span struct{ start, end int }

// scan looks for whole-word occurrences of phrases in the normalised text t.
// found: at least one occurrence; objection: at least one occurrence is
// negated or questioned.
func scan(t string, phrases []string) (found, objection bool) {
	var spans []span
	for _, p := range phrases {
		for from := 0; from < len(t); {
			i := strings.Index(t[from:], p)
			if i < 0 {
				break
			}
			s := span{from + i, from + i + len(p)}
			from = s.end
			if wordAt(t, s.start, -1) || wordAt(t, s.end, +1) {
				continue
			}
			spans = append(spans, s)
		}
	}
	for _, s := range spans {
		found = true
		if negated(t, s.start, spans) || questioned(t, s.end) {
			objection = true
		}
	}
	return found, objection
}

// wordAt reports whether the rune just before (dir -1) or at (dir +1) byte
// offset i of t is a letter or digit.
func wordAt(t string, i, dir int) bool {
	var r rune
	if dir < 0 {
		if i == 0 {
			return false
		}
		r, _ = utf8.DecodeLastRuneInString(t[:i])
	} else {
		if i >= len(t) {
			return false
		}
		r, _ = utf8.DecodeRuneInString(t[i:])
	}
	return unicode.IsLetter(r) || unicode.IsDigit(r)
}

func isSentenceEnd(r rune) bool {
	return r == '.' || r == '!' || r == '?' || r == ';' || r == '\n'
}

// negated reports whether a negation word lies in the NegationWindow runes
// before byte offset at, within the same sentence, outside every phrase
// occurrence.
func negated(t string, at int, spans []span) bool {
	lo := at
	for k := 0; k < NegationWindow && lo > 0; k++ {
		r, size := utf8.DecodeLastRuneInString(t[:lo])
		if isSentenceEnd(r) {
			break
		}
		lo -= size
	}
	// Tokenise t[lo:at] into words of letters, digits and apostrophes.
	for i := lo; i < at; {
		r, size := utf8.DecodeRuneInString(t[i:])
		if !isWordRune(r) {
			i += size
			continue
		}
		j := i
		for j < at {
			r2, s2 := utf8.DecodeRuneInString(t[j:])
			if !isWordRune(r2) {
				break
			}
			j += s2
		}
		// A word cut by the window's left edge is still the word it is.
		if i == lo && wordAt(t, lo, -1) {
			i = j
			continue
		}
		w := strings.Trim(t[i:j], "'")
		if isNegation(w) && !inSpans(i, spans) {
			return true
		}
		i = j
	}
	return false
}

func isWordRune(r rune) bool { return unicode.IsLetter(r) || unicode.IsDigit(r) || r == '\'' }

func isNegation(w string) bool {
	for _, n := range negations {
		if w == n {
			return true
		}
	}
	return strings.HasSuffix(w, "n't")
}

func inSpans(i int, spans []span) bool {
	for _, s := range spans {
		if s.start <= i && i < s.end {
			return true
		}
	}
	return false
}

// questioned reports whether the first sentence end at or after byte offset
// at is a question mark.
func questioned(t string, at int) bool {
	for _, r := range t[at:] {
		if isSentenceEnd(r) {
			return r == '?'
		}
	}
	return false
}
