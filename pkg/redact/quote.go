package redact

import "strings"

// Quote formats text as the mirror comment quotes a reply: every line prefixed
// with "> ", joined by "\n". Lines are split as Python's str.splitlines does
// (\n, \r\n, \r, \v, \f, \x1c–\x1e, U+0085, U+2028, U+2029; a final line
// break adds no empty line), and an empty text becomes a single "> ".
func Quote(text string) string {
	lines := splitLines(text)
	if len(lines) == 0 {
		return "> "
	}
	var b strings.Builder
	for i, line := range lines {
		if i > 0 {
			b.WriteByte('\n')
		}
		b.WriteString("> ")
		b.WriteString(line)
	}
	return b.String()
}

// splitLines is Python's str.splitlines() without keepends.
func splitLines(text string) []string {
	var lines []string
	start := 0
	for i := 0; i < len(text); {
		r, size := at(text, i)
		if !isLineBreak(r) {
			i += size
			continue
		}
		lines = append(lines, text[start:i])
		i += size
		if r == '\r' && i < len(text) && text[i] == '\n' {
			i++
		}
		start = i
	}
	if start < len(text) {
		lines = append(lines, text[start:])
	}
	return lines
}

func isLineBreak(r rune) bool {
	switch r {
	case '\n', '\r', '\v', '\f', 0x1c, 0x1d, 0x1e, 0x85, 0x2028, 0x2029:
		return true
	}
	return false
}
