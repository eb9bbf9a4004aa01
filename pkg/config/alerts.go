package config

import (
	"fmt"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/the-loop/bus/pkg/identity"
)

// The original's daemon-side feedback, read here as it described it
// (docs/decisions/115-alerts-reactions-and-phase-labels.md): routing.reactions
// and routing.announce are what the ledger-writer writes on GitHub about the
// loop's own work; collaborators and notifications are who the Slack renderer
// alerts when the loop itself needs a person.

// Reactions is routing.reactions: the emoji the ledger-writer adds to the
// GitHub comment (or issue) the loop acted on. An empty content skips that
// state.
type Reactions struct {
	Enabled                   bool
	Started, Completed, Error string
}

// Content is the reaction for state ("started", "completed", "error"), ""
// for none.
func (r Reactions) Content(state string) string {
	if !r.Enabled {
		return ""
	}
	switch state {
	case ReactionStarted:
		return r.Started
	case ReactionCompleted:
		return r.Completed
	case ReactionError:
		return r.Error
	}
	return ""
}

// The dispatch states a reaction marks.
const (
	ReactionStarted   = "started"
	ReactionCompleted = "completed"
	ReactionError     = "error"
)

// ReactionContents is GitHub's fixed reaction palette.
var ReactionContents = []string{"+1", "-1", "laugh", "confused", "heart", "hooray", "rocket", "eyes"}

// Announce is routing.announce: one comment on a work item when its first
// session is spawned, saying how to attach to it.
type Announce struct{ Enabled bool }

// Alert kinds: the notifications.events the loop raises.
const (
	AlertWorkItemSpawned       = "work-item-spawned"
	AlertDispatchFailed        = "dispatch-failed"
	AlertSessionDied           = "session-died"
	AlertDroppedUnauthorized   = "event-dropped-unauthorized"
	alertRolesWhy              = "a role of the original's collaborators"
	collaboratorChannelSlack   = "slack"
	collaboratorKindIndividual = "individual"
	collaboratorKindGroup      = "group"
)

// AlertKinds are the notifications.events keys, in the original's order.
var AlertKinds = []string{AlertWorkItemSpawned, AlertDispatchFailed, AlertSessionDied, AlertDroppedUnauthorized}

// Roles are the collaborator roles the original defined.
var Roles = []string{"product-manager", "architect", "designer", "engineer", "qa", "reviewer", "approver"}

// Notifications is the notifications section: which alert reaches which
// roles.
type Notifications struct {
	Enabled bool
	// Events maps an alert kind to the roles told of it; a kind not named
	// tells nobody.
	Events map[string][]string
}

// Collaborator is one entry of collaborators: a person (or group) by GitHub
// handle, their roles, and the Slack conversations their alerts go to.
type Collaborator struct {
	// Handle is the GitHub handle without its "@".
	Handle string
	Group  bool
	Roles  []string
	// Slack are the Slack conversations (channel ids, or member ids for a
	// direct message) of the collaborator's enabled slack channels; empty
	// when their notifications are off.
	Slack []string
}

// Alert is where one alert goes: each Slack conversation with the people
// to mention there.
type Alert struct {
	Conversation string
	// Mention are the Slack member ids of the recipients, from
	// routing.authorizedUsers entries whose GitHub login is a handle.
	Mention []string
}

// AlertTargets returns where an alert of kind goes, in config order, nil when
// nobody is to be told.
func (c *Config) AlertTargets(kind string) []Alert {
	if c == nil || !c.Notifications.Enabled {
		return nil
	}
	roles := c.Notifications.Events[kind]
	if len(roles) == 0 {
		return nil
	}
	var out []Alert
	at := map[string]int{}
	for _, co := range c.Collaborators {
		if !slices.ContainsFunc(co.Roles, func(r string) bool { return slices.Contains(roles, r) }) {
			continue
		}
		var member string
		if !co.Group && c.Routing.AuthorizedUsers != nil {
			if p, ok := c.Routing.AuthorizedUsers.ByChannel(identity.ChannelGitHub, co.Handle); ok {
				member = p.Slack
			}
		}
		for _, conv := range co.Slack {
			i, ok := at[conv]
			if !ok {
				i = len(out)
				at[conv] = i
				out = append(out, Alert{Conversation: conv})
			}
			if member != "" && member != conv && !slices.Contains(out[i].Mention, member) {
				out[i].Mention = append(out[i].Mention, member)
			}
		}
	}
	return out
}

