// Package slackfake is an in-process fake of the part of Slack's Web API the
// services of the-loop call: chat.postMessage, chat.update,
// chat.postEphemeral, conversations.replies, conversations.history and
// auth.test, with message
// metadata, threads, cursor pagination and Slack's `ok`/`error` envelope
// (as Slack documents them). Tests point a
// real client at it — slack-go through slack.OptionAPIURL(Server.URL()), or
// LOOP_SLACK_API_URL — and read back what a person would see: the messages
// of each channel and thread, in order, with their edits.
//
// It is built on slack-go's own slacktest server, whose remaining routes
// (users.info, conversations.info, bots.info, apps.connections.open…) stay
// available; the routes above replace slacktest's, which keep no state, use
// whole-second timestamps (two posts in one second collide) and leak a
// goroutine per post.
//
// Beyond what Slack does, a test can fail requests on purpose: RateLimit
// answers a method with 429 and Retry-After for a while (and counts the
// requests that did not wait), Fail answers with a 5xx, FailWith with an
// `ok: false` error, and DropResponseAfterPost stores a message and then
// drops the connection before answering — the "did my message land?" case a
// crash-safe poster must survive. AfterPost runs a hook between storing a
// message and answering, so a test can kill its client in that window.
//
// Every method is safe for concurrent use. The fake never logs or echoes the
// token it is called with. It is test support: tests and `the-loop demo` (through
// Start) use it, and it imports no testing framework.
package slackfake

import (
	"encoding/json"
	"sync"
	"time"

	"github.com/slack-go/slack/slacktest"
)

// Token is the bot token the fake accepts unless WithToken says otherwise.
const Token = "xoxb-slackfake-0000000000-test"

// Identity of the fake's bot, as auth.test reports it.
const (
	TeamID    = "T0FAKE0001"
	TeamName  = "the-loop test workspace"
	BotUserID = "U0FAKEBOT1"
	BotID     = "B0FAKEBOT1"
	BotName   = "the-loop"
)

// MetadataMaxPayload bounds a message's metadata JSON (a generous stand-in
// for Slack's undocumented limit), so a client that stuffs content into
// metadata fails here rather than in production.
const MetadataMaxPayload = 8192

// Metadata is a message's metadata as Slack stores it.
type Metadata struct {
	EventType    string         `json:"event_type"`
	EventPayload map[string]any `json:"event_payload"`
}

// Message is one message as the fake stores it.
type Message struct {
	Channel string
	TS      string
	// ThreadTS is the thread root's ts for a reply, "" for a top-level
	// message.
	ThreadTS string
	Text     string
	// Blocks is the blocks JSON array as posted (nil when none).
	Blocks json.RawMessage
	// Metadata is nil when the message carries none.
	Metadata *Metadata
	// User and BotID are the poster: the fake's bot for posted messages.
	User  string
	BotID string
	// Edits counts chat.update calls on the message.
	Edits int
	// Posted is when the fake stored the message.
	Posted time.Time
}

// Ephemeral is one chat.postEphemeral message: shown to one member only,
// never part of the channel's history (Messages does not list it).
type Ephemeral struct {
	Channel string
	// User is the member the message is shown to.
	User string
	// ThreadTS is the thread it is shown in, "" for the channel.
	ThreadTS string
	Text     string
	Blocks   json.RawMessage
	// TS is the message_ts Slack answers with.
	TS string
}

// Request is one call the fake answered.
type Request struct {
	Method string // Web API method, e.g. "chat.postMessage"
	// Status is the HTTP status answered (0 when the connection was
	// dropped), Error the Slack error code when ok was false.
	Status int
	Error  string
	// Early is true for a request refused with 429 while a Retry-After the
	// fake had already announced was still running.
	Early bool
	At    time.Time
}

// Option configures New.
type Option func(*Server)

// WithToken makes the fake accept only token.
func WithToken(token string) Option { return func(s *Server) { s.token = token } }

// WithChannels restricts the conversations that exist; posting elsewhere
// answers channel_not_found. By default every channel id exists.
func WithChannels(ids ...string) Option {
	return func(s *Server) {
		s.known = map[string]bool{}
		for _, id := range ids {
			s.known[id] = true
		}
	}
}

// Server is a running fake.
type Server struct {
	closeOnce sync.Once
	sts       *slacktest.Server
	token     string
	known     map[string]bool // nil: every channel exists

	mu        sync.Mutex
	changed   chan struct{} // closed and replaced on every change
	msgs      map[string][]*Message
	ephemeral []Ephemeral
	lastTS    int64 // microseconds of the last ts handed out
	requests  []Request
	limited   map[string]*limit
	faults    []*fault
	dropPosts int
	afterPost []*hook
}

type limit struct {
	until      time.Time
	retryAfter int // seconds, as announced
	announced  bool
}

type fault struct {
	method   string
	n        int
	status   int
	slackErr string
}

type hook struct{ fn func(Message) }

// New starts a fake that is stopped when t ends.
func New(t TB, opts ...Option) *Server {
	t.Helper()
	s := Start(opts...)
	t.Cleanup(s.Close)
	return s
}

// Close stops the server.
func (s *Server) Close() { s.closeOnce.Do(s.sts.Stop) }

// Start runs the fake outside a test (`the-loop demo`); the caller calls
// Close.
func Start(opts ...Option) *Server {
	s := &Server{
		token:   Token,
		changed: make(chan struct{}),
		msgs:    map[string][]*Message{},
		limited: map[string]*limit{},
	}
	for _, o := range opts {
		o(s)
	}
	routes := map[string]func(*call) response{
		"auth.test":             s.authTest,
		"chat.postMessage":      s.postMessage,
		"chat.update":           s.update,
		"chat.postEphemeral":    s.postEphemeral,
		"conversations.replies": s.replies,
		"conversations.history": s.history,
	}
	s.sts = slacktest.NewTestServer(func(c slacktest.Customize) {
		for method, h := range routes {
			c.Handle("/"+method, s.serve(method, h))
		}
	})
	s.sts.Start()
	return s
}

// URL is the Web API base URL, ending in "/", for slack.OptionAPIURL or
// LOOP_SLACK_API_URL.
func (s *Server) URL() string { return s.sts.GetAPIURL() }
