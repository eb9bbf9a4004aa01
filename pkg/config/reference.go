package config

import (
	"fmt"
	"strings"

	"github.com/the-loop/bus/pkg/graph"
)

// refKey is one row of the operator-config reference.
type refKey struct {
	path, typ, def, doc string
}

// ReferenceMarkdown documents every key of the operator config, version
// 0.7.0, as a Markdown table. Defaults are read from Default(), so the
// reference cannot drift from what Parse does.
func ReferenceMarkdown() string {
	d := Default()
	sl := d.Channels.Slack
	list := func(xs []string) string { return "`[" + strings.Join(xs, ", ") + "]`" }
	types := func(ts []string) string { return list(ts) }
	var sub, pub []string
	for _, t := range sl.Subscribe {
		sub = append(sub, string(t))
	}
	for _, t := range sl.Publish {
		pub = append(pub, string(t))
	}
	keys := []refKey{
		{"version", "string", "`" + Version + "`", "The config version. `the-loop migrate-config` moves an older file to it."},
		{"routing.authorizedUsers", "list", "`[]` (nobody)", "The people who may direct the loop. Each entry is a GitHub login, or a mapping `{github, slack, name}` with that person's id on each channel. An entry that is neither is dropped with a warning. Empty authorizes nobody, everywhere."},
		{"routing.control.enabled", "bool", fmt.Sprintf("`%t`", d.Routing.Control.Enabled), "Whether control keywords (`the-loop stop`, …) are recognised at all."},
		{"routing.control.requireStartCommand", "bool", fmt.Sprintf("`%t`", d.Routing.Control.RequireStartCommand), "A work item is started only by an explicit `the-loop start`."},
		{"routing.control.keywords.<command>", "string", "`the-loop <command>`", "Overrides a control keyword; an empty string disables that command."},
		{"channels.ledger", "string", "`" + d.Channels.Ledger + "`", "The channel of record. `github` is the only value; anything else is refused at load."},
		{"channels.slack.enabled", "bool", fmt.Sprintf("`%t`", sl.Enabled), "Turns the Slack channel on."},
		{"channels.slack.channel", "string", "`\"\"`", "The Slack channel id (`C…`) the-loop posts to and reads kickoffs from."},
		{"channels.slack.subscribe", "list of types", types(sub), "Event types the channel receives; `[]` hears nothing. A name outside the catalog is warned about and kept (a custom graph may fire it). A malformed list falls back to the default, loudly."},
		{"channels.slack.publish", "list of types", types(pub), "Event types a message on the channel may become. A type the catalog does not mark publishable is warned about and ignored; `[]` grants nothing. A malformed list falls back to the default, loudly."},
		{"channels.slack.verbosity", "`quiet`, `normal`, `verbose`", "`" + string(sl.Verbosity) + "`", "How much of an event a Slack message shows; each level is a superset of the one before. Unknown: warning, `normal`."},
		{"channels.slack.read.mode", "`poll`, `socket`, `events`, `off`", "`" + string(sl.Read.Mode) + "`", "How replies are read: polling, Socket Mode, or the Events API over HTTP. Unknown: warning, `off` (never a reading mode)."},
		{"channels.slack.read.intervalSeconds", "integer ≥ 5", fmt.Sprintf("`%d`", sl.Read.IntervalSeconds), "Poll cadence."},
		{"channels.slack.maxChars", "integer 1–3000", fmt.Sprintf("`%d`", sl.MaxChars), "Cap of an artifact excerpt carried into a Slack message."},
		{"channels.slack.kickoff.repo", "`owner/repo`", "`\"\"`", "Where a top-level message creates a work item (with the `work-item.create` grant). Empty disables kickoff whatever the grants say."},
		{"channels.slack.kickoff.labels", "list of strings", "`[]`", "Labels put on a kickoff's issue: the only labels that arm it."},
	}
	keys = append(keys, sessionReference(d)...)
	keys = append(keys, standingReference(d)...)
	keys = append(keys, criticsReference()...)
	keys = append(keys, []refKey{
		{"graphs.files", "list of paths", "`[]`", "The operator's own process graphs, one YAML file each, in the format of the built-in graphs; a relative path is read from the config file's directory. Each is validated at load: a file that cannot be read, a graph that does not validate (unknown or unreachable node, edge to nowhere, human node without a classifier, …) or a name already taken refuses the config, naming the file and the problem. Editing a file reloads the config like editing the config does."},
		{"graphs.workItem", "graph name", "`" + d.Graphs.WorkItem + "`", "The graph a work item follows when its session spawns (a `do` command's session follows `" + graph.AdhocGraph + "`, a pull request's session too; beside `" + graph.PDLCWorkItemGraph + "` they follow `" + graph.PDLCAdhocGraph + "` and `" + graph.PDLCPRGraph + "`); a built-in (`" + strings.Join(graph.BuiltinNames(), "`, `") + "`) or one of `graphs.files`. A file written for the original (a `version` older than 0.7.0) that names none follows `" + graph.PDLCWorkItemGraph + "`, and `the-loop migrate-config` writes that down. A name the config does not know is refused at load."},
	}...)
	var b strings.Builder
	b.WriteString("| key | type | default | meaning |\n|---|---|---|---|\n")
	for _, k := range keys {
		fmt.Fprintf(&b, "| `%s` | %s | %s | %s |\n", k.path, k.typ, k.def, k.doc)
	}
	b.WriteString("\nRemoved in 0.7.0 and refused at load, naming the replacement and `the-loop migrate-config`: " +
		"`channels.slack.events` (now `channels.slack.subscribe`) and `channels.slack.authorizedUsers` " +
		"(now `{slack: …}` entries of `routing.authorizedUsers`).\n")
	b.WriteString(originalReference())
	return b.String()
}

// originalReference documents how each key of the original's configuration
// that the table above does not list is read, from the table the parser
// reads them by.
func originalReference() string {
	var b strings.Builder
	b.WriteString("\n### Keys of the original's configuration\n\n" +
		"A file written for the original the-loop loads as it is: besides the keys above, every key of the " +
		"original's configuration is read as below ([decision 065](decisions/065-original-config-keys.md)). A key " +
		"that is a process setting here applies at start, unless the environment sets that variable (the " +
		"environment wins, with a warning); a key that has no meaning here is ignored with one warning " +
		"naming it; a section the file switches off is accepted silently. A key the original did not " +
		"have either is refused as unknown.\n\n")
	b.WriteString("| key | here |\n|---|---|\n")
	for _, k := range originalKeys {
		var here string
		switch k.kind {
		case origSetting:
			here = fmt.Sprintf("`%s`", k.setting)
		case origFromEnv:
			here = fmt.Sprintf("`%s`, read from the environment variable the key names (the first one set, for a list); a `LOOP_*` name is not followed", k.setting)
		case origBuiltIn:
			here = fmt.Sprintf("built in: the-loop always %s; a value other than `%s` is warned about and ignored", k.doc, strings.Join(k.want, "` or `"))
		case origIgnored:
			here = "warned about and ignored: " + k.doc
		case origFeature:
			sw := fmt.Sprintf("`%s: false`", k.want[0])
			if k.want[1] == "false" {
				sw += " or absent"
			}
			here = fmt.Sprintf("accepted silently with %s; otherwise each of its keys is warned about and ignored: %s", sw, k.doc)
		case origCustom:
			here = k.doc
			if k.setting != "" {
				here = fmt.Sprintf("`%s`: %s", k.setting, k.doc)
			}
		}
		fmt.Fprintf(&b, "| `%s` | %s |\n", k.path, here)
	}
	return b.String()
}