// Alerts reports whether an alert of kind reaches anyone: its publisher
// need not raise it otherwise.
func (c *Config) Alerts(kind string) bool { return len(c.AlertTargets(kind)) > 0 }

// reactions reads routing.reactions. Present, the section is on unless it
// says enabled: false, with the original's defaults (eyes, hooray,
// confused); absent, the-loop writes no reaction.
func (p *parser) reactions(v *yaml.Node, path string) {
	r := &p.cfg.Routing.Reactions
	*r = Reactions{Enabled: true, Started: "eyes", Completed: "hooray", Error: "confused"}
	content := func(dst *string) field {
		return func(v *yaml.Node, path string) {
			var s string
			p.str(&s)(v, path)
			s = strings.TrimSpace(s)
			if s != "" && !slices.Contains(ReactionContents, s) {
				p.fail(v, path, ErrInvalid, "%q is not one of GitHub's reactions (%s) or empty", clip(s), strings.Join(ReactionContents, " "))
				return
			}
			*dst = s
		}
	}
	p.mapping(v, path, map[string]field{
		"enabled":   p.boolean(&r.Enabled),
		"started":   content(&r.Started),
		"completed": content(&r.Completed),
		"error":     content(&r.Error),
	})
}

// announce reads routing.announce: present, on unless enabled: false.
func (p *parser) announce(v *yaml.Node, path string) {
	a := &p.cfg.Routing.Announce
	a.Enabled = true
	p.mapping(v, path, map[string]field{"enabled": p.boolean(&a.Enabled)})
}

// notifications reads the notifications section: present, on unless
// enabled: false.
func (p *parser) notifications(v *yaml.Node, path string) {
	n := &p.cfg.Notifications
	n.Enabled, n.Events = true, map[string][]string{}
	events := map[string]field{}
	for _, kind := range AlertKinds {
		events[kind] = func(v *yaml.Node, path string) {
			if roles, ok := p.roles(v, path); ok {
				n.Events[kind] = roles
			}
		}
	}
	p.mapping(v, path, map[string]field{
		"enabled": p.boolean(&n.Enabled),
		"events":  func(v *yaml.Node, path string) { p.mapping(v, path, events) },
	})
}

// notificationsAt reads the notifications section and keeps it for the
// check against the collaborators.
func (p *parser) notificationsAt(v *yaml.Node, path string) {
	p.notified = v
	p.notifications(v, path)
}

// roles reads a list of collaborator roles.
func (p *parser) roles(v *yaml.Node, path string) ([]string, bool) {
	list, ok := stringList(v)
	if !ok && !(v.Kind == yaml.SequenceNode && len(v.Content) == 0) {
		p.fail(v, path, ErrInvalid, "want a list of roles (%s)", strings.Join(Roles, ", "))
		return nil, false
	}
	for _, r := range list {
		if !slices.Contains(Roles, r) {
			p.fail(v, path, ErrInvalid, "%q is not %s (%s)", clip(r), alertRolesWhy, strings.Join(Roles, ", "))
			return nil, false
		}
	}
	return list, true
}

