package dispatcher

import (
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/the-loop/bus/services/dispatcher/internal/prompt"
)

const (
	promptEvent = prompt.Event
	promptSpawn = prompt.Spawn
)

// promptData is what the template's placeholders stand for. Apart from the
// template itself, all of it comes from an event: the one-line fields are
// what a payload or a bus message says (an action, a repository name), and
// a CI event's branch, workflow and check names are written by whoever
// pushed the branch. None of it reaches a session raw (decision 038): a
// control character — a newline that would start a line of its own, an
// ESC sequence the session's terminal would act on, a bidi override that
// reorders what is read — is written as a \uXXXX escape. The excerpt and
// the graph context are blocks whose line breaks our own code wrote; only
// their other control characters are escaped (the excerpt, JSON with every
// non-ASCII character escaped, has none, so it is unchanged).
func promptData(in *input, ex, graphContext string) prompt.Data {
	return prompt.Data{
		WorkItem: promptLine(in.ref), Event: promptLine(in.ghEvent), Action: promptLine(in.action),
		Repository: promptLine(in.repository), DeliveryID: promptLine(in.deliveryID),
		Excerpt: promptBlock(ex), GraphContext: promptBlock(graphContext),
	}
}

// promptLine escapes every control character of s, line breaks included.
func promptLine(s string) string { return escapeControls(s, false) }

// promptBlock escapes every control character of s but its line breaks and
// tabs.
func promptBlock(s string) string { return escapeControls(s, true) }

func escapeControls(s string, block bool) string {
	clean := utf8.ValidString(s)
	for _, r := range s {
		if !clean || needsEscape(r, block) {
			clean = false
			break
		}
	}
	if clean {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 16)
	for _, r := range s { // an invalid byte reads as U+FFFD, and is written so
		if needsEscape(r, block) {
			fmt.Fprintf(&b, `\u%04x`, r)
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

// needsEscape: C0 and C1 controls and DEL, the Unicode line and paragraph
// separators, and the bidi embeddings, overrides, isolates and marks.
func needsEscape(r rune, block bool) bool {
	switch {
	case r == '\n' || r == '\t':
		return !block
	case r < 0x20, r == 0x7f, r >= 0x80 && r <= 0x9f:
		return true
	case r == 0x2028, r == 0x2029, r == 0x200e, r == 0x200f, r == 0x061c,
		r >= 0x202a && r <= 0x202e, r >= 0x2066 && r <= 0x2069:
		return true
	}
	return false
}
