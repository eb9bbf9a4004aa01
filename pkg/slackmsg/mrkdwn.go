package slackmsg

import (
	"regexp"
	"strings"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"
)

// Length is how Slack's limits are counted here: UTF-16 code units. Slack
// documents its limits in "characters" without saying which; UTF-16 units are
// never fewer than runes, so text that fits by this count fits by any.
func Length(s string) int {
	n := 0
	for _, r := range s {
		n += utf16.RuneLen(r)
		if r == unicode.ReplacementChar {
			n++ // conservative for invalid UTF-8 bytes
		}
	}
	return n
}

// piece is one atomic unit of converted output: truncation keeps or drops a
// piece whole, so an entity (&amp;), a link (<url|text>) or a surrogate pair
// is never cut in half. open reports whether a code fence is open after it.
type piece struct {
	s    string
	open bool
}

// Escape makes untrusted text inert in mrkdwn: &, < and > become entities
// (Slack's three control characters: with them escaped, no <!channel>,
// <@U…>, <#C…> or <url|spoofed text> survives), and @channel, @here and
// @everyone get a zero-width space so no client or mode ever turns them into
// a broadcast. Control characters other than newline and tab are dropped.
func Escape(s string) string {
	var b strings.Builder
	for _, p := range inline(s, false) {
		b.WriteString(p.s)
	}
	return b.String()
}

// Mrkdwn converts untrusted GitHub-flavoured markdown to escaped Slack mrkdwn
// of at most max UTF-16 units (max <= 0: unbounded), and reports whether it
// had to cut. GitHub's **bold**, ~~strike~~, # headings, - lists, fenced
// code (language tag dropped), [text](url) links and images become their
// Slack forms; a link whose text looks like a URL or a domain is shown as
// "text (<url>)" so that its visible text can never claim another target.
// Links to anything but http(s) are dropped to their text. A cut inside a
// code fence closes the fence.
func Mrkdwn(src string, max int) (string, bool) {
	// Converting costs more than linear time on pathological input (many
	// unclosed brackets); no source rune yields less than one output unit
	// except markup and control characters, so a generous prefix is all
	// the output can ever show.
	if limit := 4*max + 256; max > 0 && utf8.RuneCountInString(src) > limit {
		rs := []rune(src)
		return join(append(convert(string(rs[:limit])), piece{s: strings.Repeat(" ", max+1)}), max)
	}
	return join(convert(src), max)
}

const ellipsis = "…"

func join(ps []piece, max int) (string, bool) {
	total := 0
	for _, p := range ps {
		total += Length(p.s)
	}
	var b strings.Builder
	if max <= 0 || total <= max {
		for _, p := range ps {
			b.WriteString(p.s)
		}
		return b.String(), false
	}
	// Room for the ellipsis and a closing fence ("\n```").
	budget := max - Length(ellipsis) - 4
	n, open := 0, false
	for _, p := range ps {
		l := Length(p.s)
		if n+l > budget {
			break
		}
		b.WriteString(p.s)
		n += l
		open = p.open
	}
	out := strings.TrimRightFunc(b.String(), unicode.IsSpace) + ellipsis
	if open {
		out += "\n```"
	}
	return out, true
}

var (
	reFence   = regexp.MustCompile("^\\s*(```|~~~)")
	reHeading = regexp.MustCompile(`^\s{0,3}#{1,6}\s+(.*?)\s*#*\s*$`)
	reList    = regexp.MustCompile(`^(\s*)[-*+]\s+(.*)$`)
	reQuote   = regexp.MustCompile(`^\s{0,3}>\s?(.*)$`)
)

