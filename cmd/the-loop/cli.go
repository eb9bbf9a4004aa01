package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"runtime/debug"
	"strings"

	"github.com/the-loop/bus/pkg/config"
)

// version is set at link time (-ldflags "-X main.version=..."); otherwise the
// module's build info names it.
var version = ""

// errUsage marks an error whose message is a usage problem (exit code 2).
var errUsage = errors.New("usage")

const usageText = `the-loop — GitHub and Slack to AI coding-agent sessions over NATS JetStream

Usage:
  the-loop init --github LOGIN [--name NAME] [--slack-user ID --slack-channel ID] [FILE]
                                       a starter operator config (default ./the-loop.yaml) that authorizes
                                       one person; never overwrites, and says what to do next
  the-loop up                          run all five services on an embedded JetStream server
  the-loop demo [--keep-running]       the whole flow against built-in GitHub and Slack stand-ins, no credentials
  the-loop serve <service> [--help]    run one service: ` + "ingress-github, ingress-slack, ledger-writer, slack-renderer, dispatcher" + `
  the-loop events --types              the catalog event types and their flags
  the-loop events --log-types          the event-log record types
  the-loop events --follow [--last N]  tail the event log (loop.log.>)
  the-loop channels status             the channels' configuration and grants
  the-loop migrate-config [--write] [FILE]
                                       migrate an operator config to version 0.7.0
  the-loop dlq list [--limit N]        dead-lettered events
  the-loop dlq replay <seq>            republish a dead-lettered event under a new id
  the-loop partitions                  how each service's replicas share the partitions; what is pending
  the-loop sessions list               agent sessions and their state
  the-loop sessions pause|resume|stop|cleanup|adopt|end --work-item REF --as LOGIN
                                       ask the hosting dispatcher to act on a session (recorded on GitHub)
  the-loop ask --work-item REF --question TEXT|--question-file F|- [--timeout D]
                                       ask on the work item; prints the recorded comment's URL
  the-loop graph status REF [--json]   the work item's process graph state
  the-loop graph complete REF          the agent's node is done: move the work item on
  the-loop graph advance|force REF --to NODE --reason TEXT [--as LOGIN] [--wait D]
  the-loop graph skip|escalate REF --reason TEXT [--as LOGIN] [--wait D]
                                       the operator's escape hatch, never a session's: advance along an
                                       edge, skip the node by its default edge, force to any node (gates
                                       notwithstanding), escalate by the escalate edge; recorded on GitHub
                                       with who and why, then applied by the dispatcher
  the-loop graph show [--json]         in an agent session: its graph, node by node, and where it stands
  the-loop sessions register --harness-session-id ID
                                       in an agent session: record the conversation id its harness chose
  the-loop sessions link-pr --pull-request N|REF
                                       in an agent session: a pull request delivers its work item
  the-loop instructions [--json]       in an agent session: the repository's instructions for the current step
  the-loop scenarios [--glob P]... [--json]
                                       in an agent session: the test scenarios the repository's tests declare
  the-loop check [--json] [--fail-on block|unmet]
                                       in an agent session: is its current node complete? exit 0 nothing
                                       fails, 1 something fails (block: a node the agent can act on; unmet:
                                       also a wait on a person), 2 could not ask the session endpoint
  the-loop hook session-start|stop --harness claude|cursor
                                       the plugin's harness hooks (JSON on stdin); no-op outside a session
  the-loop sandbox [--rw PATH]... [--ro PATH]... [--exec PATH]... [--connect PORT]... [--unix DIR]... -- COMMAND [ARGS...]
                                       run COMMAND confined by Landlock to those paths (read-write, read,
                                       read and execute), TCP ports and unix socket directories; the
                                       dispatcher starts agent sessions so. Fails, running nothing, on a
                                       kernel without Landlock ABI 6
  the-loop session-host [--socket PATH] [--tmux-dir DIR] [--allow-uid UID] [--home DIR]
                                       in the sessions' own container: run the dispatcher's tmux commands,
                                       for its uid alone, on a unix socket (docs/deploy.md)
  the-loop session-host tmux [--socket PATH] -- ARGS
                                       the dispatcher's side (its LOOP_TMUX_BINARY): tmux ARGS, run by the
                                       session host
  the-loop plugin install DIR          install the loop's harness plugin in DIR (Claude Code: --plugin-dir DIR)
  the-loop plugin version              the plugin's version
  the-loop excerpt --event NAME [FILE|-]
                                       what a session is shown of a GitHub payload
  the-loop health [--ready] [--url U]  probe a service's /healthz (or /readyz); for container healthchecks
  the-loop auth init DIR               a deployment's bus identities: NKey seeds, nats.conf authorization
                                       and the public signers.json
  the-loop auth signers [FILE]         as the operator: the identities' public keys (signers.json, or
                                       LOOP_SIGNERS_FILE) into the signers bucket the services verify
                                       events with
  the-loop provision                   as the operator: create or update the streams, consumers and buckets
                                       (LOOP_PARTITIONS, LOOP_STREAM_REPLICAS) and, with LOOP_SIGNERS_FILE,
                                       the signers; then exit. Services wait for it
  the-loop docs configuration [--write FILE]
                                       the generated configuration reference
  the-loop version                     print the version
  the-loop help [VERB]                 this text, or one verb's usage

Settings come from LOOP_* environment variables ('the-loop serve <service> --help' lists them).
`

