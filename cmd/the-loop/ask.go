package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/the-loop/bus/pkg/config"
	"github.com/the-loop/bus/services/dispatcher/ask"
	"github.com/the-loop/bus/services/dispatcher/graphstate"
)

// maxQuestionBytes bounds a question read from a file or stdin (GitHub's
// comment limit is 65,536 characters; the ledger-writer caps what it posts).
const maxQuestionBytes = 256 << 10

// cmdAsk publishes an agent session's question as session.awaiting_input and
// waits until the ledger has recorded it, then prints the question comment's
// URL (R3.3: the record is the question comment itself, one comment).
//
// See package services/dispatcher/ask: the event has source "cli" and no
// actor (the asker is the session, not a person), and the wait reads the
// ledger's state of the event id until it says recorded or failed, or until
// --timeout.
func cmdAsk(ctx context.Context, args []string, env config.Env, stdout, stderr io.Writer) error {
	return cmdAskWith(ctx, args, env, os.Stdin, stdout, stderr)
}

func cmdAskWith(ctx context.Context, args []string, env config.Env, stdin io.Reader, stdout, stderr io.Writer) error {
	fs := newFlags("ask", stderr)
	ref := fs.String("work-item", "", "the work item, github:owner/repo#N")
	text := fs.String("question", "", "the question (markdown)")
	file := fs.String("question-file", "", "read the question from this file ('-': standard input)")
	sessionID := fs.String("session-id", "", "the asking session's harness session id (optional)")
	timeout := fs.Duration("timeout", 60*time.Second, "how long to wait for the ledger to record the question")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	const usage = "ask --work-item REF --question TEXT|--question-file F|- [--timeout D]"
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
	if *ref == "" || sources != 1 {
		return fmt.Errorf("%w: %s (exactly one question source)", errUsage, usage)
	}
	if graphstate.WorkItemURL(*ref) == "" {
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

	conn, err := cliConnect(ctx, env, "the-loop-ask")
	if err != nil {
		return err
	}
	defer conn.Close()
	wctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	id, url, err := ask.Ask(wctx, conn, *ref, question, *sessionID)
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			return fmt.Errorf("the question %s is on the bus but the ledger has not recorded it within %s (is the ledger-writer running?); it will be recorded once it is", id, *timeout)
		}
		return err
	}
	fmt.Fprintln(stdout, url)
	return nil
}
