package slackmsg

import (
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/slack-go/slack"
	"github.com/the-loop/bus/internal/testsupport/testkit"
)

func TestMrkdwnEscapesAndConverts(t *testing.T) {
	for _, c := range []struct {
		name, in string
		want     []string // substrings that must appear
		wantNot  []string // substrings that must not
	}{
		{"special mentions", "<!channel> <!here> <@U1> <#C1> <!subteam^S1>",
			[]string{"&lt;!channel&gt;", "&lt;@U1&gt;", "&lt;#C1&gt;"}, []string{"<!", "<@", "<#"}},
		{"spoofed slack link", "<https://evil.example|github.com>",
			[]string{"&lt;https://evil.example|github.com&gt;"}, []string{"<https://evil"}},
		{"markdown link with address-like text shows its target", "[github.com/octo](https://evil.example)",
			[]string{"github.com/octo (<https://evil.example>)"}, []string{"|github.com"}},
		{"markdown link", "see [the guide](https://github.com/o/r/blob/main/X.md?a=1&b=2)",
			[]string{"<https://github.com/o/r/blob/main/X.md?a=1&amp;b=2|the guide>"}, nil},
		{"javascript link dropped to text", "[click](javascript:alert(1))", []string{"click"}, []string{"javascript:alert(1)<", "<javascript"}},
		{"bare broadcast words", "hi @channel, @HERE and @everyone; mail a@here.com",
			[]string{"@\u200bchannel", "@\u200bHERE", "@\u200beveryone", "a@here.com"}, nil},
		{"bold and strike", "**bold** and ~~gone~~", []string{"*bold* and ~gone~"}, []string{"**"}},
		{"heading and list", "## Title\n- one\n* two", []string{"*Title*\n• one\n• two"}, nil},
		{"code fence drops language, escapes inside", "```go\nif a < b && c {}\n```",
			[]string{"```\nif a &lt; b &amp;&amp; c {}\n```"}, []string{"```go"}},
		{"inline code escaped", "`<b>&`", []string{"`&lt;b&gt;&amp;`"}, nil},
		{"entities re-escaped", "&amp; &lt;", []string{"&amp;amp; &amp;lt;"}, nil},
		{"quote kept", "> quoted", []string{"> quoted"}, nil},
		{"bare URL linked", "go to https://github.com/o/r/pull/1.", []string{"<https://github.com/o/r/pull/1>."}, nil},
		{"control characters dropped", "a\x00b\x07c\td", []string{"abc d"}, []string{"\x00", "\x07"}},
		{"emoji kept", "🚀 👨‍👩‍👧 :tada:", []string{"🚀 👨‍👩‍👧 :tada:"}, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, cut := Mrkdwn(c.in, 0)
			if cut {
				t.Error("cut without a limit")
			}
			for _, w := range c.want {
				if !strings.Contains(got, w) {
					t.Errorf("Mrkdwn(%q) = %q, want it to contain %q", c.in, got, w)
				}
			}
			for _, w := range c.wantNot {
				if strings.Contains(got, w) {
					t.Errorf("Mrkdwn(%q) = %q, must not contain %q", c.in, got, w)
				}
			}
			ch := &checker{safety: true}
			ch.mrkdwn("out", got)
			if err := errors.Join(ch.errs...); err != nil {
				t.Errorf("output fails the escaping check: %v", err)
			}
		})
	}
}

func TestMrkdwnCuts(t *testing.T) {
	long := strings.Repeat("a & b <c> 🚀 ", 1000)
	got, cut := Mrkdwn(long, 3000)
	if !cut || Length(got) > 3000 || !strings.HasSuffix(got, ellipsis) {
		t.Errorf("cut=%v len=%d suffix=%q", cut, Length(got), got[max(0, len(got)-10):])
	}
	if !utf8.ValidString(got) {
		t.Error("cut split a rune")
	}
	// An entity or an emoji's surrogate pair is never split.
	if strings.HasSuffix(strings.TrimSuffix(got, ellipsis), "&am") || strings.Contains(got, "\uFFFD") {
		t.Errorf("cut inside an entity or rune: %q", got[len(got)-20:])
	}
	fenced := "```\n" + strings.Repeat("line <x>\n", 1000) + "```"
	got, cut = Mrkdwn(fenced, 500)
	if !cut || !strings.HasSuffix(got, ellipsis+"\n```") || Length(got) > 500 {
		t.Errorf("a cut inside a fence must close it: %q", got[len(got)-20:])
	}
	link := strings.Repeat("x", 90) + " [label](https://github.com/" + strings.Repeat("p", 50) + ")"
	got, _ = Mrkdwn(link, 100)
	if strings.Contains(got, "<https") {
		t.Errorf("a link that does not fit whole must be dropped whole: %q", got)
	}
}

func TestPlain(t *testing.T) {
	if got := Plain("a\nb\tc  d", 100); got != "a b c d" {
		t.Errorf("Plain = %q", got)
	}
	got := Plain(strings.Repeat("🚀", 100), 150)
	if Length(got) > 150 || !utf8.ValidString(got) {
		t.Errorf("Plain cut: len %d", Length(got))
	}
}

