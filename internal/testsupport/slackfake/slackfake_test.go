package slackfake

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/slack-go/slack"
	"github.com/the-loop/bus/internal/testsupport/testkit"
)

func client(s *Server) *slack.Client {
	return slack.New(Token, slack.OptionAPIURL(s.URL()))
}

// raw calls method with form args and returns the decoded JSON answer.
func raw(t *testing.T, s *Server, method string, args url.Values) (int, map[string]any) {
	t.Helper()
	resp, err := http.PostForm(s.URL()+method, args)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var out map[string]any
	_ = json.Unmarshal(body, &out)
	return resp.StatusCode, out
}

// sharedWebAPI reads an example answer of the shared Slack Web API
// examples, or skips when the shared workspace is not beside this clone.
func sharedWebAPI(t *testing.T, name string) map[string]any {
	t.Helper()
	p := filepath.Join(testkit.SharedTestdata(t, "slack", "web_api"), name)
	b, err := os.ReadFile(p)
	if err != nil {
		t.Skipf("shared Slack fixture %s is absent: skipping", p)
	}
	var out map[string]any
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestAnswersHaveSlacksShape: every field of Slack's documented example
// answers is present, with the same JSON type, in the fake's answers.
func TestAnswersHaveSlacksShape(t *testing.T) {
	s := New(t)
	tok := url.Values{"token": {Token}}
	with := func(kv ...string) url.Values {
		v := url.Values{"token": {Token}}
		for i := 0; i < len(kv); i += 2 {
			v.Set(kv[i], kv[i+1])
		}
		return v
	}
	_, post := raw(t, s, "chat.postMessage", with("channel", "C1", "text", "root"))
	ts, _ := post["ts"].(string)
	_, _ = raw(t, s, "chat.postMessage", with("channel", "C1", "text", "reply", "thread_ts", ts))
	_, _ = raw(t, s, "chat.postMessage", with("channel", "C1", "text", "second"))
	cases := []struct {
		example string
		method  string
		args    url.Values
		skip    []string // fields of the 2017-era example the fake does not model
	}{
		{"auth.test.ok.json", "auth.test", tok, nil},
		{"auth.test.error.json", "auth.test", url.Values{"token": {"xoxb-wrong"}}, nil},
		{"chat.postMessage.ok.json", "chat.postMessage", with("channel", "C1", "text", "x"), []string{"message.attachments", "message.subtype", "message.username"}},
		{"chat.postMessage.error.json", "chat.postMessage", with("channel", "C1"), nil},
		{"chat.update.ok.json", "chat.update", with("channel", "C1", "ts", ts, "text", "edited"), nil},
		{"chat.update.error.json", "chat.update", with("channel", "C1", "ts", "1.2", "text", "x"), nil},
		{"conversations.replies.ok.json", "conversations.replies", with("channel", "C1", "ts", ts, "limit", "1"),
			[]string{"messages.last_read", "messages.subscribed", "messages.unread_count"}},
		{"conversations.replies.error.json", "conversations.replies", with("channel", "C1", "ts", "9.9"), nil},
		{"conversations.history.ok.json", "conversations.history", with("channel", "C1", "limit", "1"), []string{"pin_count"}},
		{"chat.postEphemeral.ok.json", "chat.postEphemeral", with("channel", "C1", "user", "U1", "text", "only you"), nil},
		{"chat.postEphemeral.error.json", "chat.postEphemeral", with("channel", "C1", "text", "nobody"), nil},
	}
	for _, c := range cases {
		t.Run(c.example, func(t *testing.T) {
			want := sharedWebAPI(t, c.example)
			status, got := raw(t, s, c.method, c.args)
			if status != http.StatusOK {
				t.Fatalf("HTTP %d", status)
			}
			if got["ok"] != want["ok"] {
				t.Fatalf("ok = %v, want %v (%v)", got["ok"], want["ok"], got)
			}
			sameShape(t, "", want, got, c.skip)
		})
	}
}

func sameShape(t *testing.T, path string, want, got any, skip []string) {
	t.Helper()
	for _, s := range skip {
		if s == strings.TrimPrefix(path, ".") {
			return
		}
	}
	switch w := want.(type) {
	case map[string]any:
		g, ok := got.(map[string]any)
		if !ok {
			t.Errorf("%s: %T, want an object", path, got)
			return
		}
		for k, v := range w {
			if k == "error" {
				continue // codes differ by case; presence is checked by ok
			}
			gv, ok := g[k]
			if !ok {
				if !contains(skip, strings.TrimPrefix(path+"."+k, ".")) {
					t.Errorf("%s.%s missing", path, k)
				}
				continue
			}
			sameShape(t, path+"."+k, v, gv, skip)
		}
	case []any:
		g, ok := got.([]any)
		if !ok || len(g) == 0 {
			t.Errorf("%s: %v, want a non-empty array", path, got)
			return
		}
		sameShape(t, path, w[0], g[0], skip)
	default:
		if fmt.Sprintf("%T", want) != fmt.Sprintf("%T", got) {
			t.Errorf("%s: %T, want %T", path, got, want)
		}
	}
}

func contains(xs []string, s string) bool {
	for _, x := range xs {
		if x == s {
			return true
		}
	}
	return false
}

// TestSlackGoRoundTrip: slack-go posts, replies, updates and reads back
// through the fake, metadata included only when asked for.
func TestSlackGoRoundTrip(t *testing.T) {
	s := New(t)
	api := client(s)
	ctx := context.Background()
	md := slack.SlackMetadata{EventType: "the_loop_event", EventPayload: map[string]any{"event_id": "e1"}}
	_, root, err := api.PostMessageContext(ctx, "C1", slack.MsgOptionText("root", false), slack.MsgOptionMetadata(md),
		slack.MsgOptionBlocks(slack.NewSectionBlock(slack.NewTextBlockObject(slack.MarkdownType, "*hi*", false, false), nil, nil)))
	if err != nil {
		t.Fatal(err)
	}
	_, reply, err := api.PostMessageContext(ctx, "C1", slack.MsgOptionText("reply", false), slack.MsgOptionTS(root))
	if err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := api.UpdateMessageContext(ctx, "C1", reply, slack.MsgOptionText("edited", false)); err != nil {
		t.Fatal(err)
	}
	msgs, _, _, err := api.GetConversationRepliesContext(ctx, &slack.GetConversationRepliesParameters{ChannelID: "C1", Timestamp: root, IncludeAllMetadata: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(msgs) != 2 || msgs[0].Metadata.EventPayload["event_id"] != "e1" || msgs[1].Text != "edited" {
		t.Fatalf("replies = %+v", msgs)
	}
	h, err := api.GetConversationHistoryContext(ctx, &slack.GetConversationHistoryParameters{ChannelID: "C1"})
	if err != nil {
		t.Fatal(err)
	}
	if len(h.Messages) != 1 || h.Messages[0].Metadata.EventType != "" || h.Messages[0].ReplyCount != 1 {
		t.Errorf("history without include_all_metadata = %+v", h.Messages)
	}
	if got := s.Thread("C1", root); len(got) != 1 || got[0].Edits != 1 || got[0].Text != "edited" {
		t.Errorf("Thread = %+v", got)
	}
	if a, err := api.AuthTestContext(ctx); err != nil || a.UserID != BotUserID || a.BotID != BotID {
		t.Errorf("auth.test = %+v, %v", a, err)
	}
	// An ephemeral message is shown to one member and is not in the
	// channel's history.
	ets, err := api.PostEphemeralContext(ctx, "C1", "U1", slack.MsgOptionText("only you", false), slack.MsgOptionTS(root))
	if err != nil || ets == "" {
		t.Fatalf("chat.postEphemeral = %q, %v", ets, err)
	}
	if e := s.Ephemerals("C1"); len(e) != 1 || e[0].User != "U1" || e[0].ThreadTS != root || e[0].Text != "only you" || e[0].TS != ets {
		t.Errorf("Ephemerals = %+v", e)
	}
	if n := len(s.Messages("C1")); n != 2 {
		t.Errorf("the ephemeral message joined the channel's messages: %d", n)
	}
}

func TestPagination(t *testing.T) {
	s := New(t)
	for i := range 25 {
		s.AddMessage("C1", "", "U1", fmt.Sprint(i))
	}
	api := client(s)
	var all []string
	cursor := ""
	for {
		h, err := api.GetConversationHistoryContext(context.Background(), &slack.GetConversationHistoryParameters{ChannelID: "C1", Limit: 10, Cursor: cursor})
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range h.Messages {
			all = append(all, m.Text)
		}
		if !h.HasMore {
			break
		}
		cursor = h.ResponseMetaData.NextCursor
	}
	if len(all) != 25 || all[0] != "24" || all[24] != "0" {
		t.Errorf("history pages = %v (want newest first, all 25)", all)
	}
}

func TestFaults(t *testing.T) {
	s := New(t, WithChannels("C1"))
	api := client(s)
	ctx := context.Background()
	post := func() error {
		_, _, err := api.PostMessageContext(ctx, "C1", slack.MsgOptionText("x", false))
		return err
	}

	s.RateLimit("chat.postMessage", time.Second)
	var rl *slack.RateLimitedError
	if err := post(); !errors.As(err, &rl) || rl.RetryAfter != time.Second {
		t.Fatalf("first call under a rate limit: %v", err)
	}
	if err := post(); !errors.As(err, &rl) {
		t.Fatalf("second call: %v", err)
	}
	reqs := s.Requests()
	if reqs[0].Early || !reqs[1].Early {
		t.Errorf("early flags = %v %v, want false true", reqs[0].Early, reqs[1].Early)
	}

	s2 := New(t, WithChannels("C1"))
	api = client(s2)
	s2.Fail("chat.postMessage", 1, http.StatusServiceUnavailable)
	var sc slack.StatusCodeError
	if _, _, err := api.PostMessageContext(ctx, "C1", slack.MsgOptionText("x", false)); !errors.As(err, &sc) || sc.Code != 503 {
		t.Errorf("Fail: %v", err)
	}
	s2.FailWith("chat.postMessage", 1, "is_archived")
	var se slack.SlackErrorResponse
	if _, _, err := api.PostMessageContext(ctx, "C1", slack.MsgOptionText("x", false)); !errors.As(err, &se) || se.Err != "is_archived" {
		t.Errorf("FailWith: %v", err)
	}
	if _, _, err := api.PostMessageContext(ctx, "C2", slack.MsgOptionText("x", false)); !errors.As(err, &se) || se.Err != "channel_not_found" {
		t.Errorf("unknown channel: %v", err)
	}
	s2.DropResponseAfterPost(1)
	if _, _, err := api.PostMessageContext(ctx, "C1", slack.MsgOptionText("landed", false)); err == nil {
		t.Error("a dropped response reached the client")
	}
	if ms := s2.Messages("C1"); len(ms) != 1 || ms[0].Text != "landed" {
		t.Errorf("messages after a dropped response = %+v", ms)
	}
	if _, _, err := slack.New("xoxb-wrong", slack.OptionAPIURL(s2.URL())).PostMessageContext(ctx, "C1", slack.MsgOptionText("x", false)); !errors.As(err, &se) || se.Err != "invalid_auth" {
		t.Errorf("wrong token: %v", err)
	}
}

// TestConcurrentPosts: many clients at once; every ts is unique and every
// message is kept.
func TestConcurrentPosts(t *testing.T) {
	s := New(t)
	api := client(s)
	var wg sync.WaitGroup
	for i := range 40 {
		wg.Go(func() {
			if _, _, err := api.PostMessageContext(context.Background(), "C1", slack.MsgOptionText(fmt.Sprint(i), false)); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	seen := map[string]bool{}
	for _, m := range s.Messages("C1") {
		if seen[m.TS] {
			t.Errorf("duplicate ts %s", m.TS)
		}
		seen[m.TS] = true
	}
	if len(seen) != 40 {
		t.Errorf("%d messages, want 40", len(seen))
	}
}
