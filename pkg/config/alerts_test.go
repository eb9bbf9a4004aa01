package config

import (
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestReactionsAndAnnounce: present, the sections are on with the original's
// defaults; absent, off; a content outside GitHub's palette is refused.
func TestReactionsAndAnnounce(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		in       string
		want     Reactions
		announce bool
		err      string
	}{
		{name: "absent", in: "routing: {}\n"},
		{name: "present, defaults", in: "routing:\n  reactions: {}\n  announce: {}\n",
			want: Reactions{Enabled: true, Started: "eyes", Completed: "hooray", Error: "confused"}, announce: true},
		{name: "chosen, one skipped", in: "routing:\n  reactions: {started: rocket, error: \"\"}\n",
			want: Reactions{Enabled: true, Started: "rocket", Completed: "hooray"}},
		{name: "switched off", in: "routing:\n  reactions: {enabled: false}\n  announce: {enabled: false}\n",
			want: Reactions{Started: "eyes", Completed: "hooray", Error: "confused"}},
		{name: "not a GitHub reaction", in: "routing:\n  reactions: {completed: tada}\n", err: `routing.reactions.completed (line 3): "tada" is not one of GitHub's reactions`},
		{name: "unknown key", in: "routing:\n  announce: {comment: yes}\n", err: "routing.announce.comment (line 3): unknown key"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cfg, _, _, err := parseIn([]byte("version: 0.7.0\n"+tt.in), "")
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("error %v, want %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, cfg.Routing.Reactions); diff != "" {
				t.Errorf("reactions (-want +got):\n%s", diff)
			}
			if cfg.Routing.Announce.Enabled != tt.announce {
				t.Errorf("announce %v, want %v", cfg.Routing.Announce.Enabled, tt.announce)
			}
			if got := cfg.Routing.Reactions.Content(ReactionStarted); got != tt.want.Started && tt.want.Enabled {
				t.Errorf("started content %q", got)
			}
		})
	}
}

const alertsConfig = `version: 0.7.0
routing:
  authorizedUsers:
    - {github: alice, slack: U0ALICE}
    - {github: bob}
collaborators:
  - handle: "@alice"
    roles: [engineer]
    notifications:
      channels:
        - {type: slack, config: {channel-list: [C0ALERTS, U0ALICE]}}
  - handle: bob
    roles: [approver, engineer]
    notifications:
      channels:
        - {type: slack, config: {channel-list: [C0ALERTS]}}
        - {type: slack, enabled: false, config: {channel-list: [C0MUTED]}}
  - handle: carol
    roles: [qa]
    notifications: {enabled: false, channels: [{type: slack, config: {channel-list: [C0QA]}}]}
  - handle: octo/oncall
    kind: group
    roles: [approver]
    notifications:
      channels: [{type: slack, config: {channel-list: [C0ONCALL]}}]
notifications:
  events:
    session-died: [engineer]
    dispatch-failed: [approver]
    work-item-spawned: [qa]
`

// TestAlertTargets: an alert goes to the conversations of the collaborators
// of its roles, mentioning each by the Slack id their authorizedUsers entry
// gives; a muted collaborator or channel gets nothing; a kind that reaches
// nobody is warned about.
func TestAlertTargets(t *testing.T) {
	t.Parallel()
	cfg, ws, _, err := parseIn([]byte(alertsConfig), "")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]Alert{
		AlertSessionDied: {
			{Conversation: "C0ALERTS", Mention: []string{"U0ALICE"}},
			{Conversation: "U0ALICE"},
		},
		AlertDispatchFailed:      {{Conversation: "C0ALERTS"}, {Conversation: "C0ONCALL"}},
		AlertWorkItemSpawned:     nil,
		AlertDroppedUnauthorized: nil,
	}
	for kind, w := range want {
		if diff := cmp.Diff(w, cfg.AlertTargets(kind)); diff != "" {
			t.Errorf("%s (-want +got):\n%s", kind, diff)
		}
		if cfg.Alerts(kind) != (len(w) > 0) {
			t.Errorf("Alerts(%s) = %v", kind, cfg.Alerts(kind))
		}
	}
	if !slices.ContainsFunc(ws, func(w Warning) bool { return w.Path == "notifications.events.work-item-spawned" }) {
		t.Errorf("no warning that work-item-spawned reaches nobody: %v", ws)
	}
	off, _, _, err := parseIn([]byte(strings.Replace(alertsConfig, "notifications:\n  events:", "notifications:\n  enabled: false\n  events:", 1)), "")
	if err != nil {
		t.Fatal(err)
	}
	if got := off.AlertTargets(AlertSessionDied); got != nil {
		t.Errorf("notifications off, still alerts %v", got)
	}
}

// TestAlertsRefused: a role, kind or channel the schema does not know is
// refused, naming the key.
func TestAlertsRefused(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"notifications:\n  events: {session-died: [janitor]}\n":                                            `notifications.events.session-died (line 3): "janitor" is not`,
		"notifications:\n  events: {session-born: [qa]}\n":                                                 "notifications.events.session-born (line 3): unknown key",
		"collaborators:\n  - {roles: [qa]}\n":                                                              "collaborators[0] (line 3): a collaborator needs a handle",
		"collaborators:\n  - {handle: x}\n":                                                                "collaborators[0] (line 3): collaborator x needs at least one role",
		"collaborators:\n  - {handle: x, roles: [qa], email: x@y}\n":                                       "collaborators[0].email (line 3): unknown key",
		"collaborators:\n  - handle: x\n    roles: [qa]\n    notifications: {channels: [{type: email}]}\n": "slack is the only notification channel",
	} {
		_, _, _, err := parseIn([]byte("version: 0.7.0\n"+in), "")
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: error %v, want %q", in, err, want)
		}
	}
	_, ws, _, err := parseIn([]byte("version: 0.7.0\ncollaborators:\n  - handle: x\n    roles: [qa]\n    notifications: {channels: [{type: slack, config: {channel-list: [\"#the-loop\"]}}]}\n"), "")
	if err != nil || len(ws) != 1 || !strings.Contains(ws[0].Message, "is not a Slack channel or member id") {
		t.Errorf("a channel name: err %v, warnings %v", err, ws)
	}
}
