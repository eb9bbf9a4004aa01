package slackrenderer

import (
	"testing"

	"github.com/the-loop/bus/pkg/catalog"
	"github.com/the-loop/bus/pkg/config"
	loopv1 "github.com/the-loop/bus/proto/loop/v1"
)

// enabledDefault is the default config with the channel switched on: the
// subscribe and publish lists are the defaults of R2.2.
func enabledDefault(t *testing.T) config.SlackChannel {
	t.Helper()
	cfg, _, err := config.Parse([]byte("version: 0.7.0\nchannels:\n  slack:\n    enabled: true\n    channel: C0LOOP\n"))
	if err != nil {
		t.Fatal(err)
	}
	return cfg.Channels.Slack
}

// TestSubscribeDefaults: a channel that names no subscribe list hears the
// agent's questions and nothing else (R2.2).
func TestSubscribeDefaults(t *testing.T) {
	cfg := enabledDefault(t)
	for _, ty := range append(catalog.Types(), "custom.event") {
		ev := &loopv1.Event{Id: "x", Type: string(ty), Source: "loop", Subject: workItem}
		_, skip := route(cfg, ev)
		want := ""
		switch {
		case ty == catalog.LedgerRecord:
			want = skipUnsubscribable
		case ty != catalog.SessionAwaitingInput:
			want = skipNotSubscribed
		}
		if skip != want {
			t.Errorf("default subscribe, %s: skip %q, want %q", ty, skip, want)
		}
	}
	cfg.Subscribe = append(cfg.Subscribe, catalog.PhaseApprovalPending, catalog.LedgerRecord, "custom.event")
	for ty, want := range map[catalog.Type]string{
		catalog.PhaseApprovalPending: "",
		"custom.event":               "",
		catalog.LedgerRecord:         skipUnsubscribable, // never, whatever the list says
	} {
		if _, skip := route(cfg, &loopv1.Event{Id: "x", Type: string(ty), Source: "loop", Subject: workItem}); skip != want {
			t.Errorf("subscribed %s: skip %q, want %q", ty, skip, want)
		}
	}
}

// TestPublishDefaultsAndGateButtons: the default publish grant is
// work-item.reply only, so no gate buttons; with gate.feedback they appear in
// socket and events modes and never in poll or off (R2.2, R4.3).
func TestPublishDefaultsAndGateButtons(t *testing.T) {
	cfg := enabledDefault(t)
	if cfg.CanPublish(catalog.GateFeedback) || !cfg.CanPublish(catalog.WorkItemReply) {
		t.Fatalf("default publish = %v, want [work-item.reply]", cfg.Publish)
	}
	for _, mode := range []config.ReadMode{config.ReadPoll, config.ReadSocket, config.ReadEvents, config.ReadOff} {
		cfg.Read.Mode = mode
		cfg.Publish = config.DefaultPublish()
		if gateButtons(cfg) {
			t.Errorf("default grant, %s mode: buttons drawn", mode)
		}
		cfg.Publish = append(cfg.Publish, catalog.GateFeedback)
		want := mode == config.ReadSocket || mode == config.ReadEvents
		if gateButtons(cfg) != want {
			t.Errorf("gate.feedback granted, %s mode: buttons = %v, want %v", mode, !want, want)
		}
	}
}

