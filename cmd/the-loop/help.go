package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strings"
	"sync"
	"text/tabwriter"

	"github.com/the-loop/bus/pkg/config"
)

// A verb's help is printed by its own flag set: `VERB --help` runs the verb
// with only --help after its sub-verb, and the flag set's Usage prints the
// verb's lines of usageText, its arguments, every flag it declares and the
// settings it reads. So a flag is listed the moment it is declared, and a
// verb whose help is asked never gets as far as doing anything.

// verbFunc is one verb of the binary.
type verbFunc func(ctx context.Context, args []string, env config.Env, stdout, stderr io.Writer) error

// verbs maps each verb to its function; dispatch and help share it.
var verbs map[string]verbFunc

func init() {
	verbs = map[string]verbFunc{
		"up": cmdUp, "serve": cmdServe, "demo": cmdDemo, "events": cmdEvents,
		"channels": cmdChannels, "migrate-config": cmdMigrateConfig, "dlq": cmdDLQ,
		"partitions": cmdPartitions, "sessions": cmdSessions, "excerpt": cmdExcerpt,
		"ask": cmdAsk, "graph": cmdGraph, "instructions": cmdInstructions,
		"scenarios": cmdScenarios, "check": cmdCheck, "critic": cmdCritic, "sandbox": cmdSandbox,
		"session-host": cmdSessionHost, "plugin": cmdPlugin, "hook": cmdHook,
		"health": cmdHealth, "auth": cmdAuth, "provision": cmdProvision,
		"init": cmdInit, "docs": cmdDocs, "version": cmdVersion,
		"standing": cmdStanding,
	}
}

// subVerbs are the verbs whose first argument says what they do; `VERB
// --help` prints each sub-verb's help. A verb listed in bareToo also runs
// with none (`session-host` serves, `session-host tmux` forwards).
var subVerbs = map[string][]string{
	"auth":         {"init", "signers"},
	"channels":     {"status"},
	"critic":       {"list", "run"},
	"dlq":          {"list", "replay"},
	"docs":         {"configuration"},
	"graph":        {"status", "complete", "show", "advance", "skip", "force", "escalate"},
	"hook":         {"session-start", "stop"},
	"plugin":       {"install", "version"},
	"session-host": {"tmux"},
	"sessions":     {"list", "pause", "resume", "stop", "cleanup", "adopt", "end", "register", "link-pr"},
	"standing":     {"list", "start", "stop", "say"},
}

var bareToo = map[string]bool{"session-host": true, "serve": true}

// verbDoc is what a verb's help says beyond its flags: one line per
// positional argument and per setting it reads ("NAME  what").
type verbDoc struct {
	args     []string
	settings []string
}

// Settings several verbs share.
var (
	// connectSettings: an operator verb connects to LOOP_NATS_URL, or to
	// a local `up` (cliConnect).
	connectSettings = []string{
		"LOOP_NATS_URL  the NATS server (default: the local 'the-loop up' at LOOP_NATS_LISTEN)",
		"LOOP_NATS_LISTEN  the local 'the-loop up' server's address (default 127.0.0.1:4222)",
		"LOOP_STORE_DIR  the local 'the-loop up' store, whose observer identity a reading verb uses",
		"LOOP_NATS_NKEY_FILE  the credential (or LOOP_NATS_NKEY_SEED, LOOP_NATS_CREDS_FILE, LOOP_NATS_USER)",
	}
	// sessionSettings: an agent verb asks its session's endpoint, which the
	// dispatcher names in the session's environment.
	sessionSettings = []string{
		"LOOP_SESSION_URL  the session endpoint (set by the dispatcher in a session)",
		"LOOP_SESSION_TOKEN  the session's token (set by the dispatcher in a session)",
	}
	logSettings = []string{
		"LOOP_LOG_LEVEL  debug, info, warn or error (default info)",
		"LOOP_LOG_FORMAT  auto, text or json (default auto)",
	}
	topologySettings = []string{
		"LOOP_PARTITIONS  partitions per stream (default 16)",
		"LOOP_STREAM_REPLICAS  replicas of each stream, consumer and bucket: 1, 3 or 5 (default 1)",
	}
)

