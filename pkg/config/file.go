package config

import (
	"slices"
	"sync"
	"time"

	"github.com/the-loop/bus/pkg/catalog"
	"github.com/the-loop/bus/pkg/graph"
	"github.com/the-loop/bus/pkg/identity"
)

// Version is the operator YAML version this build reads and Migrate writes.
const Version = "0.7.0"

// Config is the operator YAML (LOOP_CONFIG), parsed and resolved: defaults
// applied, soft problems turned into warnings, the authorizedUsers entries
// built into a directory. Treat a *Config as read-only; Watcher hands the same
// value to every reader.
//
// It models what the channel, ledger and identity requirements read,
// routing.control, which the control grammar needs, graphs, the operator's
// process graphs, and how agent sessions run (the harness, its arguments,
// prompt templates, workspace; harness.go). Every other key of the original's configuration
// loads too (original.go): the ones that are process settings here end up in
// Settings, the rest are built in or warned about.
type Config struct {
	// Version is the version the file declares, "" when it declares none.
	Version  string
	Routing  Routing
	Channels Channels
	Graphs   Graphs
	// Standing is standingSessions: the sessions that own no work item.
	Standing Standing
	// Collaborators and Notifications are who is alerted when the loop
	// itself needs a person (alerts.go).
	Collaborators []Collaborator
	Notifications Notifications
	// Settings are the process settings (LOOP_*) the file sets through the
	// original's keys, in file order; ApplySettings applies them at start.
	Settings []FileSetting
}

// Graphs is the graphs section: the process graphs work items follow.
type Graphs struct {
	// Files are the operator's graph files as read: a relative path in the
	// file is resolved against the config file's directory.
	Files []string
	// WorkItem is the graph a work item follows when its session spawns
	// (default graph.WorkItemGraph); a do command's session follows
	// graph.AdhocGraph.
	WorkItem string

	registry *graph.Registry
}

// Registry holds the graphs this config knows: the built-ins and those of
// Files, each validated when the config was loaded. Every service reads it
// from the config in force, so the dispatcher, ingress-slack and `the-loop
// graph` judge a work item by the same graph. Read-only.
func (g Graphs) Registry() *graph.Registry {
	if g.registry == nil {
		return builtinGraphs()
	}
	return g.registry
}

// builtinGraphs is the registry of a config that adds no graph, shared:
// a registry is only read once built.
var builtinGraphs = sync.OnceValue(graph.NewRegistry)

// Routing is the routing section.
type Routing struct {
	// AuthorizedUsers are the people who may direct the loop, looked up by any
	// channel's id. Empty authorizes nobody.
	AuthorizedUsers *identity.Directory
	Control         Control
	// Harness is how sessions run the agent harness (harness.go).
	Harness Harness
	// Prompts are the operator's prompt templates.
	Prompts Prompts
	// Interaction is routing.interaction.mode.
	Interaction InteractionMode
	// Workspace is routing.workspace.
	Workspace Workspace
	// SessionPerPR is routing.tmux.sessionPerPr.
	SessionPerPR PRSessions
	// Reactions and Announce are what the ledger-writer writes on GitHub
	// about the loop's own work (alerts.go).
	Reactions Reactions
	Announce  Announce
	// Critics are routing.critics (critics.go).
	Critics []Critic
}

// Control is routing.control: the control-keyword grammar's settings.
type Control struct {
	// Enabled: when false no comment or message is parsed for keywords.
	Enabled bool
	// RequireStartCommand: a label arms a work item, a start keyword starts it.
	RequireStartCommand bool
	// Keywords overrides the default keyword of a command (start, stop, …).
	// An empty string disables that command. Commands not named keep their
	// default, which the control package owns.
	Keywords map[string]string
}

// ControlCommands are the commands routing.control.keywords may name.
var ControlCommands = []string{"start", "stop", "pause", "resume", "execute", "contribute", "cleanup", "do"}

// Channels is the channels section.
type Channels struct {
	// Ledger is the channel of record; "github" is the only one (R3.1).
	Ledger string
	Slack  SlackChannel
}