// FuzzMrkdwn: whatever the input, the output passes the escaping check and
// fits the limit.
func FuzzMrkdwn(f *testing.F) {
	for _, s := range []string{hostileMarkdown, "<!channel>", "[a](https://x.y)", "```\n<\n", "&&&", "**[x](http://a.b)**", "@here@channel"} {
		f.Add(s, 200)
	}
	f.Fuzz(func(t *testing.T, in string, max int) {
		if max < 10 || max > 5000 {
			max = 200
		}
		got, _ := Mrkdwn(in, max)
		if Length(got) > max {
			t.Fatalf("len %d > %d", Length(got), max)
		}
		ch := &checker{safety: true}
		ch.mrkdwn("out", got)
		if err := errors.Join(ch.errs...); err != nil {
			t.Fatalf("Mrkdwn(%q) = %q: %v", in, got, err)
		}
	})
}

// TestCheckRejects proves the validator can fail: each message breaks one
// rule.
func TestCheckRejects(t *testing.T) {
	plain := func(s string) *slack.TextBlockObject {
		return slack.NewTextBlockObject(slack.PlainTextType, s, false, false)
	}
	md := func(s string) *slack.TextBlockObject {
		return slack.NewTextBlockObject(slack.MarkdownType, s, false, true)
	}
	btn := func(text, url string) *slack.ButtonBlockElement {
		b := slack.NewButtonBlockElement("a", "v", plain(text))
		b.URL = url
		return b
	}
	many := make([]slack.Block, 51)
	for i := range many {
		many[i] = slack.NewDividerBlock()
	}
	for _, c := range []struct {
		name string
		m    Message
		want string
	}{
		{"long header", Message{Text: "t", Blocks: []slack.Block{slack.NewHeaderBlock(plain(strings.Repeat("h", 151)))}}, "151 characters"},
		{"mrkdwn header", Message{Text: "t", Blocks: []slack.Block{slack.NewHeaderBlock(md("h"))}}, "must be plain_text"},
		{"too many blocks", Message{Text: "t", Blocks: many}, "51 blocks"},
		{"long section", Message{Text: "t", Blocks: []slack.Block{slack.NewSectionBlock(md(strings.Repeat("s", 3001)), nil, nil)}}, "3001 characters"},
		{"long button", Message{Text: "t", Blocks: []slack.Block{slack.NewActionBlock("x", btn(strings.Repeat("b", 76), ""))}}, "76 characters"},
		{"unsafe button url", Message{Text: "t", Blocks: []slack.Block{slack.NewActionBlock("x", btn("b", "javascript:alert(1)"))}}, "safe http(s)"},
		{"live channel ping", Message{Text: "t", Blocks: []slack.Block{slack.NewSectionBlock(md("<!channel> hi"), nil, nil)}}, "unescaped"},
		{"spoofed link", Message{Text: "<https://evil.example|github.com> and <javascript:x|y>", Blocks: nil}, "unescaped"},
		{"raw ampersand", Message{Text: "a & b"}, "unescaped '&'"},
		{"live broadcast word", Message{Text: "hey @channel"}, "broadcast"},
		{"empty fallback", Message{Blocks: []slack.Block{slack.NewDividerBlock()}}, "must not be empty"},
		{"not verbatim", Message{Text: "t", Blocks: []slack.Block{slack.NewSectionBlock(slack.NewTextBlockObject(slack.MarkdownType, "x", false, false), nil, nil)}}, "verbatim"},
		{"duplicate block id", Message{Text: "t", Blocks: []slack.Block{slack.NewDividerBlock(), slack.NewDividerBlock()}}, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			if c.name == "duplicate block id" {
				a, b := slack.NewDividerBlock(), slack.NewDividerBlock()
				a.BlockID, b.BlockID = "same", "same"
				c.m.Blocks, c.want = []slack.Block{a, b}, "duplicate block_id"
			}
			err := Check(c.m)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("Check = %v, want an error containing %q", err, c.want)
			}
		})
	}
}

// sharedTestdata is sub (slash-separated) of the shared test data, or skips
// when this clone has no shared workspace beside it.
func sharedTestdata(t *testing.T, sub string) string {
	t.Helper()
	return testkit.SharedTestdata(t, strings.Split(sub, "/")...)
}

// TestCheckAcceptsSlackViews: the validator's limits accept Slack's own
// known-valid Block Kit Builder templates, so it does not reject valid Block
// Kit (testdata/slack/block_kit/views).
func TestCheckAcceptsSlackViews(t *testing.T) {
	dir := sharedTestdata(t, "slack/block_kit/views")
	files, _ := filepath.Glob(filepath.Join(dir, "*.json"))
	if len(files) == 0 {
		t.Fatalf("no views in %s", dir)
	}
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var v struct {
			Blocks []map[string]any `json:"blocks"`
		}
		if err := json.Unmarshal(raw, &v); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		if err := CheckLimits(v.Blocks, 100); err != nil {
			t.Errorf("%s: %v", filepath.Base(f), err)
		}
	}
}

// TestActivityFromSharedWebhooks renders every real GitHub delivery of the
// shared corpus as work-item.activity at every verbosity: each passes the
// check.
func TestActivityFromSharedWebhooks(t *testing.T) {
	dir := sharedTestdata(t, "github-webhooks")
	n := 0
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || filepath.Ext(path) != ".json" {
			return err
		}
		raw, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		var p struct {
			Action string `json:"action"`
		}
		_ = json.Unmarshal(raw, &p)
		ev := event("gh:"+filepath.Base(path), "work-item.activity", "github")
		ev.Body = activityBody(filepath.Base(filepath.Dir(path)), p.Action, raw)
		for _, v := range verbosities {
			if err := Check(Render(ev, Options{Verbosity: v})); err != nil {
				t.Errorf("%s at %s: %v", path, v, err)
			}
		}
		n++
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n < 100 {
		t.Errorf("only %d deliveries rendered", n)
	}
}