// verbDocs holds, by flag-set name (the verb, or "verb sub"), what the
// help lists beside the flags.
var verbDocs = map[string]verbDoc{
	// up: the settings a first run changes, with their defaults.
	"up": {settings: []string{
		"LOOP_STORE_DIR  the store: streams, identities (default $XDG_STATE_HOME/the-loop)",
		"LOOP_NATS_LISTEN  the embedded JetStream server (default 127.0.0.1:4222)",
		"LOOP_ADMIN_ADDR  /healthz, /readyz, /metrics and the status page /status (default 127.0.0.1:9090)",
		"LOOP_WORKSPACE_ROOT  each work item's checkout (default $XDG_DATA_HOME/the-loop/workspaces)",
		"LOOP_CONFIG  the operator config ('the-loop init' writes one)",
		"LOOP_GITHUB_TOKEN  GitHub reads and the ledger's writes",
		"LOOP_GITHUB_WEBHOOK_SECRET  GitHub webhooks on LOOP_GITHUB_WEBHOOK_ADDR (default :8787)",
		"LOOP_SLACK_BOT_TOKEN  Slack, with LOOP_SLACK_APP_TOKEN (Socket Mode) or LOOP_SLACK_SIGNING_SECRET",
		"LOOP_HARNESS  the agent harness sessions run (default claude)",
		"LOOP_LOG_FORMAT  auto (text on a terminal, else JSON), text or json",
	}},
	"init":            {args: []string{"FILE  where to write the config (default ./the-loop.yaml); never overwritten"}},
	"serve":           {args: []string{"<service>  ingress-github, ingress-slack, ledger-writer, slack-renderer or dispatcher"}},
	"demo":            {settings: []string{"LOOP_ADMIN_TOKEN  with --keep-running: the status page's token (default: a throwaway one)"}},
	"events":          {settings: connectSettings},
	"channels status": {settings: []string{"LOOP_CONFIG  the operator config, when --config is not given"}},
	"migrate-config": {args: []string{"FILE  the operator config (default: LOOP_CONFIG)"},
		settings: []string{"LOOP_CONFIG  the operator config, when FILE is not given"}},
	"dlq list":          {settings: connectSettings},
	"dlq replay":        {args: []string{"<seq>  the entry's sequence number (the SEQ column of the list)"}, settings: connectSettings},
	"partitions":        {settings: slices.Concat(topologySettings[:1], connectSettings)},
	"sessions list":     {settings: connectSettings},
	"sessions pause":    {settings: slices.Concat([]string{"LOOP_CONFIG  read by the dispatcher: routing.authorizedUsers must name --as"}, connectSettings)},
	"sessions register": {settings: sessionSettings},
	"standing list":     {settings: slices.Concat([]string{"LOOP_CONFIG  the operator config, whose standingSessions declares them"}, connectSettings)},
	"standing start": {args: []string{"NAME  the standing session (standingSessions.sessions[].name)"},
		settings: slices.Concat([]string{"LOOP_CONFIG  the operator config: standingSessions declares NAME, routing.authorizedUsers must name --as"}, connectSettings)},
	"sessions link-pr":   {args: []string{"N|REF  the pull request, when --pull-request is not given"}, settings: sessionSettings},
	"ask":                {args: []string{"-  read the question from standard input"}, settings: sessionSettings},
	"graph status":       {args: []string{"REF  the work item, github:owner/repo#N (in a session: its own, when omitted)"}, settings: slices.Concat(sessionSettings, connectSettings)},
	"graph complete":     {args: []string{"REF  the work item, github:owner/repo#N (in a session: its own, when omitted)"}, settings: slices.Concat(sessionSettings, connectSettings)},
	"graph show":         {settings: sessionSettings},
	"instructions":       {settings: sessionSettings},
	"scenarios":          {settings: sessionSettings},
	"check":              {settings: sessionSettings},
	"critic list":        {settings: sessionSettings},
	"critic run":         {args: []string{"NAME  the critic, as `the-loop critic list` names it (the operator's routing.critics)"}, settings: sessionSettings},
	"hook session-start": {settings: sessionSettings},
	"hook stop":          {settings: slices.Concat(sessionSettings, []string{"LOOP_STOP_MAX_ATTEMPTS  how many times in a row the Stop hook sends the agent back (set by the dispatcher; default 3)"})},
	"sandbox":            {args: []string{"COMMAND  the command to run confined, after --", "ARGS  its arguments"}},
	"session-host tmux":  {args: []string{"ARGS  tmux's arguments, after --"}},
	"plugin install":     {args: []string{"DIR  the directory to install the plugin in"}},
	"excerpt":            {args: []string{"FILE|-  the payload's file, or standard input ('-', the default)"}},
	"health":             {settings: []string{"LOOP_ADMIN_ADDR  whose port is probed on loopback, when --url is not given (default 127.0.0.1:9090)"}},
	"auth init": {args: []string{"DIR  where to write nats/<identity>.nk, auth.conf and signers.json (deploy/secrets)"},
		settings: topologySettings},
	"auth signers": {args: []string{"FILE  the signers file 'auth init' wrote (default: LOOP_SIGNERS_FILE)"},
		settings: slices.Concat([]string{"LOOP_SIGNERS_FILE  the signers file, when FILE is not given"}, topologySettings, connectSettings, logSettings)},
	"provision": {settings: slices.Concat(topologySettings, []string{"LOOP_SIGNERS_FILE  the identities' public keys to write to the signers bucket ('auth init' wrote signers.json)"},
		connectSettings, logSettings)},
}

