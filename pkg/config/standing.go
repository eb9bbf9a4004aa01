package config

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// Standing sessions (docs/decisions/118-standing-sessions-keep-a-ledger-issue.md):
// named sessions that belong to no work item, declared in standingSessions.
// Each names the GitHub issue that is its ledger — everything said to it and
// by it is recorded there before a channel or the loop sees it — and is
// otherwise the original's entry: a brief, whether `the-loop standing start`
// brings it up unnamed, and whether it is announced in Slack.

// Standing is the standingSessions section.
type Standing struct {
	// Enabled: off (the default), no standing session starts, and their
	// ledger issues are ordinary issues to the loop.
	Enabled  bool
	Sessions []StandingSession
}

// StandingSession is one entry of standingSessions.sessions.
type StandingSession struct {
	// Name is the session's identity ([a-z0-9][a-z0-9-]{0,39}).
	Name string
	// Description says what it is for; shown by `the-loop standing list`,
	// never sent to the session.
	Description string
	// Ledger is the work-item ref of its ledger issue, github:owner/repo#N;
	// "" when the entry names none (it cannot start).
	Ledger string
	// Brief is the operator's brief (prompt, or promptFile's text),
	// appended to the loop's own standing directive.
	Brief string
	// AutoStart: `the-loop standing start` without a name starts it.
	AutoStart bool
	// Slack: announce it in channels.slack.channel when it starts, which
	// binds the thread to it.
	Slack bool
}

// Session returns the declared session called name.
func (s Standing) Session(name string) (StandingSession, bool) {
	for _, x := range s.Sessions {
		if x.Name == name {
			return x, true
		}
	}
	return StandingSession{}, false
}

// ForLedger returns the session whose ledger is ref, when standing sessions
// are enabled: the loop treats that issue as the session's, not as a work
// item.
func (s Standing) ForLedger(ref string) (StandingSession, bool) {
	if !s.Enabled || ref == "" {
		return StandingSession{}, false
	}
	for _, x := range s.Sessions {
		if x.Ledger == ref {
			return x, true
		}
	}
	return StandingSession{}, false
}

// standingNameRE is the original's name shape: the name ends up in a tmux
// target, a file name and a thread binding, so it is narrow.
var standingNameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,39}$`)

// ledgerRE is a GitHub issue: owner/repo#N, with or without the github:
// scheme.
var ledgerRE = regexp.MustCompile(`^(?:github:)?([A-Za-z0-9][A-Za-z0-9-]{0,38})/([A-Za-z0-9._-]{1,100})#([1-9][0-9]{0,9})$`)

// ParseLedgerRef reads owner/repo#N (or github:owner/repo#N) as the
// work-item ref github:owner/repo#N.
func ParseLedgerRef(s string) (string, error) {
	m := ledgerRE.FindStringSubmatch(strings.TrimSpace(s))
	if m == nil || m[2] == "." || m[2] == ".." {
		return "", fmt.Errorf("%q is not a GitHub issue like owner/repo#12", clip(s))
	}
	n, _ := strconv.Atoi(m[3])
	return fmt.Sprintf("github:%s/%s#%d", m[1], m[2], n), nil
}

// standingSessions reads the section. A malformed entry refuses the config
// (an entry names what an unattended agent is told); keys of the original
// whose behaviour does not exist here are warned about, naming why.
func (p *parser) standingSessions(v *yaml.Node, path string) {
	st := &p.cfg.Standing
	var unledgered []unledgeredAt
	p.mapping(v, path, map[string]field{
		"enabled": p.boolean(&st.Enabled),
		"sessions": func(v *yaml.Node, path string) {
			if v.Kind != yaml.SequenceNode {
				p.fail(v, path, ErrInvalid, "want a list of sessions")
				return
			}
			seen := map[string]bool{}
			ledgers := map[string]string{}
			for i, it := range v.Content {
				ip := fmt.Sprintf("%s[%d]", path, i)
				s, ok := p.standingSession(resolve(it), ip)
				if !ok {
					continue
				}
				if seen[s.Name] {
					p.fail(it, ip, ErrInvalid, "the name %q is declared twice; a name is one session", s.Name)
					continue
				}
				seen[s.Name] = true
				if other, dup := ledgers[s.Ledger]; dup && s.Ledger != "" {
					p.fail(it, ip, ErrInvalid, "its ledger %s is %s's too; each session needs an issue of its own", s.Ledger, other)
					continue
				}
				ledgers[s.Ledger] = s.Name
				st.Sessions = append(st.Sessions, s)
				if s.Ledger == "" {
					unledgered = append(unledgered, unledgeredAt{it, ip, s.Name})
				}
			}
		},
	})
	if !st.Enabled {
		return
	}
	for _, u := range unledgered {
		p.warn(u.n, u.path, "standing session %q names no ledger issue (ledger: owner/repo#N), so it cannot start: everything said to it or by it is recorded there first (docs/decisions/118-standing-sessions-keep-a-ledger-issue.md)", u.name)
	}
}

// unledgeredAt is an entry without a ledger issue, warned about when the
// section is on.
type unledgeredAt struct {
	n          *yaml.Node
	path, name string
}

