package config

import (
	"fmt"
	"maps"
	"net"
	"slices"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// An operator's existing file, written for the original the-loop, loads
// (docs/decisions/065-original-config-keys.md): every key of the original's
// configuration is known here, and is one of
//
//   - part of the 0.7.0 model (routing.authorizedUsers, routing.control,
//     the harness, prompt, interaction and workspace keys of routing
//     (harness.go), channels.slack's channel, verbosity and read): read as
//     before;
//   - a process setting here (routing.autoExecuteLabel is LOOP_GITHUB_POLL_LABEL,
//     polling.intervalSeconds LOOP_GITHUB_POLL_INTERVAL, …): kept in
//     Config.Settings and applied to the environment at start, where the
//     environment does not set it (ApplySettings);
//   - built in here: silent when the file asks for what this the-loop always
//     does (routing.enabled: true), one warning naming the key otherwise;
//   - without meaning here (the original's control-plane service, its
//     reactions, …): one warning per key, naming it. A section
//     that the file switches off (selfDiagnosis.enabled: false) asks for
//     nothing and is accepted silently;
//   - removed by 0.7.0 (channels.slack.events, channels.slack.authorizedUsers):
//     refused, naming `the-loop migrate-config`.
//
// A key the original did not have either is still refused as unknown.

// FileSetting is a process setting the operator config sets: a key of the
// original's configuration whose meaning here is a LOOP_* setting.
type FileSetting struct {
	// Name is the setting, LOOP_GITHUB_POLL_LABEL.
	Name string
	// Value is what the file sets it to. When FromEnv is set instead, the
	// file names variables of the environment that hold the value (the
	// original's *Env keys): the first one set wins.
	Value   string
	FromEnv []string
	// Path names the key (or keys) in the file, Line where.
	Path string
	Line int
}

// ApplySettings returns env with the process settings the config sets filled
// in where env leaves them unset (or empty), and a warning for each one env
// sets otherwise: an explicit environment variable wins over the file. A
// setting read from a variable the file names is skipped when that variable
// is not set. Values never appear in a warning (some are secrets).
func (c *Config) ApplySettings(env Env) (Env, []Warning) {
	if c == nil || len(c.Settings) == 0 {
		return env, nil
	}
	out := maps.Clone(env)
	if out == nil {
		out = Env{}
	}
	var ws []Warning
	for _, s := range c.Settings {
		v := s.Value
		if len(s.FromEnv) > 0 {
			v = ""
			for _, n := range s.FromEnv {
				if x := env[n]; x != "" {
					v = x
					break
				}
			}
			if v == "" {
				continue
			}
		}
		if cur := env[s.Name]; cur != "" {
			if cur != v {
				ws = append(ws, Warning{Path: s.Path, Line: s.Line,
					Message: fmt.Sprintf("%s is set in the environment and wins over this key", s.Name)})
			}
			continue
		}
		out[s.Name] = v
	}
	return out, ws
}

// EnvWithConfig is env with the process settings of the operator config that
// LOOP_CONFIG names applied (ApplySettings), for a process to read its
// settings from. Without LOOP_CONFIG it is env. A config that does not load is
// an error; the caller decides whether that stops it.
func EnvWithConfig(env Env) (Env, []Warning, error) {
	path := env["LOOP_CONFIG"]
	if path == "" {
		return env, nil, nil
	}
	cfg, _, err := LoadFile(path)
	if err != nil {
		return env, nil, err
	}
	out, ws := cfg.ApplySettings(env)
	return out, ws, nil
}

// legacy gathers the original's keys that become one process setting
// together, resolved when the whole file is read (settle).
type legacy struct {
	webhook, poll   *yaml.Node // webhooks.ghWebhook.enabled, polling.enabled
	host, port      *yaml.Node // webhooks.ghWebhook.host, .port
	repos           []string
	reposAt         *yaml.Node
	reposPath       string
	autoLabel       *yaml.Node // routing.autoExecuteLabel
	sourceLabel     *yaml.Node // polling.sources[].label
	sourceLabelPath string
}

func (p *parser) setting(v *yaml.Node, path, name, value string) {
	p.cfg.Settings = append(p.cfg.Settings, FileSetting{Name: name, Value: value, Path: path, Line: v.Line})
}

// settingStr maps a string key onto the process setting name.
func (p *parser) settingStr(name string) field {
	return func(v *yaml.Node, path string) {
		var s string
		p.str(&s)(v, path)
		if s = strings.TrimSpace(s); s != "" {
			p.setting(v, path, name, s)
		}
	}
}

// settingFromEnv maps one of the original's *Env keys — the name of the
// environment variable holding a secret — onto the process setting name,
// read from that variable at start. A LOOP_* name is not followed: that
// setting is read directly, and a file must not be able to point one secret's
// setting at another secret.
func (p *parser) settingFromEnv(name string) field {
	return func(v *yaml.Node, path string) {
		var names []string
		switch v.Kind {
		case yaml.ScalarNode:
			var s string
			p.str(&s)(v, path)
			names = []string{strings.TrimSpace(s)}
		case yaml.SequenceNode:
			var ok bool
			if names, ok = stringList(v); !ok {
				p.fail(v, path, ErrInvalid, "want a list of environment variable names")
				return
			}
		default:
			p.fail(v, path, ErrInvalid, "want the name of an environment variable")
			return
		}
		var keep []string
		for _, n := range names {
			switch {
			case n == "":
			case strings.HasPrefix(n, Prefix+"_"):
				p.warn(v, path, "names %s, a setting of the-loop's own: it is not read through this key; set %s itself", clip(n), name)
			default:
				keep = append(keep, n)
			}
		}
		if len(keep) > 0 {
			p.cfg.Settings = append(p.cfg.Settings, FileSetting{Name: name, FromEnv: keep, Path: path, Line: v.Line})
		}
	}
}

// builtIn is a key whose only meaning here is what this the-loop always
// does: silent when the value asks for it (one of want), a warning naming the
// key otherwise.
func (p *parser) builtIn(what string, want ...string) field {
	return func(v *yaml.Node, path string) {
		if v.Kind == yaml.ScalarNode && slices.Contains(want, normalScalar(v)) {
			return
		}
		p.warn(v, path, "ignored: the-loop always %s", what)
	}
}

// normalScalar is a scalar's value with YAML 1.1 booleans spelled true/false.
func normalScalar(v *yaml.Node) string {
	if b, ok := yamlBool(v); ok {
		return strconv.FormatBool(b)
	}
	return v.Value
}

// yamlBool reads a boolean scalar as boolean does (YAML 1.1's yes/no/on/off
// too).
func yamlBool(v *yaml.Node) (bool, bool) {
	var b bool
	if v = resolve(v); v == nil || v.Kind != yaml.ScalarNode || v.ShortTag() == "!!null" || v.Decode(&b) != nil {
		return false, false
	}
	return b, true
}

// ignored is a key without meaning here: one warning for each key at or
// under it (a mapping's keys each get their own), saying why.
func (p *parser) ignored(why string) field {
	return func(v *yaml.Node, path string) { p.ignoreTree(v, path, why) }
}

func (p *parser) ignoreTree(v *yaml.Node, path, why string) {
	v = resolve(v)
	if v != nil && v.Kind == yaml.MappingNode && len(v.Content) > 0 {
		for i := 0; i+1 < len(v.Content); i += 2 {
			k := v.Content[i]
			p.ignoreTree(v.Content[i+1], join(path, k.Value), why)
		}
		return
	}
	line := 0
	if v != nil {
		line = v.Line
	}
	p.warnings = append(p.warnings, Warning{Path: path, Line: line, Message: "has no meaning here, so it is ignored: " + why})
}

// feature is a section of the original that switches a feature this
// the-loop does not have on or off with its key switch: switched off (or
// left at the original's default off, when on is false) the section asks for
// nothing and is accepted silently; switched on, every key in it gets its
// warning.
func (p *parser) feature(why, switchKey string, on bool, off func(*yaml.Node) bool) field {
	return func(v *yaml.Node, path string) {
		if v.Kind != yaml.MappingNode {
			p.ignoreTree(v, path, why)
			return
		}
		sw := resolve(hasKey(v, switchKey))
		if isNull(sw) && !on || !isNull(sw) && off(sw) {
			return
		}
		p.ignoreTree(v, path, why)
	}
}

// isFalse is a feature switch: enabled: false.
func isFalse(v *yaml.Node) bool {
	b, ok := yamlBool(v)
	return ok && !b
}

// keep records a node for settle.
func keep(dst **yaml.Node) field { return func(v *yaml.Node, _ string) { *dst = v } }

// origKind is how a key of the original's configuration is read here.
type origKind int

const (
	// origSetting: the key's string value is the process setting.
	origSetting origKind = iota
	// origFromEnv: the key names environment variables holding the setting.
	origFromEnv
	// origBuiltIn: silent when the value is one of want, warned otherwise.
	origBuiltIn
	// origIgnored: one warning for each key at or under it.
	origIgnored
	// origFeature: a section switched off (want[0] false, or absent and
	// off by default) is accepted silently; on, it is origIgnored.
	origFeature
	// origCustom: read by custom (or by its parent's custom, when nil).
	origCustom
)

// origKey is one key of the original's configuration that the 0.7.0 model
// does not read itself. The table drives both the parser and the reference
// (ReferenceMarkdown), so the two cannot drift.
type origKey struct {
	path    string // a list's items are path[]
	kind    origKind
	setting string
	want    []string
	// doc says what the key does here: the setting's meaning, or why it
	// has none.
	doc    string
	custom func(p *parser) field
}

// Feature switches: the key, and whether the original had the feature on
// when the key is absent.
var (
	enabledOff = []string{"enabled", "false"}
	enabledOn  = []string{"enabled", "true"}
)

const (
	noTmux = "the dispatcher keeps its tmux sessions by its own rules"
)

// originalKeys are the original's keys besides the 0.7.0 model's, in the
// order of its schema. Set by init: some of its parsers read it.
var originalKeys []origKey

func init() { originalKeys = originalKeyTable() }

func originalKeyTable() []origKey {
	return []origKey{
		{path: "state", kind: origIgnored, doc: "state lives in JetStream; `the-loop up` keeps its store in LOOP_STORE_DIR"},
		{path: "webhooks.ghWebhook.enabled", kind: origCustom, setting: "LOOP_GITHUB_MODE", doc: "with `polling.enabled`: webhook, poll or both",
			custom: func(p *parser) field { return keep(&p.legacy.webhook) }},
		{path: "webhooks.ghWebhook.host", kind: origCustom, setting: "LOOP_GITHUB_WEBHOOK_ADDR", doc: "with `port` (the original's defaults 127.0.0.1 and 8787 fill in the other)",
			custom: func(p *parser) field { return keep(&p.legacy.host) }},
		{path: "webhooks.ghWebhook.port", kind: origCustom, setting: "LOOP_GITHUB_WEBHOOK_ADDR", doc: "with `host`",
			custom: func(p *parser) field { return keep(&p.legacy.port) }},
		{path: "webhooks.ghWebhook.path", kind: origBuiltIn, want: []string{"/gh-webhook"}, doc: "receives GitHub webhooks at /gh-webhook"},
		{path: "webhooks.ghWebhook.secretEnv", kind: origFromEnv, setting: "LOOP_GITHUB_WEBHOOK_SECRET"},
		{path: "webhooks.ghWebhook.pidfile", kind: origIgnored, doc: "processes are supervised by their host, not pidfiles"},
		{path: "webhooks.ghWebhook.events", kind: origIgnored, doc: "ingress-github reads every GitHub event it can map to a work item"},
		{path: "polling.enabled", kind: origCustom, setting: "LOOP_GITHUB_MODE", doc: "with `webhooks.ghWebhook.enabled`",
			custom: func(p *parser) field { return keep(&p.legacy.poll) }},
		{path: "polling.intervalSeconds", kind: origCustom, setting: "LOOP_GITHUB_POLL_INTERVAL", doc: "in seconds, at least 5",
			custom: func(p *parser) field { return p.pollInterval }},
		{path: "polling.maxRetries", kind: origIgnored, doc: "a failing event is retried up to the bus consumer's MaxDeliver, then dead-lettered"},
		{path: "polling.sources", kind: origCustom, doc: "each `github` source is polled; a source of another provider is warned about and ignored",
			custom: func(p *parser) field { return p.pollSources }},
		{path: "polling.sources[].provider", kind: origCustom, doc: "`github`"},
		{path: "polling.sources[].label", kind: origCustom, setting: "LOOP_GITHUB_POLL_LABEL", doc: "unless `routing.autoExecuteLabel` is set (one label polls and arms here)"},
		{path: "polling.sources[].repos", kind: origCustom, setting: "LOOP_GITHUB_POLL_REPOS", doc: "every source's repositories together"},
		{path: "polling.sources[].monitor.issues", kind: origBuiltIn, want: []string{"true"}, doc: "polls the issues of its repositories"},
		{path: "polling.sources[].monitor.pullRequests", kind: origBuiltIn, want: []string{"true"}, doc: "polls the pull requests of its repositories"},
		{path: "routing.enabled", kind: origBuiltIn, want: []string{"true"}, doc: "dispatches the events it accepts (to stop dispatching, stop the dispatcher)"},
		{path: "routing.registryDir", kind: origIgnored, doc: "sessions are kept in the sessions KV bucket"},
		{path: "routing.spawnOnUnmatched", kind: origCustom, setting: "LOOP_DISPATCHER_SPAWN", doc: "never, labeled or always",
			custom: func(p *parser) field { return p.spawnOnUnmatched }},
		{path: "routing.autoExecuteLabel", kind: origCustom, setting: "LOOP_GITHUB_POLL_LABEL", doc: "the label that selects what is polled and arms a work item",
			custom: func(p *parser) field { return keep(&p.legacy.autoLabel) }},
		{path: "routing.graph.enabled", kind: origBuiltIn, want: []string{"true"}, doc: "drives the process graph from dispatch"},
		{path: "routing.graph.repoHooks", kind: origBuiltIn, want: []string{"false"}, doc: "runs only its own graph hooks, never a repository's"},
		{path: "routing.graph.specDir", kind: origIgnored, doc: "a graph's artifacts are read from the work item's workspace"},
		{path: "routing.spawnWorkdir", kind: origSetting, setting: "LOOP_DISPATCHER_WORKDIR"},
		{path: "routing.tmux.keepSessionOnClose", kind: origIgnored, doc: noTmux},
		{path: "routing.tmux.remainOnExit", kind: origIgnored, doc: noTmux},
		{path: "routing.tmux.resumeOnRespawn", kind: origBuiltIn, want: []string{"true"}, doc: "resumes a respawned session's conversation when its harness can"},
		{path: "routing.tmux.killHarnessOnClose", kind: origIgnored, doc: noTmux},
		{path: "routing.tmux.harnessKillGraceSeconds", kind: origIgnored, doc: noTmux},
		{path: "routing.tmux.resumeProbeSeconds", kind: origIgnored, doc: noTmux},
		{path: "routing.webTerminal", kind: origFeature, want: enabledOff, doc: "there is no web terminal; attach with tmux"},
		{path: "routing.maxConcurrentDispatches", kind: origCustom, setting: "LOOP_CONCURRENCY", doc: "the events one replica handles at once, 1 to 1024",
			custom: func(p *parser) field { return p.concurrency }},
		{path: "routing.dedupCacheSize", kind: origIgnored, doc: "duplicates are dropped by event id on the bus"},
		{path: "routing.dispatchTimeoutSeconds", kind: origIgnored, doc: "the dispatcher bounds its own steps"},
		{path: "routing.reactions", kind: origCustom, doc: "the ledger-writer reacts on the comment (or issue) the loop acted on: `started` when a session is given it, `completed` or `error` after; present, on unless `enabled: false`; absent, no reactions",
			custom: func(p *parser) field { return p.reactions }},
		{path: "routing.announce", kind: origCustom, doc: "one comment on a work item when its first session is spawned, with the tmux session to attach to; present, on unless `enabled: false`",
			custom: func(p *parser) field { return p.announce }},
		{path: "standingSessions", kind: origCustom, doc: "read: named sessions that own no work item, each recorded on the ledger issue its entry names (`ledger`, this the-loop's own key; docs/decisions/118-standing-sessions-keep-a-ledger-issue.md); `harness`, `harnessArgs`, `cwd` and another `slack.channel` are warned about",
			custom: func(p *parser) field { return p.standingSessions }},
		{path: "collaborators", kind: origCustom, doc: "who is alerted: each `{handle, roles, notifications: {channels: [{type: slack, config: {channel-list: [ids]}}]}}`; a handle that is an authorizedUsers login is mentioned by its Slack id; the people who may act are still routing.authorizedUsers",
			custom: func(p *parser) field { return p.collaborators }},
		{path: "notifications", kind: origCustom, doc: "which alert (`work-item-spawned`, `dispatch-failed`, `session-died`, `event-dropped-unauthorized`) the Slack renderer posts to which collaborators' roles; present, on unless `enabled: false`",
			custom: func(p *parser) field { return p.notificationsAt }},
		{path: "channels.slack.botTokenEnv", kind: origFromEnv, setting: "LOOP_SLACK_BOT_TOKEN"},
		{path: "channels.slack.appTokenEnv", kind: origFromEnv, setting: "LOOP_SLACK_APP_TOKEN"},
		{path: "eventLog.enabled", kind: origBuiltIn, want: []string{"true"}, doc: "keeps its event log (loop.log, `the-loop events`)"},
		{path: "eventLog.path", kind: origIgnored, doc: "the event log is the LOOP_LOG stream, not a file"},
		{path: "integrations.github.transport", kind: origBuiltIn, want: []string{"api", "auto"}, doc: "calls GitHub's REST API with a token"},
		{path: "integrations.github.api.tokenEnv", kind: origFromEnv, setting: "LOOP_GITHUB_TOKEN"},
		{path: "integrations.github.api.baseUrl", kind: origSetting, setting: "LOOP_GITHUB_API_URL"},
		{path: "integrations.github.cli", kind: origIgnored, doc: "the gh CLI is never run"},
		{path: "integrations.jira", kind: origIgnored, doc: "there is no Jira integration"},
		{path: "service", kind: origFeature, want: enabledOn, doc: "the control plane's API and dashboard are served on the admin address (LOOP_ADMIN_ADDR, docs/api.md), not by a service of their own"},
		{path: "selfDiagnosis", kind: origFeature, want: enabledOff, doc: "no self-diagnosis issues are filed"},
	}
}

// field returns how the parser reads k.
func (k origKey) field(p *parser) field {
	switch k.kind {
	case origSetting:
		return p.settingStr(k.setting)
	case origFromEnv:
		return p.settingFromEnv(k.setting)
	case origBuiltIn:
		return p.builtIn(k.doc, k.want...)
	case origIgnored:
		return p.ignored(k.doc)
	case origFeature:
		return p.feature(k.doc, k.want[0], k.want[1] == "true", isFalse)
	}
	if k.custom != nil {
		return k.custom(p)
	}
	return nil
}

// originalFields adds to fields, the keys of the mapping at prefix ("" the
// top level), the original's keys there: a key of the table itself, or a
// section holding some.
func (p *parser) originalFields(prefix string, fields map[string]field) {
	for _, k := range originalKeys {
		rest, ok := strings.CutPrefix(k.path, prefix)
		if prefix != "" && (!ok || !strings.HasPrefix(rest, ".")) {
			continue
		}
		rest = strings.TrimPrefix(rest, ".")
		name, deeper, _ := strings.Cut(rest, ".")
		if strings.HasSuffix(name, "[]") || fields[name] != nil {
			continue
		}
		if deeper == "" {
			if f := k.field(p); f != nil {
				fields[name] = f
			}
			continue
		}
		sub := join(prefix, name)
		fields[name] = func(v *yaml.Node, path string) {
			inner := map[string]field{}
			p.originalFields(sub, inner)
			p.mapping(v, path, inner)
		}
	}
}

func (p *parser) pollInterval(v *yaml.Node, path string) {
	var n int
	p.integer(&n, MinReadInterval, 86400, fmt.Sprintf("the poll interval must be between %d and 86400 seconds", MinReadInterval))(v, path)
	if n > 0 {
		p.setting(v, path, "LOOP_GITHUB_POLL_INTERVAL", strconv.Itoa(n)+"s")
	}
}

// concurrency reads routing.maxConcurrentDispatches: how many events the
// original dispatched at once is how many a replica handles at once here.
func (p *parser) concurrency(v *yaml.Node, path string) {
	var n int
	p.integer(&n, 1, 1024, "the concurrency must be between 1 and 1024")(v, path)
	if n > 0 {
		p.setting(v, path, "LOOP_CONCURRENCY", strconv.Itoa(n))
	}
}

func (p *parser) spawnOnUnmatched(v *yaml.Node, path string) {
	switch s := v.Value; {
	case v.Kind == yaml.ScalarNode && slices.Contains([]string{"never", "labeled", "always"}, s):
		p.setting(v, path, "LOOP_DISPATCHER_SPAWN", s)
	default:
		p.fail(v, path, ErrInvalid, "%q is not never, labeled or always", clip(v.Value))
	}
}

// pollSources reads polling.sources: each github source's repositories are
// polled (LOOP_GITHUB_POLL_REPOS, all sources together) under its label.
func (p *parser) pollSources(v *yaml.Node, path string) {
	l := &p.legacy
	if v.Kind != yaml.SequenceNode {
		p.fail(v, path, ErrInvalid, "want a list of poll sources")
		return
	}
	l.reposAt, l.reposPath = v, path+"[].repos"
	for i, it := range v.Content {
		ip := fmt.Sprintf("%s[%d]", path, i)
		it = resolve(it)
		if it == nil || it.Kind != yaml.MappingNode {
			p.fail(v.Content[i], ip, ErrInvalid, "want a mapping with a provider")
			continue
		}
		if prov := scalarValue(hasKey(it, "provider")); prov != "github" {
			p.warn(it, ip, "provider %q: this the-loop polls only github; the source is ignored", clip(prov))
			continue
		}
		fields := map[string]field{
			"provider": func(*yaml.Node, string) {},
			"label": func(v *yaml.Node, path string) {
				var s string
				p.str(&s)(v, path)
				if strings.TrimSpace(s) == "" {
					return // the original: reuse routing.autoExecuteLabel
				}
				if l.sourceLabel != nil && l.sourceLabel.Value != s {
					p.warn(v, path, "differs from %s: this the-loop polls every repository under one label; the first is used", l.sourceLabelPath)
					return
				}
				l.sourceLabel, l.sourceLabelPath = v, path
			},
			"repos": func(v *yaml.Node, path string) {
				repos, ok := stringList(v)
				if !ok {
					p.fail(v, path, ErrInvalid, "want a list of owner/repo")
					return
				}
				for _, r := range repos {
					if !repoPattern.MatchString(r) {
						p.fail(v, path, ErrInvalid, "%q is not owner/repo", clip(r))
						return
					}
					if !slices.Contains(l.repos, r) {
						l.repos = append(l.repos, r)
					}
				}
			},
			"monitor": func(v *yaml.Node, path string) {
				monitor := map[string]field{}
				p.originalFields("polling.sources[].monitor", monitor)
				p.mapping(v, path, monitor)
			},
		}
		// A source's other keys are its provider's own (the original's
		// schema leaves them open): known to no one here, so warned about.
		for j := 0; j+1 < len(it.Content); j += 2 {
			if k := it.Content[j].Value; fields[k] == nil {
				fields[k] = p.ignored("not a key of a github poll source here")
			}
		}
		p.mapping(it, ip, fields)
	}
}

// settle turns what the original spread over several keys into one process
// setting each.
func (p *parser) settle() {
	l := &p.legacy
	if p.notified != nil {
		p.checkAlerts(p.notified)
	}
	// Intake: the webhook receiver, the poller, or both.
	wh, whOK := yamlBool(orNull(l.webhook))
	po, poOK := yamlBool(orNull(l.poll))
	if l.webhook != nil && !whOK {
		p.fail(l.webhook, "webhooks.ghWebhook.enabled", ErrInvalid, "want true or false")
	}
	if l.poll != nil && !poOK {
		p.fail(l.poll, "polling.enabled", ErrInvalid, "want true or false")
	}
	switch {
	case wh && po:
		p.setting(l.webhook, "webhooks.ghWebhook.enabled, polling.enabled", "LOOP_GITHUB_MODE", "both")
	case wh:
		p.setting(l.webhook, "webhooks.ghWebhook.enabled", "LOOP_GITHUB_MODE", "webhook")
	case po:
		p.setting(l.poll, "polling.enabled", "LOOP_GITHUB_MODE", "poll")
	case whOK && poOK:
		p.warn(l.webhook, "webhooks.ghWebhook.enabled", "with polling.enabled also false: ingress-github still reads webhooks when it runs (LOOP_GITHUB_MODE)")
	}
	// The webhook's address: the original bound 127.0.0.1:8787 unless told.
	if l.host != nil || l.port != nil {
		host, port, at := "127.0.0.1", "8787", l.host
		if l.host != nil {
			if l.host.Kind != yaml.ScalarNode || strings.TrimSpace(l.host.Value) == "" {
				p.fail(l.host, "webhooks.ghWebhook.host", ErrInvalid, "want a host name or address")
			} else {
				host = strings.TrimSpace(l.host.Value)
			}
		}
		if l.port != nil {
			at = l.port
			if n, err := strconv.Atoi(l.port.Value); err != nil || l.port.Kind != yaml.ScalarNode || n < 0 || n > 65535 {
				p.fail(l.port, "webhooks.ghWebhook.port", ErrInvalid, "want a port from 0 to 65535")
			} else {
				port = l.port.Value
			}
		}
		p.setting(at, "webhooks.ghWebhook.host, webhooks.ghWebhook.port", "LOOP_GITHUB_WEBHOOK_ADDR", net.JoinHostPort(host, port))
	}
	if len(l.repos) > 0 {
		p.setting(l.reposAt, l.reposPath, "LOOP_GITHUB_POLL_REPOS", strings.Join(l.repos, ","))
	}
	// One label both selects what is polled and arms a work item here.
	switch {
	case l.autoLabel != nil:
		var s string
		p.str(&s)(l.autoLabel, "routing.autoExecuteLabel")
		if strings.TrimSpace(s) == "" {
			p.warn(l.autoLabel, "routing.autoExecuteLabel", "empty; LOOP_GITHUB_POLL_LABEL keeps its default")
			break
		}
		p.setting(l.autoLabel, "routing.autoExecuteLabel", "LOOP_GITHUB_POLL_LABEL", s)
		if l.sourceLabel != nil && l.sourceLabel.Value != s {
			p.warn(l.sourceLabel, l.sourceLabelPath, "differs from routing.autoExecuteLabel: this the-loop polls and arms by one label, routing.autoExecuteLabel")
		}
	case l.sourceLabel != nil:
		p.setting(l.sourceLabel, l.sourceLabelPath, "LOOP_GITHUB_POLL_LABEL", l.sourceLabel.Value)
	}
}

func orNull(n *yaml.Node) *yaml.Node {
	if n == nil {
		return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!null"}
	}
	return n
}