// LedgerGitHub is the only accepted channels.ledger.
const LedgerGitHub = "github"

// SlackChannel is channels.slack.
type SlackChannel struct {
	Enabled bool
	// Channel is the Slack channel id (C…) posts go to.
	Channel string
	// Subscribe are the event types the channel receives. Names outside the
	// catalog are kept: a custom graph may fire a custom notify event.
	Subscribe []catalog.Type
	// Publish are the event types a message on the channel may become. Names
	// the catalog knows but does not mark publishable have been removed.
	Publish   []catalog.Type
	Verbosity Verbosity
	Read      SlackRead
	// MaxChars caps an excerpt carried into a Slack message.
	MaxChars int
	Kickoff  Kickoff
}

// Subscribes reports whether the channel receives events of type t.
func (s SlackChannel) Subscribes(t catalog.Type) bool { return slices.Contains(s.Subscribe, t) }

// CanPublish reports whether a message on the channel may become t. It is
// false for any type the catalog does not mark publishable, whatever the list
// says.
func (s SlackChannel) CanPublish(t catalog.Type) bool {
	return catalog.Publishable(t) && slices.Contains(s.Publish, t)
}

// SlackRead is channels.slack.read.
type SlackRead struct {
	Mode            ReadMode
	IntervalSeconds int
}

// Interval is the poll cadence.
func (r SlackRead) Interval() time.Duration { return time.Duration(r.IntervalSeconds) * time.Second }

// Kickoff is channels.slack.kickoff: where a top-level message may start a
// work item (R6.5).
type Kickoff struct {
	// Repo is owner/repo; empty disables kickoff whatever the grants say.
	Repo string
	// Labels are put on the new issue, and are the only labels that arm it
	// (abuse case 7).
	Labels []string
}

// Verbosity is channels.slack.verbosity; each level is a strict superset of
// the one before.
type Verbosity string

// Verbosity levels.
const (
	VerbosityQuiet   Verbosity = "quiet"
	VerbosityNormal  Verbosity = "normal"
	VerbosityVerbose Verbosity = "verbose"
)

// ReadMode is channels.slack.read.mode: how ingress-slack reads the channel.
type ReadMode string

// Read modes. ReadEvents is the Events API over HTTP.
const (
	ReadPoll   ReadMode = "poll"
	ReadSocket ReadMode = "socket"
	ReadEvents ReadMode = "events"
	ReadOff    ReadMode = "off"
)

// Defaults (R2.2 and the original's documented defaults).
const (
	DefaultReadInterval = 30
	MinReadInterval     = 5
	DefaultMaxChars     = 3000
	// MaxMaxChars is Slack's limit on one section block's text.
	MaxMaxChars = 3000
)

// DefaultSubscribe and DefaultPublish are the grants of a channel whose config
// names no list (R2.2): hear the agent's questions, answer them, nothing more.
func DefaultSubscribe() []catalog.Type { return []catalog.Type{catalog.SessionAwaitingInput} }

// DefaultPublish is the publish grant of a channel that names no list.
func DefaultPublish() []catalog.Type { return []catalog.Type{catalog.WorkItemReply} }

// Default is the configuration of an empty file: nobody authorized, Slack
// off, GitHub the ledger.
func Default() *Config {
	dir, _ := identity.New(nil)
	return &Config{
		Routing: Routing{
			AuthorizedUsers: dir,
			Control:         Control{Enabled: true, RequireStartCommand: true},
			Harness:         defaultHarness(),
			Interaction:     InteractionWorkItem,
			Workspace:       defaultWorkspace(),
			SessionPerPR:    PRSessionsNever,
		},
		Channels: Channels{
			Ledger: LedgerGitHub,
			Slack: SlackChannel{
				Subscribe: DefaultSubscribe(),
				Publish:   DefaultPublish(),
				Verbosity: VerbosityNormal,
				Read:      SlackRead{Mode: ReadPoll, IntervalSeconds: DefaultReadInterval},
				MaxChars:  DefaultMaxChars,
			},
		},
		Graphs: Graphs{WorkItem: graph.WorkItemGraph},
	}
}