func init() {
	verbDocs["standing stop"] = verbDocs["standing start"]
	verbDocs["standing say"] = verbDocs["standing start"]
	// The other control requests read what pause reads.
	for _, v := range []string{"resume", "stop", "cleanup", "adopt", "end"} {
		verbDocs["sessions "+v] = verbDocs["sessions pause"]
	}
	// The operator's escape hatch (docs/decisions/111-operator-escape-hatch.md).
	for _, v := range []string{"advance", "skip", "force", "escalate"} {
		verbDocs["graph "+v] = verbDoc{
			args: []string{"REF  the work item, github:owner/repo#N"},
			settings: slices.Concat([]string{
				"LOOP_CONFIG  the operator config: routing.authorizedUsers names --as; its graphs check the move before it is published",
				"LOOP_SESSION_URL  set in an agent session, where the verb refuses (so is LOOP_SESSION_TOKEN)",
			}, connectSettings),
		}
	}
}

// flagSetsMade, when set, is told of every flag set newFlags makes: the
// help test checks the help against the flag sets the verbs really parse.
var (
	flagSetsMu   sync.Mutex
	flagSetsMade func(*flag.FlagSet)
)

func madeFlagSet(fs *flag.FlagSet) {
	flagSetsMu.Lock()
	defer flagSetsMu.Unlock()
	if flagSetsMade != nil {
		flagSetsMade(fs)
	}
}

// verbHelp prints the help of verb and its sub-verb (sub may be empty) by
// running the verb with --help, its output on stdout: each verb answers
// through its flag set before it does anything.
func verbHelp(ctx context.Context, verb string, sub string, env config.Env, stdout io.Writer) error {
	f, ok := verbs[verb]
	if !ok || verb == "version" && sub != "" {
		fmt.Fprint(stdout, usageText)
		return fmt.Errorf("%w: unknown verb %q", errUsage, strings.TrimSpace(verb+" "+sub))
	}
	subs := subVerbs[verb]
	switch {
	case sub != "" && (slices.Contains(subs, sub) || verb == "serve"):
		return f(ctx, []string{sub, "--help"}, env, stdout, stdout)
	case sub != "" && len(subs) > 0 && !bareToo[verb]:
		fmt.Fprint(stdout, usageText)
		return fmt.Errorf("%w: unknown verb %q", errUsage, verb+" "+sub)
	case len(subs) == 0 || bareToo[verb]:
		return f(ctx, []string{"--help"}, env, stdout, stdout)
	}
	// A verb of sub-verbs: each one's help, those sharing a usage line
	// (sessions pause|resume|…) once.
	printed := map[string]bool{}
	for i, s := range subs {
		line := strings.Join(usageLinesOf(verb+" "+s), "\n")
		if printed[line] {
			continue
		}
		printed[line] = true
		if i > 0 {
			fmt.Fprintln(stdout)
		}
		if err := f(ctx, []string{s, "--help"}, env, stdout, stdout); err != nil && err != flag.ErrHelp {
			return err
		}
	}
	return flag.ErrHelp
}