// collaborators reads the operator's own alert recipients, each as the
// original's collaborator schema describes one.
func (p *parser) collaborators(v *yaml.Node, path string) {
	if v.Kind != yaml.SequenceNode {
		p.fail(v, path, ErrInvalid, "want a list of collaborators, each {handle, roles, notifications}")
		return
	}
	for i, it := range v.Content {
		ip := fmt.Sprintf("%s[%d]", path, i)
		var co Collaborator
		kind := collaboratorKindIndividual
		notify := struct {
			set, enabled bool
			channels     []string
		}{enabled: true}
		handle := ""
		p.mapping(it, ip, map[string]field{
			"handle": p.str(&handle),
			"kind": func(v *yaml.Node, path string) {
				p.str(&kind)(v, path)
				if kind != collaboratorKindIndividual && kind != collaboratorKindGroup {
					p.fail(v, path, ErrInvalid, "%q is not individual or group", clip(kind))
				}
			},
			"roles": func(v *yaml.Node, path string) {
				if r, ok := p.roles(v, path); ok {
					co.Roles = r
				}
			},
			"notifications": func(v *yaml.Node, path string) {
				notify.set = true
				p.mapping(v, path, map[string]field{
					"enabled":  p.boolean(&notify.enabled),
					"channels": func(v *yaml.Node, path string) { notify.channels = p.collaboratorChannels(v, path) },
				})
			},
		})
		co.Handle = strings.TrimPrefix(strings.TrimSpace(handle), "@")
		co.Group = kind == collaboratorKindGroup || strings.Contains(co.Handle, "/")
		switch {
		case co.Handle == "":
			p.fail(it, ip, ErrInvalid, "a collaborator needs a handle (their GitHub handle)")
			continue
		case len(co.Roles) == 0:
			p.fail(it, ip, ErrInvalid, "collaborator %s needs at least one role", clip(co.Handle))
			continue
		}
		if notify.set && notify.enabled {
			co.Slack = notify.channels
		}
		p.cfg.Collaborators = append(p.cfg.Collaborators, co)
	}
}

// collaboratorChannels reads notifications.channels: the Slack
// conversations of its enabled slack entries.
func (p *parser) collaboratorChannels(v *yaml.Node, path string) []string {
	if v.Kind != yaml.SequenceNode {
		p.fail(v, path, ErrInvalid, "want a list of notification channels, each {type: slack, config: {channel-list: [...]}}")
		return nil
	}
	var out []string
	for i, it := range v.Content {
		ip := fmt.Sprintf("%s[%d]", path, i)
		typ, via := "", ""
		enabled := true
		var list []string
		p.mapping(it, ip, map[string]field{
			"type":    p.str(&typ),
			"enabled": p.boolean(&enabled),
			"via":     p.str(&via),
			"config": func(v *yaml.Node, path string) {
				p.mapping(v, path, map[string]field{"channel-list": func(v *yaml.Node, path string) {
					if l, ok := stringList(v); ok || v.Kind == yaml.SequenceNode && len(v.Content) == 0 {
						list = l
						return
					}
					p.fail(v, path, ErrInvalid, "want a list of Slack channel ids")
				}})
			},
		})
		if typ != collaboratorChannelSlack {
			p.fail(it, ip, ErrInvalid, "type %q: slack is the only notification channel", clip(typ))
			continue
		}
		if via != "" && via != "api" {
			// The renderer posts with its own bot token, whatever the
			// original's harness would have used.
			p.warn(it, join(ip, "via"), "ignored: the Slack renderer posts alerts through Slack's Web API")
		}
		if !enabled {
			continue
		}
		for _, c := range list {
			c = strings.TrimSpace(c)
			if !slackConversation(c) {
				p.warn(it, join(ip, "config.channel-list"), "%q is not a Slack channel or member id (C…, G…, D…, U…, W…): no alert goes there", clip(c))
				continue
			}
			if !slices.Contains(out, c) {
				out = append(out, c)
			}
		}
	}
	return out
}

// slackConversation reports whether s looks like a Slack conversation or
// member id: chat.postMessage is given ids only, so a renamed channel
// never sends an alert elsewhere.
func slackConversation(s string) bool {
	if len(s) < 3 || len(s) > 24 || !strings.ContainsRune("CGDUW", rune(s[0])) {
		return false
	}
	for _, r := range s {
		if !(r >= 'A' && r <= 'Z' || r >= '0' && r <= '9') {
			return false
		}
	}
	return true
}

// checkAlerts warns about an alert kind whose roles reach nobody, once the
// whole file is read.
func (p *parser) checkAlerts(n *yaml.Node) {
	if !p.cfg.Notifications.Enabled {
		return
	}
	for _, kind := range AlertKinds {
		if len(p.cfg.Notifications.Events[kind]) > 0 && len(p.cfg.AlertTargets(kind)) == 0 {
			p.warn(n, "notifications.events."+kind, "no collaborator of these roles has an enabled slack channel with a channel-list: nobody is alerted")
		}
	}
}