func (p *parser) standingSession(n *yaml.Node, path string) (StandingSession, bool) {
	s := StandingSession{AutoStart: true}
	var ledger, prompt, promptFile, slackChannel string
	fails := len(p.errs)
	if n == nil || n.Kind != yaml.MappingNode {
		p.fail(n, path, ErrInvalid, "want a mapping with at least a name")
		return s, false
	}
	p.mapping(n, path, map[string]field{
		"name":        p.str(&s.Name),
		"description": p.str(&s.Description),
		"ledger":      p.str(&ledger),
		"prompt":      p.str(&prompt),
		"promptFile":  p.str(&promptFile),
		"autoStart":   p.boolean(&s.AutoStart),
		"harness": func(v *yaml.Node, path string) {
			if v.Kind == yaml.ScalarNode && v.Value == p.cfg.Routing.Harness.Default {
				return // what it runs anyway
			}
			p.warn(v, path, "has no meaning here, so it is ignored: a standing session runs the dispatcher's harness (routing.defaultHarness, %s), like every session", p.cfg.Routing.Harness.Default)
		},
		"harnessArgs": func(v *yaml.Node, path string) {
			if list, ok := stringListOrEmpty(v); ok && len(list) == 0 {
				return // none asked for, none given
			}
			p.warn(v, path, "has no meaning here, so it is ignored: a standing session gets routing.harnessArgs, like every session")
		},
		"cwd": func(v *yaml.Node, path string) {
			p.warn(v, path, "has no meaning here, so it is ignored: a standing session works in its ledger issue's workspace, the only place its sandbox lets it write")
		},
		"slack": func(v *yaml.Node, path string) {
			p.mapping(v, path, map[string]field{
				"enabled": p.boolean(&s.Slack),
				"channel": func(v *yaml.Node, path string) {
					p.str(&slackChannel)(v, path)
					if slackChannel != "" && slackChannel != p.cfg.Channels.Slack.Channel {
						p.warn(v, path, "has no meaning here, so it is ignored: a standing session is announced in channels.slack.channel, where its replies are read")
					}
				},
			})
		},
	})
	if len(p.errs) > fails {
		return s, false
	}
	if !standingNameRE.MatchString(s.Name) {
		p.fail(n, path+".name", ErrInvalid, "%q is not a standing session name: lowercase letters, digits and hyphens, not starting with a hyphen, at most 40", clip(s.Name))
		return s, false
	}
	if prompt != "" && promptFile != "" {
		p.fail(n, path, ErrInvalid, "sets both prompt and promptFile; there is no precedence between them, so name one")
		return s, false
	}
	s.Brief = prompt
	if promptFile != "" {
		file := promptFile
		if !filepath.IsAbs(file) && p.dir != "" {
			file = filepath.Join(p.dir, file)
		}
		b, err := os.ReadFile(file)
		if err != nil {
			p.fail(n, path+".promptFile", ErrInvalid, "%s: %s", clip(promptFile), describeReadError(err, promptFile, p.dir))
			return s, false
		}
		s.Brief = string(b)
	}
	if ledger == "" {
		return s, true // warned about once the section is read, if it is on
	}
	ref, err := ParseLedgerRef(ledger)
	if err != nil {
		p.fail(n, path+".ledger", ErrInvalid, "%v", err)
		return s, false
	}
	s.Ledger = ref
	return s, true
}

// stringListOrEmpty is stringList that also accepts an empty list.
func stringListOrEmpty(v *yaml.Node) ([]string, bool) {
	if v.Kind == yaml.SequenceNode && len(v.Content) == 0 {
		return nil, true
	}
	return stringList(v)
}

// standingReference documents the section's keys.
func standingReference(d *Config) []refKey {
	return []refKey{
		{"standingSessions.enabled", "bool", fmt.Sprintf("`%t`", d.Standing.Enabled), "Standing sessions: named agent sessions that belong to no work item (`the-loop standing`). Off, none starts and their ledger issues are ordinary issues."},
		{"standingSessions.sessions[].name", "string", "required", "The session's name: lowercase letters, digits and hyphens, at most 40, not starting with a hyphen. Two entries with one name refuse the config."},
		{"standingSessions.sessions[].ledger", "`owner/repo#N`", "none", "The GitHub issue that is the session's ledger: what is said to it and what it answers is recorded there first, as for a work item; its control keywords (`the-loop start`, `the-loop stop`) start and stop it. Without one the session cannot start (warned at load). Two sessions cannot share one."},
		{"standingSessions.sessions[].description", "string", "`\"\"`", "What it is for, shown by `the-loop standing list`; never sent to the session."},
		{"standingSessions.sessions[].prompt", "string", "`\"\"`", "Its brief, appended to the loop's own standing directive (it owns no work item, answers no gate, raises no control keyword), never replacing it."},
		{"standingSessions.sessions[].promptFile", "path", "`\"\"`", "Its brief from a file, read at load (relative: from the config file's directory); an unreadable file refuses the config. Naming both `prompt` and `promptFile` refuses the entry."},
		{"standingSessions.sessions[].autoStart", "bool", "`true`", "Whether `the-loop standing start` without a name starts it."},
		{"standingSessions.sessions[].slack.enabled", "bool", "`false`", "Announce it in `channels.slack.channel` when it starts: the announcement is recorded on its ledger, and its thread is bound to it, so an authorized member's replies there reach its terminal and its answers land there."},
		{"standingSessions.sessions[].slack.channel", "string", "`\"\"`", "Read for the original's files: a channel other than `channels.slack.channel` is warned about and ignored."},
		{"standingSessions.sessions[].harness, .harnessArgs, .cwd", "—", "—", "Read for the original's files and warned about: a standing session runs the dispatcher's harness and arguments in its ledger issue's workspace, like every session."},
	}
}
