package config

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/the-loop/bus/pkg/catalog"
)

// originalFile is an operator's config written for the original, using every
// key of its configuration schema once (TestOriginalFileCoversTheSchema keeps
// it so).
const originalFile = "original-every-key.yaml"

// TestOriginalConfigLoads: the original's every-key file is refused only for
// the two keys 0.7.0 removed, each naming `the-loop migrate-config`;
// migrate-config turns it into a 0.7.0 file that keeps its comments and that a
// second run leaves byte for byte; that file loads with warnings only — one
// per key without meaning here, naming it — and every key with a meaning here
// takes effect.
func TestOriginalConfigLoads(t *testing.T) {
	t.Parallel()
	src := readTestdata(t, originalFile)

	_, _, err := Parse(src)
	var refused []string
	for _, e := range leafErrors(err) {
		var ke *KeyError
		if !errors.As(e, &ke) || !errors.Is(e, ErrRemovedKey) {
			t.Errorf("refused for something other than a removed key: %v", e)
			continue
		}
		if !strings.Contains(ke.Msg, "`the-loop migrate-config`") {
			t.Errorf("%s: the refusal does not name the-loop migrate-config: %s", ke.Path, ke.Msg)
		}
		refused = append(refused, ke.Path)
	}
	if want := []string{"channels.slack.events", "channels.slack.authorizedUsers"}; !slices.Equal(refused, want) {
		t.Errorf("refused %v, want exactly %v", refused, want)
	}

	out, rep, err := Migrate(src)
	if err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	if !rep.Changed() {
		t.Fatal("Migrate changed nothing")
	}
	golden(t, "original-every-key.migrated.yaml", out)
	again, rep2, err := Migrate(out)
	if err != nil || rep2.Changed() || !bytes.Equal(again, out) {
		t.Errorf("a second migrate-config changed the file: err=%v report=%+v", err, rep2)
	}
	for _, line := range bytes.Split(src, []byte("\n")) {
		_, comment, ok := bytes.Cut(line, []byte("#"))
		if !ok {
			continue
		}
		if c := bytes.TrimSpace(comment); !bytes.Contains(out, c) {
			t.Errorf("comment %q lost", c)
		}
	}

	cfg, ws, err := Parse(out)
	if err != nil {
		t.Fatalf("the migrated file does not load: %v", err)
	}
	var b strings.Builder
	warned := map[string]int{}
	for _, w := range ws {
		fmt.Fprintln(&b, w)
		warned[w.Path]++
	}
	golden(t, "original-every-key.warnings.txt", []byte(b.String()))
	keys := yamlKeys(t, out)
	for path, n := range warned {
		switch {
		case n > 1:
			t.Errorf("%s warned about %d times, want once", path, n)
		case !slices.Contains(keys, path):
			t.Errorf("a warning names %q, which is not a key of the file", path)
		}
	}
	// Each key the file sets with a meaning here is never warned about.
	for _, path := range []string{
		"routing.spawnOnUnmatched", "routing.autoExecuteLabel", "routing.spawnWorkdir", "routing.control.keywords.stop",
		"routing.authorizedUsers", "polling.intervalSeconds", "webhooks.ghWebhook.port", "channels.slack.verbosity",
		"channels.slack.botTokenEnv", "integrations.github.api.tokenEnv", "integrations.github.api.baseUrl",
		"routing.enabled", "routing.interaction.mode", "webhooks.ghWebhook.path", "service.port",
		"routing.defaultHarness", "routing.harnessArgs.claude", "routing.harnessArgs.cursor", "routing.harnessTrust.enabled",
		"routing.harnessTrust.scope", "routing.harnessTrust.acceptBypassPermissions", "routing.harnessPlugins.enabled",
		"routing.workspace.root", "routing.workspace.strategy", "routing.workspace.gitBinary", "routing.tmux.sessionPerPr",
	} {
		if warned[path] > 0 {
			t.Errorf("%s has a meaning here (or asks for what is built in) and was warned about", path)
		}
	}

	// The 0.7.0 model's keys took effect.
	c := cfg.Routing.Control
	if c.RequireStartCommand || !c.Enabled || c.Keywords["stop"] != "the-loop halt" || c.Keywords["do"] != "the-loop task" || c.Keywords["cleanup"] != "" {
		t.Errorf("routing.control = %+v", c)
	}
	if got := strings.Join(cfg.Routing.AuthorizedUsers.GitHubLogins(), ","); got != "alice,bob" {
		t.Errorf("GitHub logins = %s", got)
	}
	if got := strings.Join(cfg.Routing.AuthorizedUsers.SlackIDs(), ","); got != "U111" {
		t.Errorf("Slack ids = %s (the migrated channels.slack.authorizedUsers)", got)
	}
	// The harness keys took effect: arguments, trust, workspace, PR sessions.
	r := cfg.Routing
	h := r.Harness
	if h.Default != HarnessClaude || !slices.Equal(h.ArgsFor(HarnessClaude), []string{"--permission-mode", "acceptEdits"}) ||
		h.Args[HarnessCursor] == nil || len(h.Args[HarnessCursor]) != 0 {
		t.Errorf("routing harness = %+v", h)
	}
	if h.Trust != (HarnessTrust{Enabled: true, Scope: TrustWorkspaceRoot, AcceptBypassPermissions: BypassAuto}) ||
		!h.Plugins.Enabled || h.Plugins.MarketplaceRepo != "octo/the-loop-fork" {
		t.Errorf("routing.harnessTrust, harnessPlugins = %+v, %+v", h.Trust, h.Plugins)
	}
	if r.Workspace != (Workspace{Root: "/srv/workspace", Strategy: WorkspaceWorktree, CloneProtocol: "https", DefaultHost: "github.com", GitBinary: "git"}) ||
		r.SessionPerPR != PRSessionsCrossRepository || r.Interaction != InteractionWorkItem || r.Prompts != (Prompts{}) {
		t.Errorf("routing workspace, sessionPerPr, interaction, prompts = %+v, %s, %s, %+v", r.Workspace, r.SessionPerPR, r.Interaction, r.Prompts)
	}

	sl := cfg.Channels.Slack
	if !sl.Enabled || sl.Channel != "C0123456789" || sl.Verbosity != VerbosityVerbose || sl.Read.Mode != ReadSocket || sl.Read.IntervalSeconds != 15 ||
		!slices.Equal(sl.Subscribe, []catalog.Type{catalog.SessionAwaitingInput, catalog.PhaseApprovalPending}) {
		t.Errorf("channels.slack = %+v", sl)
	}

	// The keys that are process settings here took effect, read from the
	// variables the file names where it names one.
	env := Env{
		"TEAM_SLACK_BOT_TOKEN":        "xoxb-from-the-teams-variable",
		"GH_TOKEN":                    "ghp_second_of_the_two_named",
		"THE_LOOP_GH_WEBHOOK_SECRET":  "webhook-secret-of-the-original",
		"LOOP_GITHUB_WRITES_PER_HOUR": "400",
	}
	applied, aws := cfg.ApplySettings(env)
	if len(aws) != 0 {
		t.Errorf("warnings with an environment that sets none of them: %v", aws)
	}
	// The services read these variables (their Config types, whose
	// reading cmd/the-loop tests with such a file); here, their values.
	var gh GitHub
	if err := Process(applied, &gh); err != nil {
		t.Fatalf("Process: %v", err)
	}
	interval, _ := time.ParseDuration(applied["LOOP_GITHUB_POLL_INTERVAL"])
	for name, got := range map[string]any{
		"PollLabel":     applied["LOOP_GITHUB_POLL_LABEL"] == "loop: go",
		"PollInterval":  interval == 120*time.Second,
		"PollRepos":     applied["LOOP_GITHUB_POLL_REPOS"] == "octo/repo,octo/infra",
		"Mode":          applied["LOOP_GITHUB_MODE"] == "both",
		"WebhookAddr":   applied["LOOP_GITHUB_WEBHOOK_ADDR"] == "0.0.0.0:9787",
		"APIURL":        gh.APIURL == "https://github.example.com/api/v3/",
		"Token":         gh.Token.Reveal() == "ghp_second_of_the_two_named",
		"WebhookSecret": applied["LOOP_GITHUB_WEBHOOK_SECRET"] == "webhook-secret-of-the-original",
		"WritesPerHour": applied["LOOP_GITHUB_WRITES_PER_HOUR"] == "400",
		"BotToken":      applied["LOOP_SLACK_BOT_TOKEN"] == "xoxb-from-the-teams-variable",
		"AppToken":      applied["LOOP_SLACK_APP_TOKEN"] == "", // TEAM_SLACK_APP_TOKEN is not set
		"Spawn":         applied["LOOP_DISPATCHER_SPAWN"] == "always",
		"Workdir":       applied["LOOP_DISPATCHER_WORKDIR"] == "/srv/work",
		"Harness":       applied["LOOP_HARNESS"] == "claude",
	} {
		if got != true {
			t.Errorf("%s did not take effect: %v", name, applied)
		}
	}

	// An environment variable that is set wins over the file, with a
	// warning naming the key and the variable, never a value.
	env["LOOP_GITHUB_POLL_LABEL"] = "ops: run"
	env["LOOP_SLACK_BOT_TOKEN"] = "xoxb-set-directly"
	applied, aws = cfg.ApplySettings(env)
	if applied["LOOP_GITHUB_POLL_LABEL"] != "ops: run" || applied["LOOP_SLACK_BOT_TOKEN"] != "xoxb-set-directly" {
		t.Errorf("the environment did not win: %q, %q", applied["LOOP_GITHUB_POLL_LABEL"], applied["LOOP_SLACK_BOT_TOKEN"])
	}
	var got []string
	for _, w := range aws {
		got = append(got, w.Path+": "+w.Message)
		if strings.Contains(w.String(), "xoxb") || strings.Contains(w.String(), "ops: run") {
			t.Errorf("a warning carries a value: %s", w)
		}
	}
	if want := []string{
		"channels.slack.botTokenEnv: LOOP_SLACK_BOT_TOKEN is set in the environment and wins over this key",
		"routing.autoExecuteLabel: LOOP_GITHUB_POLL_LABEL is set in the environment and wins over this key",
	}; !slices.Equal(sortedCopy(got), want) {
		t.Errorf("override warnings:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestOriginalKeyKinds: each way an original key is read, on small files.
func TestOriginalKeyKinds(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		in       string
		warns    []string // paths warned about, in order
		settings []string // NAME=value or NAME<-VAR,VAR
		errs     []string
	}{
		{name: "built in, as built", in: "routing:\n  enabled: yes\n  interaction: {mode: work-item}\nintegrations:\n  github: {transport: auto}\n"},
		{name: "built in, asked otherwise", in: "routing:\n  enabled: false\n  graph: {repoHooks: true}\n", warns: []string{"routing.enabled", "routing.graph.repoHooks"}},
		{name: "switched off by default", in: "selfDiagnosis:\n  repo: a/b\nstandingSessions:\n  sessions: [{name: x}]\n"},
		{name: "switched off explicitly", in: "service:\n  enabled: false\n  port: 1\n"},
		{name: "a key the original had not either", in: "routingX: 1\n", errs: []string{"routingX (line 2): unknown key"}},
		{name: "switched on by default", in: "service:\n  port: 1\n", warns: []string{"service.port"}},
		{name: "read here now", in: "routing:\n  defaultHarness: cursor\n  interaction: {mode: cli}\n  workspace: {root: /w, strategy: clone}\n  tmux: {sessionPerPr: true, remainOnExit: true}\n",
			warns: []string{"routing.tmux.remainOnExit"}, settings: []string{"LOOP_HARNESS=cursor", "LOOP_WORKSPACE_ROOT=/w", "LOOP_WORKSPACE_STRATEGY=clone"}},
		{name: "an ignored section's keys each", in: "integrations:\n  jira:\n    api: {baseUrl: x, tokenEnv: Y}\n    cli: {}\n",
			warns: []string{"integrations.jira.api.baseUrl", "integrations.jira.api.tokenEnv", "integrations.jira.cli"}},
		{name: "typo under a mapped section", in: "webhooks:\n  ghWebhook:\n    prot: 1\n", errs: []string{"webhooks.ghWebhook.prot (line 4): unknown key"}},
		{name: "webhook only", in: "webhooks:\n  ghWebhook: {enabled: true, port: 9000}\n",
			settings: []string{"LOOP_GITHUB_MODE=webhook", "LOOP_GITHUB_WEBHOOK_ADDR=127.0.0.1:9000"}},
		{name: "poll only", in: "polling:\n  enabled: true\n  sources:\n    - {provider: github, label: go, repos: [a/b]}\n    - {provider: jira, project: X}\n",
			warns: []string{"polling.sources[1]"}, settings: []string{"LOOP_GITHUB_MODE=poll", "LOOP_GITHUB_POLL_REPOS=a/b", "LOOP_GITHUB_POLL_LABEL=go"}},
		{name: "neither receiver", in: "webhooks:\n  ghWebhook: {enabled: false}\npolling: {enabled: false}\n", warns: []string{"webhooks.ghWebhook.enabled"}},
		{name: "labels disagree", in: "routing: {autoExecuteLabel: run}\npolling:\n  sources: [{provider: github, label: other, repos: [a/b]}]\n",
			warns: []string{"polling.sources[0].label"}, settings: []string{"LOOP_GITHUB_POLL_REPOS=a/b", "LOOP_GITHUB_POLL_LABEL=run"}},
		{name: "a source's own keys", in: "polling:\n  sources: [{provider: github, repos: [a/b], since: 2024}]\n",
			warns: []string{"polling.sources[0].since"}, settings: []string{"LOOP_GITHUB_POLL_REPOS=a/b"}},
		{name: "token variables", in: "channels:\n  slack: {botTokenEnv: MY_BOT}\nintegrations:\n  github:\n    api: {tokenEnv: [LOOP_ENVELOPE_KEY, GH]}\n",
			warns: []string{"integrations.github.api.tokenEnv"}, settings: []string{"LOOP_SLACK_BOT_TOKEN<-MY_BOT", "LOOP_GITHUB_TOKEN<-GH"}},
		{name: "bad values of mapped keys", in: "routing: {spawnOnUnmatched: sometimes}\npolling: {intervalSeconds: 1}\nwebhooks:\n  ghWebhook: {port: 99999}\n",
			errs: []string{"routing.spawnOnUnmatched (line 2): \"sometimes\" is not never, labeled or always",
				"polling.intervalSeconds (line 3): is 1", "webhooks.ghWebhook.port (line 5): want a port"}},
		{name: "removed keys still refused", in: "channels:\n  slack: {events: [session.awaiting_input], botTokenEnv: X}\n",
			errs: []string{"channels.slack.events (line 3): removed in config 0.7.0"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cfg, ws, _, err := parseIn([]byte("version: 0.7.0\n"+tt.in), "")
			var warns []string
			for _, w := range ws {
				warns = append(warns, w.Path)
			}
			if !slices.Equal(warns, tt.warns) {
				t.Errorf("warned %v, want %v\n%v", warns, tt.warns, ws)
			}
			for _, e := range tt.errs {
				if err == nil || !strings.Contains(err.Error(), e) {
					t.Errorf("error %v, want it to contain %q", err, e)
				}
			}
			if len(tt.errs) > 0 {
				return
			}
			if err != nil {
				t.Fatalf("refused: %v", err)
			}
			var got []string
			for _, s := range cfg.Settings {
				if len(s.FromEnv) > 0 {
					got = append(got, s.Name+"<-"+strings.Join(s.FromEnv, ","))
				} else {
					got = append(got, s.Name+"="+s.Value)
				}
			}
			if !slices.Equal(got, tt.settings) {
				t.Errorf("settings %v, want %v", got, tt.settings)
			}
		})
	}
}

// TestOriginalFileCoversTheSchema checks the migration against the key paths
// of the original's configuration schema (testdata/original-keys.txt): the
// file the tests above load holds every one of them, and every key this
// package reads as the original's is one of them.
func TestOriginalFileCoversTheSchema(t *testing.T) {
	t.Parallel()
	var paths []string
	for _, line := range strings.Split(string(readTestdata(t, "original-keys.txt")), "\n") {
		if line = strings.TrimSpace(line); line != "" && !strings.HasPrefix(line, "#") {
			paths = append(paths, line)
		}
	}
	if len(paths) < 150 {
		t.Fatalf("read only %d keys from the schema", len(paths))
	}
	keys := yamlKeys(t, readTestdata(t, originalFile))
	for _, p := range paths {
		if !slices.Contains(keys, p) {
			t.Errorf("testdata/%s does not use %s", originalFile, p)
		}
	}
	for _, k := range originalKeys {
		if !slices.Contains(paths, k.path) {
			t.Errorf("originalKeys names %s, which the original's schema does not have", k.path)
		}
	}
}

// yamlKeys lists every key path of a YAML file, a list's items as path[]
// and, for the warnings, path[i] too.
func yamlKeys(t *testing.T, src []byte) []string {
	t.Helper()
	var doc yaml.Node
	if err := yaml.Unmarshal(src, &doc); err != nil {
		t.Fatal(err)
	}
	var out []string
	var walk func(n *yaml.Node, path, indexed string)
	walk = func(n *yaml.Node, path, indexed string) {
		switch n.Kind {
		case yaml.MappingNode:
			for i := 0; i+1 < len(n.Content); i += 2 {
				k := n.Content[i].Value
				out = append(out, join(path, k))
				if indexed != path {
					out = append(out, join(indexed, k))
				}
				walk(n.Content[i+1], join(path, k), join(indexed, k))
			}
		case yaml.SequenceNode:
			for i, it := range n.Content {
				out = append(out, fmt.Sprintf("%s[%d]", indexed, i))
				walk(it, path+"[]", fmt.Sprintf("%s[%d]", indexed, i))
			}
		}
	}
	walk(doc.Content[0], "", "")
	return out
}

// leafErrors flattens errors.Join trees.
func leafErrors(err error) []error {
	if err == nil {
		return nil
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		var out []error
		for _, e := range j.Unwrap() {
			out = append(out, leafErrors(e)...)
		}
		return out
	}
	return []error{err}
}

func sortedCopy(s []string) []string {
	c := slices.Clone(s)
	slices.Sort(c)
	return c
}

// TestKeysWithoutMeaningAreDecided: every key of the original's that has no
// behaviour here is named, with why, in the decision that lists them; and
// every warning of the every-key file that says a key has no meaning is
// about one of those keys.
func TestKeysWithoutMeaningAreDecided(t *testing.T) {
	b, err := os.ReadFile("../../docs/decisions/123-original-keys-without-meaning.md")
	if err != nil {
		t.Fatal(err)
	}
	decision := string(b)
	var listed []string
	for _, k := range originalKeys {
		if k.kind != origIgnored && k.kind != origFeature {
			continue
		}
		listed = append(listed, k.path)
		if !strings.Contains(decision, "`"+k.path+"`") {
			t.Errorf("%s has no behaviour here, but decision 123 does not say why", k.path)
		}
	}
	listed = append(listed, "standingSessions.sessions[0].cwd", "standingSessions.sessions[0].slack.channel")
	golden, err := os.ReadFile(filepath.Join("testdata", "original-every-key.warnings.txt"))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(golden)), "\n") {
		if !strings.Contains(line, "has no meaning here") {
			continue
		}
		key, _, _ := strings.Cut(line, " ")
		if !slices.ContainsFunc(listed, func(p string) bool { return key == p || strings.HasPrefix(key, p+".") }) {
			t.Errorf("the every-key file warns that %s has no meaning, but it is not among the decided keys", key)
		}
	}
}
