package slackmsg

import (
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
)

// Slack publishes no official Block Kit schema to validate against, so Check is
// ours: Slack's documented limits for the block and element types the
// renderer uses, plus the escaping rules every message of ours keeps. The
// renderer runs it on every message before posting (a failure falls back to
// the plain text), and the golden tests run it on every golden file.

// Check reports every way m breaks Block Kit's limits or this package's
// escaping rules (errors.Join of them all), or nil.
func Check(m Message) error {
	raw, err := json.Marshal(m)
	if err != nil {
		return fmt.Errorf("slackmsg: encode: %w", err)
	}
	return CheckPayload(raw)
}

// CheckPayload is Check on a message's JSON ({"text", "blocks", …}), such as
// a golden file or what a Slack fake received.
func CheckPayload(raw []byte) error {
	var p struct {
		Text   *string          `json:"text"`
		Blocks []map[string]any `json:"blocks"`
	}
	if err := json.Unmarshal(raw, &p); err != nil {
		return fmt.Errorf("slackmsg: decode: %w", err)
	}
	c := &checker{safety: true, maxBlocks: MaxBlocks}
	switch {
	case p.Text == nil || *p.Text == "":
		c.fail("text: the fallback text must not be empty")
	case Length(*p.Text) > MaxFallbackText:
		c.fail("text: %d characters, over the %d recommended for the fallback", Length(*p.Text), MaxFallbackText)
	default:
		c.mrkdwn("text", *p.Text)
	}
	c.blocks(p.Blocks)
	if c.chars > MaxBlocksChars {
		c.fail("blocks: %d characters of text in all, over %d (msg_blocks_too_long)", c.chars, MaxBlocksChars)
	}
	return errors.Join(c.errs...)
}

// CheckLimits checks a blocks array against Block Kit's documented limits
// only (not this package's escaping rules); maxBlocks is 50 for a message,
// 100 for a modal or Home tab.
func CheckLimits(blocks []map[string]any, maxBlocks int) error {
	c := &checker{maxBlocks: maxBlocks}
	c.blocks(blocks)
	return errors.Join(c.errs...)
}

type checker struct {
	safety    bool
	maxBlocks int
	errs      []error
	chars     int
}

func (c *checker) fail(format string, args ...any) {
	c.errs = append(c.errs, fmt.Errorf(format, args...))
}

func (c *checker) blocks(bs []map[string]any) {
	if len(bs) > c.maxBlocks {
		c.fail("blocks: %d blocks, over %d", len(bs), c.maxBlocks)
	}
	ids := map[string]bool{}
	for i, b := range bs {
		at := fmt.Sprintf("blocks[%d]", i)
		typ, _ := b["type"].(string)
		if typ == "" {
			c.fail("%s: no type", at)
			continue
		}
		at += "(" + typ + ")"
		if id, ok := b["block_id"].(string); ok {
			if id == "" || Length(id) > MaxBlockID {
				c.fail("%s: block_id of %d characters (1..%d)", at, Length(id), MaxBlockID)
			}
			if ids[id] {
				c.fail("%s: duplicate block_id %q", at, id)
			}
			ids[id] = true
		}
		switch typ {
		case "header":
			c.text(at+".text", b["text"], MaxHeader, true, false)
		case "section":
			_, hasText := b["text"]
			fields, _ := b["fields"].([]any)
			if !hasText && len(fields) == 0 {
				c.fail("%s: needs text or fields", at)
			}
			if hasText {
				c.text(at+".text", b["text"], MaxSectionText, false, false)
			}
			if len(fields) > MaxFields {
				c.fail("%s: %d fields, over %d", at, len(fields), MaxFields)
			}
			for j, f := range fields {
				c.text(fmt.Sprintf("%s.fields[%d]", at, j), f, MaxFieldText, false, false)
			}
			if acc, ok := b["accessory"].(map[string]any); ok {
				c.element(at+".accessory", acc, map[string]bool{})
			}
		case "context":
			els, _ := b["elements"].([]any)
			if len(els) == 0 || len(els) > MaxContextElems {
				c.fail("%s: %d elements (1..%d)", at, len(els), MaxContextElems)
			}
			for j, e := range els {
				em, _ := e.(map[string]any)
				if t, _ := em["type"].(string); t == "mrkdwn" || t == "plain_text" {
					c.text(fmt.Sprintf("%s.elements[%d]", at, j), e, MaxSectionText, false, false)
				}
			}
		case "actions":
			els, _ := b["elements"].([]any)
			if len(els) == 0 || len(els) > MaxActionsElems {
				c.fail("%s: %d elements (1..%d)", at, len(els), MaxActionsElems)
			}
			actionIDs := map[string]bool{}
			for j, e := range els {
				em, _ := e.(map[string]any)
				c.element(fmt.Sprintf("%s.elements[%d]", at, j), em, actionIDs)
			}
		}
	}
}

