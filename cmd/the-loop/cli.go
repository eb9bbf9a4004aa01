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
  the-loop events [--work-item REF] [--type T] [--since D] [--delivery-id ID] [--json]
                                       the stored event-log records they select
  the-loop channels status             the channels' configuration and grants
  the-loop migrate-config [--write] [FILE]
                                       migrate an operator config to version 0.7.0
  the-loop dlq list [--limit N]        dead-lettered events
  the-loop dlq replay <seq>            republish a dead-lettered event under a new id
  the-loop partitions                  how each service's replicas share the partitions; what is pending
  the-loop sessions list               agent sessions and their state
  the-loop sessions pause|resume|stop|cleanup|adopt|end --work-item REF --as LOGIN
                                       ask the hosting dispatcher to act on a session (recorded on GitHub)
  the-loop standing list               the standing sessions: named sessions with no work item, each on its ledger issue
  the-loop standing start|stop [NAME] --as LOGIN
                                       start or stop a standing session (no NAME: start every autoStart one,
                                       stop every one): the control command on its ledger issue, recorded there
  the-loop standing say NAME --text TEXT --as LOGIN
                                       type a message into a running standing session, recorded on its ledger first
  the-loop ask --work-item REF --question TEXT|--question-file F|- [--timeout D]
                                       ask on the work item; prints the recorded comment's URL
  the-loop graph status REF [--json]   the work item's process graph state
  the-loop graph complete REF          the agent's node is done: move the work item on
  the-loop graph advance|force REF --to NODE --reason TEXT [--as LOGIN] [--wait D]
                                       the operator's escape hatch, never a session's: advance along one
                                       of the node's edges, or force to any node, gates notwithstanding;
                                       recorded on GitHub with who and why, then applied by the dispatcher
  the-loop graph skip|escalate REF --reason TEXT [--as LOGIN] [--wait D]
                                       the operator's escape hatch, never a session's: skip the node by its
                                       default edge, or escalate by its escalate edge (conflict-escalated);
                                       recorded on GitHub with who and why, then applied by the dispatcher
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
  the-loop critic list [--json]        in an agent session: the critics the operator configured
  the-loop critic run NAME [--node NODE] [--brief TEXT|--brief-file F|-] [--wait D] [--json]
                                       in an agent session: one review round by critic NAME of a node's
                                       artifact, run by the dispatcher in the session's checkout; the
                                       findings are recorded on the work item and arrive as a new prompt.
                                       exit 0 ok or running, 1 the round failed, 2 could not ask
  the-loop hook session-start|stop --harness claude|cursor
                                       the plugin's harness hooks (JSON on stdin); no-op outside a session
  the-loop sandbox [--rw PATH]... [--ro PATH]... [--exec PATH]... [--connect PORT]... [--unix DIR]... -- COMMAND [ARGS...]
                                       run COMMAND confined by Landlock to those paths (read-write, read,
                                       read and execute), TCP ports and unix socket directories; the
                                       dispatcher starts agent sessions so. Fails, running nothing, on a
                                       kernel without Landlock ABI 6
  the-loop session-host [--socket PATH] [--tmux-dir DIR] [--tmux BIN] [--allow-uid UID] [--home DIR]
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
  the-loop auth init DIR [--force] [--reader UID|none]
                                       a deployment's bus identities: NKey seeds (kept if there, readable
                                       by the services' uid), nats.conf authorization and signers.json
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

'the-loop VERB --help' lists a verb's flags, arguments and the settings it reads.
Settings come from LOOP_* environment variables ('the-loop serve <service> --help' lists a service's).
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
	switch {
	case verb == "help" || isHelpFlag(verb):
		if len(rest) == 0 || isHelpFlag(rest[0]) || rest[0] == "help" {
			fmt.Fprint(stdout, usageText)
			return nil
		}
		sub := ""
		if len(rest) > 1 && !strings.HasPrefix(rest[1], "-") {
			sub = rest[1]
		}
		return verbHelp(ctx, rest[0], sub, env, stdout)
	case verb == "--version":
		verb = "version"
	case asksHelp(verb, rest):
		sub := ""
		if len(rest) > 0 && !strings.HasPrefix(rest[0], "-") && (len(subVerbs[verb]) > 0 || verb == "serve") {
			sub = rest[0]
		}
		return verbHelp(ctx, verb, sub, env, stdout)
	}
	if f, ok := verbs[verb]; ok {
		return f(ctx, rest, env, stdout, stderr)
	}
	fmt.Fprint(stderr, usageText)
	return fmt.Errorf("%w: unknown verb %q", errUsage, verb)
}

// asksHelp reports whether args ask for the verb's help (-h, --help)
// before any "--". `demo agent` hands its argv to the stand-in harness, help
// flags included.
func asksHelp(verb string, args []string) bool {
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

func buildVersion() string {
	if version != "" {
		return version
	}
	return versionOf(debug.ReadBuildInfo())
}

// newFlags returns a FlagSet that reports errors instead of exiting.
// Its Usage is the verb's help (writeHelp), printed when --help is parsed.
func newFlags(name string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { writeHelp(fs.Output(), fs) }
	madeFlagSet(fs)
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

// parseInterspersed is parseFlags for a verb whose flags may also follow
// its arguments (`auth init DIR --force`); it returns the arguments. A "--"
// ends the flags.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := parseFlags(fs, args); err != nil {
			return nil, err
		}
		if fs.NArg() == 0 {
			return pos, nil
		}
		rest := fs.Args()
		if len(args) > len(rest) && args[len(args)-len(rest)-1] == "--" {
			return append(pos, rest...), nil
		}
		pos, args = append(pos, rest[0]), rest[1:]
	}
}

func quoteList(xs []string) string {
	if len(xs) == 0 {
		return "none"
	}
	return strings.Join(xs, ", ")
}