// run executes one verb and returns the process exit code: 0 success, 1
// failure, 2 usage error.
func run(ctx context.Context, args []string, env config.Env, stdout, stderr io.Writer) int {
	err := dispatch(ctx, args, env, stdout, stderr)
	var exit *exitError
	switch {
	case err == nil || errors.Is(err, flag.ErrHelp):
		return 0
	case errors.As(err, &exit):
		if exit.msg != "" {
			fmt.Fprintln(stderr, exit.msg)
		}
		return exit.code
	case errors.Is(err, errUsage):
		fmt.Fprintf(stderr, "the-loop: %v\n", err)
		return 2
	default:
		fmt.Fprintf(stderr, "the-loop: %v\n", err)
		return 1
	}
}

func dispatch(ctx context.Context, args []string, env config.Env, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, usageText)
		return fmt.Errorf("%w: no verb given", errUsage)
	}
	verb, rest := args[0], args[1:]
	if verb == "help" && len(rest) > 0 && !isHelpFlag(rest[0]) {
		return verbUsage(stdout, strings.Join(subVerb(rest), " "))
	}
	if asksHelp(verb, rest) {
		return verbUsage(stdout, strings.Join(subVerb(args), " "))
	}
	switch verb {
	case "up":
		return cmdUp(ctx, rest, env, stdout, stderr)
	case "serve":
		return cmdServe(ctx, rest, env, stdout, stderr)
	case "demo":
		return cmdDemo(ctx, rest, env, stdout, stderr)
	case "events":
		return cmdEvents(ctx, rest, env, stdout, stderr)
	case "channels":
		return cmdChannels(ctx, rest, env, stdout, stderr)
	case "migrate-config":
		return cmdMigrateConfig(ctx, rest, env, stdout, stderr)
	case "dlq":
		return cmdDLQ(ctx, rest, env, stdout, stderr)
	case "partitions":
		return cmdPartitions(ctx, rest, env, stdout, stderr)
	case "sessions":
		return cmdSessions(ctx, rest, env, stdout, stderr)
	case "excerpt":
		return cmdExcerpt(ctx, rest, env, stdout, stderr)
	case "ask":
		return cmdAsk(ctx, rest, env, stdout, stderr)
	case "graph":
		return cmdGraph(ctx, rest, env, stdout, stderr)
	case "instructions":
		return cmdInstructions(ctx, rest, env, stdout, stderr)
	case "scenarios":
		return cmdScenarios(ctx, rest, env, stdout, stderr)
	case "check":
		return cmdCheck(ctx, rest, env, stdout, stderr)
	case "sandbox":
		return cmdSandbox(ctx, rest, env, stdout, stderr)
	case "session-host":
		return cmdSessionHost(ctx, rest, env, stdout, stderr)
	case "plugin":
		return cmdPlugin(ctx, rest, env, stdout, stderr)
	case "hook":
		return cmdHook(ctx, rest, env, stdout, stderr)
	case "health":
		return cmdHealth(ctx, rest, env, stdout, stderr)
	case "auth":
		return cmdAuth(ctx, rest, env, stdout, stderr)
	case "provision":
		return cmdProvision(ctx, rest, env, stdout, stderr)
	case "init":
		return cmdInit(ctx, rest, env, stdout, stderr)
	case "docs":
		return cmdDocs(ctx, rest, env, stdout, stderr)
	case "version", "--version":
		fmt.Fprintln(stdout, "the-loop", buildVersion())
		return nil
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usageText)
		return nil
	}
	fmt.Fprint(stderr, usageText)
	return fmt.Errorf("%w: unknown verb %q", errUsage, verb)
}