// TestOriginRule: an event never returns to the channel it came from, and a
// ledger read-back of this channel's message is never echoed; the kickoff
// answer and the notices (record failed, gate paused) are the answers that do
// go back, into the originating thread (R1.4, R6.5, abuse case 10,
// decision 017, decision 023).
func TestOriginRule(t *testing.T) {
	cfg := enabledDefault(t)
	cfg.Subscribe = catalog.Types() // everything a channel may hear
	here := &loopv1.Conversation{Channel: testChannel, ThreadTs: "1700000000.000100", MessageTs: "1700000001.000200"}
	top := &loopv1.Conversation{Channel: testChannel, MessageTs: "1700000000.000100"}
	other := &loopv1.Conversation{Channel: "D0OTHER", ThreadTs: "1.1"}
	issue := &loopv1.LedgerRef{Repo: "octo/repo", IssueNumber: 42, Url: "https://github.com/octo/repo/issues/42"}
	ev := func(ty catalog.Type, source string, conv *loopv1.Conversation, ledger *loopv1.LedgerRef) *loopv1.Event {
		return &loopv1.Event{Id: "e", Type: string(ty), Source: source, Subject: workItem, Conversation: conv, Ledger: ledger}
	}
	for _, c := range []struct {
		name   string
		ev     *loopv1.Event
		skip   string
		thread string
		bind   string
	}{
		{"reply from this channel", ev(catalog.WorkItemReply, "slack", here, nil), skipOrigin, "", ""},
		{"gate feedback from this channel, recorded", ev(catalog.GateFeedback, "slack", here, &loopv1.LedgerRef{Url: "https://github.com/x"}), skipOrigin, "", ""},
		{"slack event without a conversation", ev(catalog.WorkItemReply, "slack", nil, nil), skipOrigin, "", ""},
		{"reply from another Slack conversation", ev(catalog.WorkItemReply, "slack", other, nil), "", "", workItem},
		{"reply from the CLI", ev(catalog.WorkItemReply, "cli", nil, nil), "", "", workItem},
		{"comment read back carrying this channel's envelope", ev(catalog.CommentHuman, "github", here, nil), skipEcho, "", ""},
		{"ledger read-back of this channel's record", ev(catalog.LedgerRecord, "github", here, nil), skipUnsubscribable, "", ""},
		{"comment with no conversation", ev(catalog.CommentHuman, "github", nil, nil), "", "", workItem},
		{"kickoff answer, top-level message", ev(catalog.WorkItemCreate, "slack", top, issue), "", top.MessageTs, "github:octo/repo#42"},
		{"kickoff not yet recorded", ev(catalog.WorkItemCreate, "slack", top, nil), skipOrigin, "", ""},
		{"kickoff from another conversation", ev(catalog.WorkItemCreate, "slack", other, issue), "", "", workItem},
		{"record failed for this channel", ev(catalog.RecordFailed, "slack", here, nil), "", here.ThreadTs, ""},
		{"record failed for another conversation", ev(catalog.RecordFailed, "slack", other, nil), skipOtherConv, "", ""},
		{"gate paused for this channel", ev(catalog.GatePaused, "loop", here, nil), "", here.ThreadTs, ""},
		{"gate paused for another conversation", ev(catalog.GatePaused, "loop", other, nil), skipOtherConv, "", ""},
		{"gate paused without a conversation", ev(catalog.GatePaused, "loop", nil, nil), skipOtherConv, "", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			p, skip := route(cfg, c.ev)
			if skip != c.skip || p.thread != c.thread || p.bindRef != c.bind {
				t.Errorf("route = (%+v, %q), want thread %q, bind %q, skip %q", p, skip, c.thread, c.bind, c.skip)
			}
		})
	}

	// The two answers go back whatever the subscriptions.
	cfg.Subscribe = nil
	if _, skip := route(cfg, ev(catalog.WorkItemCreate, "slack", top, issue)); skip != "" {
		t.Errorf("kickoff answer skipped without a subscription: %s", skip)
	}
	if _, skip := route(cfg, ev(catalog.RecordFailed, "loop", here, nil)); skip != "" {
		t.Errorf("record-failed notice skipped without a subscription: %s", skip)
	}
	if _, skip := route(cfg, ev(catalog.GatePaused, "loop", here, nil)); skip != "" {
		t.Errorf("gate-paused notice skipped without a subscription: %s", skip)
	}

	off := cfg
	off.Enabled = false
	if _, skip := route(off, ev(catalog.RecordFailed, "slack", here, nil)); skip != skipDisabled {
		t.Errorf("disabled channel: skip %q", skip)
	}
	noID := enabledDefault(t)
	noID.Channel = ""
	if _, skip := route(noID, ask("a", workItem, "q")); skip != skipNoChannel {
		t.Errorf("no channel id: skip %q", skip)
	}
}