// writeHelp is a flag set's Usage: the verb's usage lines, then one line
// per argument, flag and setting.
func writeHelp(w io.Writer, fs *flag.FlagSet) {
	name := fs.Name()
	lines := usageLinesOf(name)
	if len(lines) == 0 {
		verb, _, _ := strings.Cut(name, " ")
		lines = usageLinesOf(verb)
	}
	fmt.Fprintln(w, "Usage:")
	for _, l := range lines {
		fmt.Fprintln(w, l)
	}
	doc := verbDocs[name]
	section(w, "Arguments:", doc.args)
	values := flagValues(lines)
	var flags []string
	fs.VisitAll(func(f *flag.Flag) {
		value, usage := flag.UnquoteUsage(f)
		value = strings.ToUpper(value) // a type: STRING, INT, DURATION
		if v, ok := values[f.Name]; ok && value != "" {
			value = v
		}
		l := "--" + f.Name
		if value != "" {
			l += " " + value
		}
		if def := f.DefValue; def != "" && def != "0" && def != "false" && def != "[]" && !strings.Contains(usage, "(default") {
			usage += " (default " + def + ")"
		}
		flags = append(flags, l+"  "+usage)
	})
	section(w, "Flags:", flags)
	section(w, "Settings (environment; all of them: docs/configuration.md):", doc.settings)
}

// flagValue is a flag and the name of its value in a usage line.
var flagValue = regexp.MustCompile(`--([a-z][a-z-]*)[ =]([^-\s][^\s]*)`)

// flagValues names each flag's value as the usage lines do (--limit N),
// rather than by its type.
func flagValues(lines []string) map[string]string {
	out := map[string]string{}
	for _, l := range lines {
		for _, m := range flagValue.FindAllStringSubmatch(l, -1) {
			v, _, _ := strings.Cut(m[2], "|-")
			out[m[1]] = strings.TrimRight(v, "].")
		}
	}
	return out
}

// section prints a heading and its "NAME  what" lines in two columns.
func section(w io.Writer, heading string, lines []string) {
	if len(lines) == 0 {
		return
	}
	fmt.Fprintf(w, "\n%s\n", heading)
	tw := tabwriter.NewWriter(w, 0, 4, 3, ' ', 0)
	for _, l := range lines {
		name, what, _ := strings.Cut(l, "  ")
		fmt.Fprintf(tw, "  %s\t%s\n", name, strings.TrimSpace(what))
	}
	tw.Flush()
}

// usageLinesOf returns the lines of usageText for path ("verb" or "verb
// sub"), continuation lines included. A line names a sub-verb as one of
// its alternatives (`sessions pause|resume|…`); a verb's own line is the one
// whose next word is not a sub-verb of it.
func usageLinesOf(path string) []string {
	verb, sub, _ := strings.Cut(path, " ")
	var out []string
	in := false
	for _, l := range strings.Split(usageText, "\n") {
		rest, ok := strings.CutPrefix(l, "  the-loop ")
		if !ok {
			if in && strings.HasPrefix(l, "      ") {
				out = append(out, l)
				continue
			}
			in = false
			continue
		}
		words := strings.Fields(rest)
		next := ""
		if len(words) > 1 {
			next = words[1]
		}
		alts := strings.Split(next, "|")
		isSub := slices.ContainsFunc(alts, func(a string) bool { return slices.Contains(subVerbs[verb], a) })
		in = words[0] == verb && (sub == "" && !isSub || sub != "" && slices.Contains(alts, sub))
		if verb == "serve" {
			in = words[0] == verb
		}
		if in {
			out = append(out, l)
		}
	}
	return out
}

// cmdVersion is `the-loop version`.
func cmdVersion(_ context.Context, args []string, _ config.Env, stdout, stderr io.Writer) error {
	fs := newFlags("version", stderr)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: version takes no arguments", errUsage)
	}
	fmt.Fprintln(stdout, "the-loop", buildVersion())
	return nil
}
