package identity

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

var people = []Person{
	{GitHub: "Octocat", Slack: "U100", Name: "Mona"},
	{GitHub: "hubot"},
	{Slack: "U200", Name: "Slack only"},
}

func TestByChannel(t *testing.T) {
	t.Parallel()
	d, problems := New(people)
	if len(problems) != 0 {
		t.Fatalf("New: %v", problems)
	}
	tests := []struct {
		name string
		ch   Channel
		id   string
		want Person
		ok   bool
	}{
		{"github exact", ChannelGitHub, "Octocat", people[0], true},
		{"github case-insensitive", ChannelGitHub, "OCTOCAT", people[0], true},
		{"github bare entry", ChannelGitHub, "hubot", people[1], true},
		{"slack exact", ChannelSlack, "U100", people[0], true},
		{"slack is case-sensitive", ChannelSlack, "u100", Person{}, false},
		{"slack-only entry by slack", ChannelSlack, "U200", people[2], true},
		{"empty id matches nobody", ChannelGitHub, "", Person{}, false},
		{"empty id on slack matches no github-only entry", ChannelSlack, "", Person{}, false},
		{"unknown channel", Channel("jira"), "Octocat", Person{}, false},
		{"unknown login", ChannelGitHub, "mallory", Person{}, false},
		{"a name is not an id", ChannelGitHub, "Mona", Person{}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := d.ByChannel(tt.ch, tt.id)
			if ok != tt.ok {
				t.Fatalf("ByChannel(%q, %q) ok = %v, want %v", tt.ch, tt.id, ok, tt.ok)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("ByChannel(%q, %q) (-want +got):\n%s", tt.ch, tt.id, diff)
			}
			if d.Authorized(tt.ch, tt.id) != tt.ok {
				t.Errorf("Authorized(%q, %q) = %v, want %v", tt.ch, tt.id, !tt.ok, tt.ok)
			}
		})
	}
}

func TestViews(t *testing.T) {
	t.Parallel()
	d, _ := New(people)
	if diff := cmp.Diff([]string{"Octocat", "hubot"}, d.GitHubLogins()); diff != "" {
		t.Errorf("GitHubLogins (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"U100", "U200"}, d.SlackIDs()); diff != "" {
		t.Errorf("SlackIDs (-want +got):\n%s", diff)
	}
	if d.Len() != 3 {
		t.Errorf("Len = %d, want 3", d.Len())
	}
	// People is a copy: changing it changes nothing inside.
	ps := d.People()
	ps[0].GitHub = "mallory"
	if !d.Authorized(ChannelGitHub, "octocat") || d.Authorized(ChannelGitHub, "mallory") {
		t.Error("People() leaked the directory's own slice")
	}
}

func TestFailClosed(t *testing.T) {
	t.Parallel()
	var nilDir *Directory
	empty, _ := New(nil)
	for name, d := range map[string]*Directory{"nil": nilDir, "empty": empty, "zero": {}} {
		t.Run(name, func(t *testing.T) {
			if d.Authorized(ChannelGitHub, "octocat") || d.Authorized(ChannelSlack, "U1") {
				t.Error("an empty directory authorized someone")
			}
			if len(d.GitHubLogins()) != 0 || len(d.SlackIDs()) != 0 || d.Len() != 0 || d.People() != nil {
				t.Error("an empty directory has views")
			}
		})
	}
}

func TestNewSkips(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		in       []Person
		want     []Person
		problems int
	}{
		{"no ids", []Person{{Name: "ghost"}}, nil, 1},
		{"github clash ignores case", []Person{{GitHub: "alice"}, {GitHub: "ALICE", Slack: "U9"}}, []Person{{GitHub: "alice"}}, 1},
		{"slack clash", []Person{{Slack: "U1"}, {GitHub: "bob", Slack: "U1"}}, []Person{{Slack: "U1"}}, 1},
		{"distinct slack case is not a clash", []Person{{Slack: "U1"}, {Slack: "u1"}}, []Person{{Slack: "U1"}, {Slack: "u1"}}, 0},
		{"clean", []Person{{GitHub: "a"}, {GitHub: "b", Slack: "U2"}}, []Person{{GitHub: "a"}, {GitHub: "b", Slack: "U2"}}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, problems := New(tt.in)
			if len(problems) != tt.problems {
				t.Errorf("problems = %v, want %d", problems, tt.problems)
			}
			if diff := cmp.Diff(tt.want, d.People()); diff != "" {
				t.Errorf("People (-want +got):\n%s", diff)
			}
		})
	}
}

func TestPerson(t *testing.T) {
	t.Parallel()
	tests := []struct {
		p       Person
		ids     map[Channel]string
		github  bool
		slack   bool
		printed string
	}{
		{Person{GitHub: "octocat", Slack: "U1", Name: "Mona"}, map[Channel]string{ChannelGitHub: "octocat", ChannelSlack: "U1"}, true, true, "Mona (github:octocat slack:U1)"},
		{Person{Slack: "U2"}, map[Channel]string{ChannelSlack: "U2"}, false, true, "slack:U2"},
		{Person{GitHub: "hubot"}, map[Channel]string{ChannelGitHub: "hubot"}, true, false, "github:hubot"},
	}
	for _, tt := range tests {
		t.Run(tt.printed, func(t *testing.T) {
			if diff := cmp.Diff(tt.ids, tt.p.IDs()); diff != "" {
				t.Errorf("IDs (-want +got):\n%s", diff)
			}
			if tt.p.ActsOn(ChannelGitHub) != tt.github || tt.p.ActsOn(ChannelSlack) != tt.slack {
				t.Errorf("ActsOn github=%v slack=%v, want %v %v", tt.p.ActsOn(ChannelGitHub), tt.p.ActsOn(ChannelSlack), tt.github, tt.slack)
			}
			if got := tt.p.String(); got != tt.printed {
				t.Errorf("String = %q, want %q", got, tt.printed)
			}
		})
	}
	if KnownChannel("jira") || !KnownChannel(ChannelSlack) {
		t.Error("KnownChannel")
	}
}