func (c *checker) element(at string, e map[string]any, actionIDs map[string]bool) {
	if id, ok := e["action_id"].(string); ok {
		if id == "" || Length(id) > MaxActionID {
			c.fail("%s: action_id of %d characters (1..%d)", at, Length(id), MaxActionID)
		}
		if actionIDs[id] {
			c.fail("%s: duplicate action_id %q in one block", at, id)
		}
		actionIDs[id] = true
	}
	if e["type"] != "button" {
		return
	}
	c.text(at+".text", e["text"], MaxButtonText, true, true)
	if v, ok := e["value"].(string); ok && Length(v) > MaxButtonValue {
		c.fail("%s: value of %d characters, over %d", at, Length(v), MaxButtonValue)
	}
	if u, ok := e["url"].(string); ok {
		if Length(u) > MaxButtonURL {
			c.fail("%s: url of %d characters, over %d", at, Length(u), MaxButtonURL)
		}
		if c.safety && !SafeURL(u) {
			c.fail("%s: url is not a safe http(s) URL", at)
		}
	}
	switch s, _ := e["style"].(string); s {
	case "", "primary", "danger":
	default:
		c.fail("%s: style %q (primary or danger)", at, s)
	}
}

// text checks a text object of at most max characters; plainOnly for
// headers and buttons.
func (c *checker) text(at string, v any, max int, plainOnly, counted bool) {
	o, ok := v.(map[string]any)
	if !ok {
		c.fail("%s: not a text object", at)
		return
	}
	typ, _ := o["type"].(string)
	s, _ := o["text"].(string)
	switch {
	case typ != "plain_text" && typ != "mrkdwn":
		c.fail("%s: type %q (plain_text or mrkdwn)", at, typ)
	case plainOnly && typ != "plain_text":
		c.fail("%s: must be plain_text", at)
	case typ == "mrkdwn" && o["emoji"] != nil:
		c.fail("%s: emoji is not allowed on mrkdwn", at)
	}
	if s == "" || Length(s) > max {
		c.fail("%s: %d characters (1..%d)", at, Length(s), max)
	}
	if !counted {
		c.chars += Length(s)
	}
	if c.safety && typ == "mrkdwn" {
		if v, _ := o["verbatim"].(bool); !v {
			// verbatim false lets Slack auto-link names and parse some
			// mentions in text we have escaped; ours is always verbatim.
			c.fail("%s: mrkdwn must be verbatim", at)
		}
		c.mrkdwn(at, s)
	}
	if c.safety && typ == "plain_text" && strings.ContainsAny(s, "\n\r\t") {
		c.fail("%s: plain text must be one line", at)
	}
}

var (
	reAngle     = regexp.MustCompile(`<[^<>]*>?`)
	reEntity    = regexp.MustCompile(`^&(amp|lt|gt);`)
	reBroadcast = regexp.MustCompile(`(?i)(^|[^\p{L}\p{N}_])@(channel|here|everyone)`)
)

// mrkdwn checks escaped mrkdwn: every < opens a safe <url> or <url|text>
// construct, every & is an entity, and no broadcast mention is live.
func (c *checker) mrkdwn(at, s string) {
	for _, m := range reAngle.FindAllString(s, -1) {
		inner, ok := strings.CutSuffix(m[1:], ">")
		u, _, _ := strings.Cut(inner, "|")
		if !ok || !SafeURL(strings.ReplaceAll(u, "&amp;", "&")) {
			c.fail("%s: unescaped %q (only <http(s)://…> links may stay)", at, clip(m))
		}
	}
	if strings.ContainsRune(reAngle.ReplaceAllString(s, ""), '>') {
		// Allowed only as a line-leading quote marker.
		for line := range strings.SplitSeq(reAngle.ReplaceAllString(s, ""), "\n") {
			if i := strings.IndexByte(line, '>'); i >= 0 && (i != 0 || strings.Contains(line[1:], ">")) {
				c.fail("%s: unescaped '>' in %q", at, clip(line))
				break
			}
		}
	}
	for i := 0; i < len(s); i++ {
		if s[i] == '&' && !reEntity.MatchString(s[i:min(len(s), i+5)]) {
			c.fail("%s: unescaped '&' at byte %d", at, i)
			break
		}
	}
	if m := reBroadcast.FindString(s); m != "" {
		c.fail("%s: live broadcast mention %q", at, m)
	}
}

func clip(s string) string {
	if len(s) > 60 {
		return s[:60] + "…"
	}
	return s
}