// upSettingsHelp is what `up --help` adds: the settings a first run
// changes, with their defaults (the full list: docs/configuration.md).
const upSettingsHelp = `
Settings (environment; every one: docs/configuration.md, or 'the-loop serve <service> --help'):
  LOOP_STORE_DIR        the store: streams, identities (default $XDG_STATE_HOME/the-loop)
  LOOP_NATS_LISTEN      the embedded JetStream server (default 127.0.0.1:4222)
  LOOP_ADMIN_ADDR       /healthz, /readyz, /metrics and the status page /status (default 127.0.0.1:9090)
  LOOP_WORKSPACE_ROOT   each work item's checkout (default $XDG_DATA_HOME/the-loop/workspaces)
  LOOP_CONFIG           the operator config ('the-loop init' writes one)
  LOOP_GITHUB_TOKEN, LOOP_GITHUB_WEBHOOK_SECRET, LOOP_GITHUB_WEBHOOK_ADDR (default :8787)
  LOOP_SLACK_BOT_TOKEN, LOOP_SLACK_APP_TOKEN or LOOP_SLACK_SIGNING_SECRET
`

// asksHelp reports whether args ask for the verb's usage (-h, --help). Two
// verbs answer it themselves: `serve <service> --help` lists the settings the
// service reads, and `demo agent` hands its argv to the stand-in harness.
func asksHelp(verb string, args []string) bool {
	if verb == "serve" && len(args) > 0 && !isHelpFlag(args[0]) {
		return false
	}
	if verb == "demo" && len(args) > 0 && args[0] == "agent" {
		return false
	}
	for _, a := range args {
		if a == "--" {
			return false
		}
		if isHelpFlag(a) {
			return true
		}
	}
	return false
}

func isHelpFlag(a string) bool { return a == "-h" || a == "--help" || a == "-help" }

// subVerb is the verb of args and, when the next word is one of its
// sub-verbs in the usage text (`dlq replay`, `sessions pause`), that word.
func subVerb(args []string) []string {
	if len(args) > 1 && !strings.HasPrefix(args[1], "-") && len(usageLines(args[0]+" "+args[1])) > 0 {
		return args[:2]
	}
	return args[:1]
}

// verbUsage prints the lines of usageText that describe verb (or "verb
// sub"), under a "Usage:" line: what `help VERB`, `VERB --help` and `VERB
// SUB --help` answer; `up` also names the settings it reads first.
func verbUsage(w io.Writer, verb string) error {
	lines := usageLines(verb)
	if len(lines) == 0 {
		fmt.Fprint(w, usageText)
		return fmt.Errorf("%w: unknown verb %q", errUsage, verb)
	}
	fmt.Fprintln(w, "Usage:")
	for _, l := range lines {
		fmt.Fprintln(w, l)
	}
	switch verb {
	case "serve":
		fmt.Fprintln(w, "\n'the-loop serve <service> --help' lists the settings that service reads.")
	case "up":
		fmt.Fprint(w, upSettingsHelp)
	}
	return nil
}

// usageLines returns the usage lines of verb, continuation lines included.
func usageLines(verb string) []string {
	var out []string
	in := false
	for _, l := range strings.Split(usageText, "\n") {
		switch {
		case strings.HasPrefix(l, "  the-loop "+verb+" ") || l == "  the-loop "+verb:
			in = true
			out = append(out, l)
		case in && strings.HasPrefix(l, "      "):
			out = append(out, l)
		default:
			in = false
		}
	}
	return out
}

func buildVersion() string {
	if version != "" {
		return version
	}
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return "dev"
}

// newFlags returns a FlagSet that reports errors instead of exiting.
func newFlags(name string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	return fs
}

// parseFlags parses args, turning a parse failure into a usage error.
func parseFlags(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return fmt.Errorf("%w: %s: %v", errUsage, fs.Name(), err)
	}
	return nil
}

func quoteList(xs []string) string {
	if len(xs) == 0 {
		return "none"
	}
	return strings.Join(xs, ", ")
}