// convert turns markdown into pieces, line by line.
func convert(src string) []piece {
	src = strings.ReplaceAll(src, "\r\n", "\n")
	var out []piece
	inFence := false
	lines := strings.Split(src, "\n")
	for i, line := range lines {
		if i > 0 {
			out = append(out, piece{s: "\n", open: inFence})
		}
		if reFence.MatchString(line) {
			// The language tag (```go) is dropped: Slack would show it as
			// the code's first line.
			inFence = !inFence
			out = append(out, piece{s: "```", open: inFence})
			continue
		}
		if inFence {
			for _, p := range inline(line, false) {
				p.open = true
				out = append(out, p)
			}
			continue
		}
		switch {
		case reHeading.MatchString(line):
			m := reHeading.FindStringSubmatch(line)
			out = append(out, piece{s: "*"})
			out = append(out, inline(m[1], true)...)
			out = append(out, piece{s: "*"})
		case reList.MatchString(line):
			m := reList.FindStringSubmatch(line)
			out = append(out, piece{s: m[1] + "• "})
			out = append(out, inline(m[2], true)...)
		case reQuote.MatchString(line):
			// A leading ">" is Slack's quote too; alone it cannot form a
			// <…> construct, so it is the one ">" left unescaped.
			m := reQuote.FindStringSubmatch(line)
			out = append(out, piece{s: "> "})
			out = append(out, inline(m[1], true)...)
		default:
			out = append(out, inline(line, true)...)
		}
	}
	return out
}

var broadcasts = []string{"channel", "here", "everyone"}

// inline converts one line. With md false it only escapes (code and fallback
// text); with md it also converts GitHub's inline markdown.
func inline(s string, md bool) []piece {
	var out []piece
	rs := []rune(s)
	for i := 0; i < len(rs); i++ {
		r := rs[i]
		if md {
			switch {
			case r == '`':
				if j := indexRune(rs, i+1, '`'); j > i {
					out = append(out, piece{s: "`" + Escape(string(rs[i+1:j])) + "`"})
					i = j
					continue
				}
			case hasPrefix(rs, i, "**"):
				// GitHub's bold is Slack's *bold*. __bold__ is left alone:
				// it is also how Python's __init__ is written.
				out = append(out, piece{s: "*"})
				i++
				continue
			case hasPrefix(rs, i, "~~"):
				out = append(out, piece{s: "~"})
				i++
				continue
			case r == '!' && hasPrefix(rs, i, "!["):
				if text, u, n, ok := mdLink(rs, i+1); ok {
					out = append(out, linkPieces(text, u, true)...)
					i += n
					continue
				}
			case r == '[':
				if text, u, n, ok := mdLink(rs, i); ok {
					out = append(out, linkPieces(text, u, false)...)
					i += n - 1
					continue
				}
			case (r == 'h' || r == 'H') && wordBoundary(rs, i) && (i == 0 || rs[i-1] != '<'):
				if u, n := bareURL(rs, i); n > 0 {
					out = append(out, piece{s: "<" + escapeURL(u) + ">"})
					i += n - 1
					continue
				}
			}
		}
		if r == '@' && wordBoundary(rs, i) {
			for _, w := range broadcasts {
				if len(rs) >= i+1+len(w) && strings.EqualFold(string(rs[i+1:i+1+len(w)]), w) {
					out = append(out, piece{s: "@\u200b"})
					r = 0
					break
				}
			}
			if r == 0 {
				continue
			}
		}
		switch {
		case r == '&':
			out = append(out, piece{s: "&amp;"})
		case r == '<':
			out = append(out, piece{s: "&lt;"})
		case r == '>':
			out = append(out, piece{s: "&gt;"})
		case r == '\t':
			out = append(out, piece{s: " "})
		case r == '\n':
			out = append(out, piece{s: "\n"})
		case unicode.IsControl(r) || r == unicode.ReplacementChar:
			// Dropped: invisible, and a NUL or a stray byte has no place in
			// a chat message.
		default:
			out = append(out, piece{s: string(r)})
		}
	}
	return out
}

func hasPrefix(rs []rune, i int, p string) bool {
	for _, r := range p {
		if i >= len(rs) || rs[i] != r {
			return false
		}
		i++
	}
	return true
}

func indexRune(rs []rune, from int, r rune) int {
	for j := from; j < len(rs); j++ {
		if rs[j] == r {
			return j
		}
	}
	return -1
}

func wordBoundary(rs []rune, i int) bool {
	return i == 0 || !(unicode.IsLetter(rs[i-1]) || unicode.IsDigit(rs[i-1]) || rs[i-1] == '_')
}

