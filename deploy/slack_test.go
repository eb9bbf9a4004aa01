package deploy

import (
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/slack-go/slack"
	"github.com/slack-go/slack/socketmode"
	"sigs.k8s.io/yaml"
)

// slackScopes is what each Slack Web API call the services make needs: a bot
// scope, "app:" an app-level token's scope, "" none. A call the services
// start making fails TestSlackManifest until it is named here and its scope
// is in the manifest.
var slackScopes = map[string][]string{
	"PostMessageContext":            {"chat:write"},
	"UpdateMessageContext":          {"chat:write"},
	"PostEphemeralContext":          {"chat:write"},
	"GetConversationHistoryContext": {"channels:history", "groups:history"},
	"GetConversationRepliesContext": {"channels:history", "groups:history"},
	"AuthTestContext":               {""},
	"StartSocketModeContext":        {"app:connections:write"},
	"RunContext":                    {"app:connections:write"}, // socketmode.Client
}

// TestSlackManifest: deploy/slack/manifest.yaml asks for exactly the bot
// scopes the Slack calls in the services' code need, and the events they
// read (messages; button presses through interactivity).
func TestSlackManifest(t *testing.T) {
	api := map[string]bool{}
	for _, typ := range []reflect.Type{reflect.TypeFor[*slack.Client](), reflect.TypeFor[*socketmode.Client]()} {
		for i := range typ.NumMethod() {
			if name := typ.Method(i).Name; strings.HasSuffix(name, "Context") {
				api[name] = true
			}
		}
	}
	call := regexp.MustCompile(`\.([A-Z][A-Za-z]*Context)\(`)
	used := map[string]bool{}
	for _, dir := range []string{"../services/ingress-slack", "../services/slack-renderer", "../pkg/slackmsg"} {
		files, err := filepath.Glob(filepath.Join(dir, "*.go"))
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range files {
			if strings.HasSuffix(f, "_test.go") {
				continue
			}
			src, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			for _, m := range call.FindAllStringSubmatch(string(src), -1) {
				if api[m[1]] {
					used[m[1]] = true
				}
			}
		}
	}
	if !used["PostMessageContext"] || !used["GetConversationRepliesContext"] {
		t.Fatalf("found the Slack calls %v: the scan no longer sees the services' calls", used)
	}
	want := map[string]bool{}
	for m := range used {
		scopes, ok := slackScopes[m]
		if !ok {
			t.Errorf("the services call Slack's %s: name its scope in slackScopes and in deploy/slack/manifest.yaml", m)
		}
		for _, s := range scopes {
			if s != "" && !strings.HasPrefix(s, "app:") {
				want[s] = true
			}
		}
	}
	raw, err := os.ReadFile("slack/manifest.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var manifest struct {
		OAuth struct {
			Scopes struct {
				Bot  []string `json:"bot"`
				User []string `json:"user"`
			} `json:"scopes"`
		} `json:"oauth_config"`
		Settings struct {
			Events struct {
				Bot []string `json:"bot_events"`
			} `json:"event_subscriptions"`
			Interactivity struct {
				Enabled bool `json:"is_enabled"`
			} `json:"interactivity"`
			SocketMode bool `json:"socket_mode_enabled"`
		} `json:"settings"`
	}
	if err := yaml.Unmarshal(raw, &manifest); err != nil {
		t.Fatal(err)
	}
	var wantList []string
	for s := range want {
		wantList = append(wantList, s)
	}
	sort.Strings(wantList)
	got := slices.Sorted(slices.Values(manifest.OAuth.Scopes.Bot))
	if !slices.Equal(got, wantList) {
		t.Errorf("manifest bot scopes %v, the services' calls need exactly %v", got, wantList)
	}
	if len(manifest.OAuth.Scopes.User) > 0 {
		t.Errorf("manifest asks for user scopes %v; the services act as the bot only", manifest.OAuth.Scopes.User)
	}
	if events := slices.Sorted(slices.Values(manifest.Settings.Events.Bot)); !slices.Equal(events, []string{"message.channels", "message.groups"}) {
		t.Errorf("manifest bot events %v, want the channel messages ingress-slack reads", events)
	}
	if !manifest.Settings.Interactivity.Enabled {
		t.Error("interactivity is off: the Approve and Request changes buttons would do nothing")
	}
	if !manifest.Settings.SocketMode {
		t.Error("Socket Mode is off: the default read.mode is socket")
	}
}
