// Package ask is the question an agent session asks a person on its work
// item (docs/architecture.md, "The ledger"): session.awaiting_input on
// the inbox, and the wait until the ledger has recorded it — the record is the
// question comment itself, one comment — returning its URL.
//
// Sessions reach it only through the dispatcher's session endpoint (package
// sessionapi), which scrubs the question and names the session as the asker;
// `the-loop ask` is the session's client of that endpoint.
package ask

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/the-loop/bus/pkg/bus"
	"github.com/the-loop/bus/pkg/catalog"
	"github.com/the-loop/bus/pkg/envelope"
	"github.com/the-loop/bus/pkg/graphstate"
	loopv1 "github.com/the-loop/bus/proto/loop/v1"
	"github.com/the-loop/bus/services/dispatcher/internal/flow"
)

// Poll is how often Await reads the ledger's state.
const Poll = 200 * time.Millisecond

// ErrFailed: the ledger could not record the question (it went to the DLQ).
var ErrFailed = errors.New("the ledger could not record the question")

// Source is the source of what a session raises.
const Source = catalog.SourceSession

// Event is the question as a catalog event. Its source is "session" and its
// actor the session itself (by its terminal's name), never a person: an
// actor with a person's ids would put their name on words they did not write,
// and the ledger-writer refuses such an event from a session. Its id hashes
// the work item, the question and the time, so a retry of one request is
// stored once and carries no text.
func Event(ref, question, sessionID, terminal string, now time.Time) *loopv1.Event {
	sum := sha256.Sum256([]byte(question))
	return &loopv1.Event{
		Id:      envelope.LoopID("ask", ref, hex.EncodeToString(sum[:]), now.UTC().Format(time.RFC3339Nano)),
		Source:  Source,
		Type:    string(catalog.SessionAwaitingInput),
		Subject: ref,
		Time:    envelope.NewTime(now),
		Actor:   &loopv1.Actor{Name: "agent session " + terminal},
		Body:    &loopv1.Event_Question{Question: &loopv1.Question{Text: question, SessionId: sessionID}},
	}
}

// ErrPending: the wait ended before the ledger recorded the question, which
// is on the bus and will be recorded.
var ErrPending = errors.New("the question is on the bus but not recorded yet")

// Publish puts the question on the inbox (bounded by ctx) and then waits up
// to wait for its record, returning the record's URL, or ErrPending when the
// wait ends first. The wait bounds only the wait: however short, it never
// cuts the publish off, so ErrPending always means the question is stored.
func Publish(ctx context.Context, c *bus.Conn, ev *loopv1.Event, wait time.Duration) (string, error) {
	if _, err := flow.Publish(ctx, c, ev); err != nil {
		return "", fmt.Errorf("publish the question: %w", err)
	}
	wctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	url, err := Await(wctx, c, ev.GetId(), ev.GetSubject())
	if err != nil && !errors.Is(err, ErrFailed) && wctx.Err() != nil && ctx.Err() == nil {
		return "", ErrPending
	}
	return url, err
}

// claim is what the ledger-writer keeps in KV "ledger" per event id
// (docs/architecture.md#streams-and-state: event id → pending/recorded + GitHub
// ref): {state: pending, recorded or failed, record: {Repo, Number, CommentID,
// URL}, reason}. Read leniently: only the state, the URL and the comment id
// matter.
type claim struct {
	State  string `json:"state"`
	Reason string `json:"reason"`
	Record *struct {
		CommentID int64  `json:"commentID"`
		URL       string `json:"url"`
	} `json:"record"`
}

// Await waits until the ledger says event id is recorded and returns the
// record's URL. The ledger-writer marks an event recorded in KV "ledger"
// before it fans it out on loop.ev. (Watching LOOP_EVENTS for the fan-out
// itself, which carries ledger.url, needs a stream watch pkg/bus does not
// offer yet.)
func Await(ctx context.Context, c *bus.Conn, id, ref string) (string, error) {
	kv, err := c.KV(ctx, bus.BucketLedger)
	if err != nil {
		return "", fmt.Errorf("ledger state: %w", err)
	}
	for {
		e, err := kv.Get(ctx, id)
		switch {
		case err == nil:
			var cl claim
			if json.Unmarshal(e.Value, &cl) == nil {
				switch cl.State {
				case "recorded":
					if u := recordURL(cl, ref); u != "" {
						return u, nil
					}
					return "", fmt.Errorf("the ledger recorded %s but names no record", id)
				case "failed":
					return "", fmt.Errorf("%w (%s); it is in the dead-letter queue", ErrFailed, cl.Reason)
				}
			}
		case !errors.Is(err, bus.ErrNotFound):
			if ctx.Err() != nil {
				return "", ctx.Err()
			}
			return "", fmt.Errorf("ledger state: %w", err)
		}
		t := time.NewTimer(Poll)
		select {
		case <-ctx.Done():
			t.Stop()
			return "", ctx.Err()
		case <-t.C:
		}
	}
}

// recordURL is the record's URL, or one built from its comment id on the
// work item's host.
func recordURL(c claim, ref string) string {
	if c.Record == nil {
		return ""
	}
	if c.Record.URL != "" {
		return c.Record.URL
	}
	base := graphstate.WorkItemURL(ref)
	if base == "" || c.Record.CommentID == 0 {
		return ""
	}
	return base + "#issuecomment-" + strconv.FormatInt(c.Record.CommentID, 10)
}