// mdLink parses [text](url) at rs[i] == '['. n is the runes consumed.
func mdLink(rs []rune, i int) (text, u string, n int, ok bool) {
	if i >= len(rs) || rs[i] != '[' {
		return "", "", 0, false
	}
	close := -1
	depth := 0
	for j := i; j < len(rs); j++ {
		if rs[j] == '[' {
			depth++
		} else if rs[j] == ']' {
			depth--
			if depth == 0 {
				close = j
				break
			}
		}
	}
	if close < 0 || close+1 >= len(rs) || rs[close+1] != '(' {
		return "", "", 0, false
	}
	end := indexRune(rs, close+2, ')')
	if end < 0 {
		return "", "", 0, false
	}
	target := strings.TrimSpace(string(rs[close+2 : end]))
	if sp := strings.IndexAny(target, " \t"); sp >= 0 {
		target = target[:sp] // [text](url "title")
	}
	return string(rs[i+1 : close]), target, end - i + 1, true
}

func linkPieces(text, u string, image bool) []piece {
	var out []piece
	if text == "" && !image {
		text = u
	}
	if !SafeURL(u) {
		return inline(text, true)
	}
	if text == "" || image || looksLikeURL(text) {
		if text != "" {
			out = append(out, inline(text, false)...)
			out = append(out, piece{s: " ("})
		}
		out = append(out, piece{s: "<" + escapeURL(u) + ">"})
		if text != "" {
			out = append(out, piece{s: ")"})
		}
		return out
	}
	// One piece: a link is kept or cut whole.
	label := strings.ReplaceAll(Escape(text), "|", "¦")
	return []piece{{s: "<" + escapeURL(u) + "|" + label + ">"}}
}

// looksLikeURL: visible link text that could pass for an address.
func looksLikeURL(s string) bool {
	return strings.ContainsAny(s, "./:") || strings.Contains(strings.ToLower(s), "www")
}

// bareURL reads an http(s) URL starting at rs[i]; n is 0 when there is none.
func bareURL(rs []rune, i int) (string, int) {
	rest := strings.ToLower(string(rs[i:min(len(rs), i+8)]))
	if !strings.HasPrefix(rest, "http://") && !strings.HasPrefix(rest, "https://") {
		return "", 0
	}
	j := i
	for j < len(rs) && !unicode.IsSpace(rs[j]) && !strings.ContainsRune("<>\"|`", rs[j]) {
		j++
	}
	for j > i && strings.ContainsRune(".,;:!?)]'*_~", rs[j-1]) {
		j--
	}
	u := string(rs[i:j])
	if !SafeURL(u) {
		return "", 0
	}
	return u, j - i
}

// SafeURL reports whether u may be a link target or a button URL: http or
// https, at most 3000 characters (Slack's limit for a button URL), with no
// character that could end or split a <url|text> construct.
func SafeURL(u string) bool {
	l := strings.ToLower(u)
	if !strings.HasPrefix(l, "https://") && !strings.HasPrefix(l, "http://") {
		return false
	}
	if len(u) > 3000 || len(u) <= len("https://") {
		return false
	}
	for _, r := range u {
		if r <= ' ' || r == 0x7f || strings.ContainsRune("<>|\"`", r) || unicode.IsSpace(r) {
			return false
		}
	}
	return true
}

// escapeURL escapes the one control character a safe URL may still hold.
func escapeURL(u string) string { return strings.ReplaceAll(u, "&", "&amp;") }

// Plain makes text safe for a plain_text object (headers, button labels): one
// line, no control characters, at most max UTF-16 units with an ellipsis when
// cut. plain_text is never parsed for mrkdwn, so nothing else is escaped.
func Plain(s string, max int) string {
	s = strings.Join(strings.Fields(strings.Map(func(r rune) rune {
		if unicode.IsControl(r) || r == unicode.ReplacementChar {
			return ' '
		}
		return r
	}, s)), " ")
	if Length(s) <= max {
		return s
	}
	var b strings.Builder
	n := 0
	for _, r := range s {
		if n+utf16.RuneLen(r) > max-1 {
			break
		}
		b.WriteRune(r)
		n += utf16.RuneLen(r)
	}
	return strings.TrimRightFunc(b.String(), unicode.IsSpace) + ellipsis
}
