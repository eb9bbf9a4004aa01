// Package sessions is the session registry: one JSON document per work item
// in the KV bucket "sessions", holding its agent session (harness, session id,
// tmux target, the host running it, status, the event ids recently typed into
// it), the last control command recorded for it, and whether the
// auto-execute label is on it (docs/requirements.md K15).
//
// Every change is a compare-and-set (Mutate): two replicas, or a replica and
// the CLI, never overwrite each other's step, and a decision such as "no live
// session, spawn one" is taken on the revision that is then written.
//
// The documents are a bus contract like the envelopes: the dispatcher
// writes them, and `the-loop sessions list|cleanup` and the status page read
// the same documents without importing the dispatcher
// (docs/decisions/087-shared-documents-in-pkg.md).
package sessions

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/the-loop/bus/pkg/bus"
)

// Version is the document format this package writes.
const Version = 1

// RecentCap bounds Session.Delivered (the original keeps 50).
const RecentCap = 50

// Status is a session's status.
type Status string

// Session statuses. Spawning is the claim written before tmux is asked to
// start the harness, so a crash between the two is recognised on redelivery.
const (
	Spawning Status = "spawning"
	Active   Status = "active"
	Paused   Status = "paused"
	Closed   Status = "closed"
)

// Record is one work item's document.
type Record struct {
	V   int    `json:"v"`
	Ref string `json:"ref"`
	// Labeled is whether the auto-execute label is on the work item, as the
	// last labeled/unlabeled activity said: the label arms, a start command
	// starts (docs/requirements.md K8), and a comment event carries no labels.
	Labeled bool     `json:"labeled,omitempty"`
	Control *Control `json:"control,omitempty"`
	Session *Session `json:"session,omitempty"`
	// PullRequests are the pull requests recorded as delivering the work
	// item (`the-loop sessions link-pr`), as refs.
	PullRequests []string `json:"pullRequests,omitempty"`
	// UpdatedAt is when the document was last written.
	UpdatedAt time.Time `json:"updatedAt"`
}

// Control is the last recorded control command (docs/requirements.md K8).
// Arming commands are recorded only when they act, disarming ones always.
type Control struct {
	Command     string    `json:"command"`
	Source      string    `json:"source"`
	Actor       string    `json:"actor"`
	RequestedAt time.Time `json:"requestedAt"`
	// Note is the comment URL, when there is one.
	Note    string `json:"note,omitempty"`
	EventID string `json:"eventId"`
}

// Session is a work item's agent session.
type Session struct {
	Harness          string `json:"harness"`
	HarnessSessionID string `json:"harnessSessionId"`
	Cwd              string `json:"cwd"`
	// Host is the dispatcher host whose tmux server runs the session; only
	// that host can see it.
	Host        string    `json:"host"`
	TmuxTarget  string    `json:"tmuxTarget"`
	Status      Status    `json:"status"`
	Interaction string    `json:"interaction,omitempty"`
	CreatedAt   time.Time `json:"createdAt"`
	LastEventAt time.Time `json:"lastEventAt"`
	// Delivered are the ids of the events recently typed into the session
	// (or booted it), newest last, at most RecentCap.
	Delivered []string `json:"delivered,omitempty"`
	// Pending is the id of the event being typed right now: set before the
	// paste, cleared with the id moved to Delivered after it.
	Pending string `json:"pending,omitempty"`
	// PendingMarker is the line of Pending's prompt that shows in the
	// session's pane once the harness received it ("" when nothing can
	// tell): what a crash between paste and record is settled by.
	PendingMarker string `json:"pendingMarker,omitempty"`
	// TokenHash is the hash of the session's endpoint token (package
	// sessionapi); the token itself is only in the session's environment.
	// NextTokenHash is a respawn's new token, written before its process
	// starts and made TokenHash once it runs.
	TokenHash     string `json:"tokenHash,omitempty"`
	NextTokenHash string `json:"nextTokenHash,omitempty"`
	// SpecDir is where the work item's artifacts live: docs/specs/issue-N
	// inside the session's checkout (Cwd). Empty in records written before
	// workspaces, whose artifacts are read from Cwd.
	SpecDir string `json:"specDir,omitempty"`
	// Workspace is the work item's own directory, holding a checkout of
	// each repository it touches (Cwd is one of them).
	Workspace string `json:"workspace,omitempty"`
	// AwaitingInput is the id of the question the session asked and no
	// event has answered yet: the session is waiting on a person, not
	// failing to finish its node.
	AwaitingInput string `json:"awaitingInput,omitempty"`
	// Kind is "pr" for a pull request's own session
	// (routing.tmux.sessionPerPr), "standing" for a standing session's, ""
	// for a work item's.
	Kind string `json:"kind,omitempty"`
}

// KindPR is Session.Kind of a pull request's own session.
const KindPR = "pr"

// KindStanding is Session.Kind of a standing session: the session of a
// standingSessions entry, on its ledger issue, owning no work item
// (docs/decisions/118-standing-sessions-keep-a-ledger-issue.md).
const KindStanding = "standing"

