package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/the-loop/bus/pkg/config"
	"github.com/the-loop/bus/pkg/graphstate"
	"github.com/the-loop/bus/services/dispatcher/sessionapi"
)

// maxQuestionBytes bounds a question read from a file or stdin (GitHub's
// comment limit is 65,536 characters; the ledger-writer caps what it posts).
const maxQuestionBytes = 256 << 10

// cmdAsk is what an agent session runs to ask a person on its work item: it
// sends the question to the dispatcher's session endpoint with the session's
// own token (LOOP_SESSION_URL, LOOP_SESSION_TOKEN, set by the dispatcher),
// which scrubs it, publishes it as session.awaiting_input with the session as
// its asker, and answers once the ledger has recorded it; the verb prints the
// question comment's URL. A session holds no bus credential: this is its only
// way to ask (package sessionapi).
func cmdAsk(ctx context.Context, args []string, env config.Env, stdout, stderr io.Writer) error {
	return cmdAskWith(ctx, args, env, os.Stdin, stdout, stderr)
}

func cmdAskWith(ctx context.Context, args []string, env config.Env, stdin io.Reader, stdout, stderr io.Writer) error {
	fs := newFlags("ask", stderr)
	ref := fs.String("work-item", "", "the work item, github:owner/repo#N (default: the session's own; another is refused)")
	text := fs.String("question", "", "the question (markdown)")
	file := fs.String("question-file", "", "read the question from this file ('-': standard input)")
	timeout := fs.Duration("timeout", 60*time.Second, "how long to wait for the ledger to record the question")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	const usage = "ask [--work-item REF] --question TEXT|--question-file F|- [--timeout D]"
	stdinArg := false
	switch rest := fs.Args(); {
	case len(rest) == 1 && rest[0] == "-":
		stdinArg = true
	case len(rest) > 0:
		return fmt.Errorf("%w: %s (unexpected %q)", errUsage, usage, rest[0])
	}
	sources := 0
	for _, set := range []bool{*text != "", *file != "", stdinArg} {
		if set {
			sources++
		}
	}
	if sources != 1 {
		return fmt.Errorf("%w: %s (exactly one question source)", errUsage, usage)
	}
	if *ref != "" && graphstate.WorkItemURL(*ref) == "" {
		return fmt.Errorf("%w: --work-item %q is not a ref like github:owner/repo#15", errUsage, *ref)
	}
	if *timeout <= 0 {
		return fmt.Errorf("%w: --timeout must be positive", errUsage)
	}
	question := *text
	if question == "" {
		var r io.Reader = stdin
		if *file != "" && *file != "-" {
			f, err := os.Open(*file)
			if err != nil {
				return fmt.Errorf("question file: %w", err)
			}
			defer f.Close()
			r = f
		}
		b, err := io.ReadAll(io.LimitReader(r, maxQuestionBytes+1))
		if err != nil {
			return fmt.Errorf("read the question: %w", err)
		}
		if len(b) > maxQuestionBytes {
			return fmt.Errorf("the question is longer than %d bytes", maxQuestionBytes)
		}
		question = string(b)
	}
	if strings.TrimSpace(question) == "" {
		return fmt.Errorf("%w: the question is empty", errUsage)
	}
	client, err := sessionClient(env)
	if err != nil {
		return err
	}
	ans, err := client.Ask(ctx, *ref, question, *timeout)
	if err != nil {
		return err
	}
	if ans.Pending {
		return fmt.Errorf("the question %s is on the bus but the ledger has not recorded it within %s (is the ledger-writer running?); it will be recorded once it is", ans.ID, *timeout)
	}
	fmt.Fprintln(stdout, ans.URL)
	return nil
}

// sessionClient is the session endpoint's client, from the variables the
// dispatcher sets in a session.
func sessionClient(env config.Env) (sessionapi.Client, error) {
	s, err := loadSettings(env)
	if err != nil {
		return sessionapi.Client{}, err
	}
	if s.Session.URL == "" || !s.Session.Token.IsSet() {
		return sessionapi.Client{}, errors.New("this verb runs inside an agent session: LOOP_SESSION_URL and LOOP_SESSION_TOKEN are set there by the dispatcher")
	}
	return sessionapi.Client{URL: s.Session.URL, Token: s.Session.Token.Reveal(), HTTP: &http.Client{Timeout: 10 * time.Minute}}, nil
}
