package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/the-loop/bus/pkg/bus"
	"github.com/the-loop/bus/pkg/catalog"
	"github.com/the-loop/bus/pkg/config"
	"github.com/the-loop/bus/pkg/envelope"
	loopv1 "github.com/the-loop/bus/proto/loop/v1"
	"github.com/the-loop/bus/services/dispatcher/graphstate"
)

// maxQuestionBytes bounds a question read from a file or stdin (GitHub's
// comment limit is 65,536 characters; the ledger-writer caps what it posts).
const maxQuestionBytes = 256 << 10

// askPoll is how often ask looks for the ledger's record.
const askPoll = 200 * time.Millisecond

// cmdAsk publishes an agent session's question as session.awaiting_input and
// waits until the ledger has recorded it, then prints the question comment's
// URL (R3.3: the record is the question comment itself, one comment).
//
// The event has source "cli" and no actor: the asker is the session, not a
// person, and an actor would put a person's name on words they did not write.
// Its id is loop:ask:<hash of the work item, the question's hash and the
// time>, so a retry of one invocation is stored once.
//
// Waiting: the ledger-writer marks the event recorded in KV "ledger" (event id
// → pending / recorded with the record / failed) before it fans the event out
// on loop.ev; ask reads that key until it says recorded or failed, or until
// --timeout. (pkg/bus has no way yet to watch LOOP_EVENTS for the fan-out
// itself; see the decision record.)
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

	now := time.Now()
	sum := sha256.Sum256([]byte(question))
	ev := &loopv1.Event{
		Id:      envelope.LoopID("ask", *ref, hex.EncodeToString(sum[:]), now.UTC().Format(time.RFC3339Nano)),
		Source:  "cli",
		Type:    string(catalog.SessionAwaitingInput),
		Subject: *ref,
		Time:    envelope.NewTime(now),
		Body:    &loopv1.Event_Question{Question: &loopv1.Question{Text: question, SessionId: *sessionID}},
	}
	conn, err := cliConnect(ctx, env, "the-loop-ask")
	if err != nil {
		return err
	}
	defer conn.Close()
	wctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	if _, err := graphstate.Publish(wctx, conn, ev); err != nil {
		return fmt.Errorf("publish the question: %w", err)
	}
	url, err := awaitRecord(wctx, conn, ev.GetId(), *ref)
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			return fmt.Errorf("the question %s is on the bus but the ledger has not recorded it within %s (is the ledger-writer running?); it will be recorded once it is", ev.GetId(), *timeout)
		}
		return err
	}
	fmt.Fprintln(stdout, url)
	return nil
}

// ledgerClaim is what the ledger-writer keeps in KV "ledger" per event id:
// {state: pending|recorded|failed, record: {Repo, Number, CommentID, URL},
// reason}. Read leniently: only the state, the URL and the numbers matter.
type ledgerClaim struct {
	State  string `json:"state"`
	Reason string `json:"reason"`
	Record *struct {
		Repo      string `json:"repo"`
		Number    int64  `json:"number"`
		CommentID int64  `json:"commentID"`
		URL       string `json:"url"`
	} `json:"record"`
}

// awaitRecord waits until the ledger says event id is recorded and returns
// the record's URL.
func awaitRecord(ctx context.Context, conn *bus.Conn, id, ref string) (string, error) {
	kv, err := conn.KV(ctx, bus.BucketLedger)
	if err != nil {
		return "", fmt.Errorf("ledger state: %w", err)
	}
	for {
		e, err := kv.Get(ctx, id)
		switch {
		case err == nil:
			var c ledgerClaim
			if json.Unmarshal(e.Value, &c) == nil {
				switch c.State {
				case "recorded":
					if u := recordURL(c, ref); u != "" {
						return u, nil
					}
					return "", fmt.Errorf("the ledger recorded %s but names no record URL", id)
				case "failed":
					return "", fmt.Errorf("the ledger could not record the question (%s); it is in the dead-letter queue", c.Reason)
				}
			}
		case !errors.Is(err, bus.ErrNotFound):
			if ctx.Err() != nil {
				return "", ctx.Err()
			}
			return "", fmt.Errorf("ledger state: %w", err)
		}
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-time.After(askPoll):
		}
	}
}

// recordURL is the record's URL, or one built from its comment id on the
// work item's host.
func recordURL(c ledgerClaim, ref string) string {
	if c.Record == nil {
		return ""
	}
	if c.Record.URL != "" {
		return c.Record.URL
	}
	base := graphstate.WorkItemURL(ref)
	if base == "" || c.Record.CommentID == 0 {
		return base
	}
	return base + "#issuecomment-" + strconv.FormatInt(c.Record.CommentID, 10)
}