// ArtifactDir is where the work item's artifacts are read and written.
func (s *Session) ArtifactDir() string {
	if s == nil {
		return ""
	}
	if s.SpecDir != "" {
		return s.SpecDir
	}
	return s.Cwd
}

// Live reports whether the session exists and is not closed.
func (s *Session) Live() bool { return s != nil && s.Status != Closed && s.Status != "" }

// Remember appends id to Delivered, capped, and clears Pending.
func (s *Session) Remember(id string, at time.Time) {
	if !slices.Contains(s.Delivered, id) {
		s.Delivered = append(s.Delivered, id)
	}
	if n := len(s.Delivered); n > RecentCap {
		s.Delivered = slices.Clone(s.Delivered[n-RecentCap:])
	}
	s.Pending, s.PendingMarker = "", ""
	s.LastEventAt = at
}

// ArmingRecorded reports whether the last recorded command arms the work
// item (start, resume, contribute, do): start_requested in the original.
func (r *Record) ArmingRecorded() bool {
	if r.Control == nil {
		return false
	}
	switch r.Control.Command {
	case "start", "resume", "contribute", "do":
		return true
	}
	return false
}

// ErrNoChange, returned by a Mutate function, leaves the document as it is.
var ErrNoChange = errors.New("registry: no change")

// hostPrefix keys host leases; a ref never starts with it.
const hostPrefix = "_host/"

// Store is the registry in one KV bucket.
type Store struct{ kv *bus.KV }

// Open opens the registry in the provisioned bucket "sessions".
func Open(ctx context.Context, c *bus.Conn) (*Store, error) {
	kv, err := c.KV(ctx, bus.BucketSessions)
	if err != nil {
		return nil, err
	}
	return &Store{kv: kv}, nil
}

// Get returns ref's document and its revision; an absent document is a zero
// Record for ref with revision 0.
func (s *Store) Get(ctx context.Context, ref string) (Record, uint64, error) {
	e, err := s.kv.Get(ctx, ref)
	if errors.Is(err, bus.ErrNotFound) {
		return Record{V: Version, Ref: ref}, 0, nil
	}
	if err != nil {
		return Record{}, 0, err
	}
	var r Record
	if err := json.Unmarshal(e.Value, &r); err != nil {
		return Record{}, 0, fmt.Errorf("registry: %s: %w", ref, err)
	}
	return r, e.Revision, nil
}

// Mutate applies fn to ref's current document and writes the result with a
// compare-and-set, retrying fn on a conflict. fn returning ErrNoChange writes
// nothing; any other error aborts. It returns the document as written (or as
// found, for ErrNoChange).
func (s *Store) Mutate(ctx context.Context, ref string, fn func(*Record) error) (Record, error) {
	for attempt := 0; ; attempt++ {
		r, rev, err := s.Get(ctx, ref)
		if err != nil {
			return Record{}, err
		}
		if err := fn(&r); err != nil {
			if errors.Is(err, ErrNoChange) {
				return r, nil
			}
			return r, err
		}
		r.V, r.Ref, r.UpdatedAt = Version, ref, time.Now().UTC()
		data, err := json.Marshal(r)
		if err != nil {
			return Record{}, err
		}
		_, err = s.kv.CompareAndSet(ctx, ref, data, rev)
		if err == nil {
			return r, nil
		}
		if !bus.IsConflict(err) || attempt >= 20 {
			return Record{}, err
		}
		if err := ctx.Err(); err != nil {
			return Record{}, err
		}
	}
}

// Delete removes ref's document.
func (s *Store) Delete(ctx context.Context, ref string) error { return s.kv.Delete(ctx, ref) }

// List returns every work item's document, in key order.
func (s *Store) List(ctx context.Context) ([]Record, error) {
	keys, err := s.kv.Keys(ctx)
	if err != nil {
		if errors.Is(err, bus.ErrNotFound) || strings.Contains(err.Error(), "no keys found") {
			return nil, nil
		}
		return nil, err
	}
	slices.Sort(keys)
	var out []Record
	for _, k := range keys {
		if strings.HasPrefix(k, hostPrefix) {
			continue
		}
		r, rev, err := s.Get(ctx, k)
		if err != nil || rev == 0 {
			continue // deleted meanwhile, or unreadable: never fatal to a listing
		}
		out = append(out, r)
	}
	return out, nil
}

// Heartbeat renews host's lease: the host is running and can see its tmux
// server.
func (s *Store) Heartbeat(ctx context.Context, host string, at time.Time) error {
	_, err := s.kv.Put(ctx, hostPrefix+host, []byte(at.UTC().Format(time.RFC3339Nano)))
	return err
}

// Lease returns when host last renewed its lease, by the server's clock (the
// write time of the key, so hosts' clocks need not agree); ok is false when
// it never did (or its lease was removed).
func (s *Store) Lease(ctx context.Context, host string) (at time.Time, ok bool, err error) {
	e, err := s.kv.Get(ctx, hostPrefix+host)
	if errors.Is(err, bus.ErrNotFound) {
		return time.Time{}, false, nil
	}
	if err != nil {
		return time.Time{}, false, err
	}
	return e.Created, true, nil
}
