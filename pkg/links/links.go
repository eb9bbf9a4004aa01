// Package links is the record of which work items a pull request delivers,
// when GitHub itself does not say so: a pull request an agent opened for an
// artifact's review carries no closing keyword (it must not close the
// issue) and no issue-N branch, yet its reviews belong to the work item's
// session. The dispatcher writes a link when a session runs `the-loop
// sessions link-pr`; ingress-github reads it and routes the pull request's
// events to the linked work items as well as to the pull request
// (docs/agents.md).
//
// One JSON document per pull request in the KV bucket "links", keyed like
// the graph states (catalog.SubjectKey of the pull request's ref): a bus
// contract like the envelopes (docs/decisions/087-shared-documents-in-pkg.md).
package links

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/the-loop/bus/pkg/bus"
	"github.com/the-loop/bus/pkg/catalog"
)

// Version is the document format this package writes.
const Version = 1

// MaxItems bounds the work items one pull request delivers.
const MaxItems = 16

// Link is one pull request's document.
type Link struct {
	V int `json:"v"`
	// PullRequest is the pull request's ref.
	PullRequest string `json:"pullRequest"`
	// WorkItems are the work items it delivers, in the order linked.
	WorkItems []string  `json:"workItems"`
	UpdatedAt time.Time `json:"updatedAt"`
}

// Store is the links in KV "links".
type Store struct{ kv *bus.KV }

// Open opens the provisioned bucket "links".
func Open(ctx context.Context, c *bus.Conn) (*Store, error) {
	kv, err := c.KV(ctx, bus.BucketLinks)
	if err != nil {
		return nil, err
	}
	return &Store{kv: kv}, nil
}

// WorkItems returns the work items pr is linked to (none: nil).
func (s *Store) WorkItems(ctx context.Context, pr string) ([]string, error) {
	l, _, err := s.get(ctx, pr)
	if err != nil {
		return nil, err
	}
	return l.WorkItems, nil
}

func (s *Store) get(ctx context.Context, pr string) (Link, uint64, error) {
	e, err := s.kv.Get(ctx, catalog.SubjectKey(pr))
	if errors.Is(err, bus.ErrNotFound) {
		return Link{V: Version, PullRequest: pr}, 0, nil
	}
	if err != nil {
		return Link{}, 0, fmt.Errorf("links: %s: %w", pr, err)
	}
	var l Link
	if err := json.Unmarshal(e.Value, &l); err != nil {
		return Link{}, 0, fmt.Errorf("links: %s: %w", pr, err)
	}
	if l.PullRequest != pr {
		// Two refs mapping to one key: never read one as the other.
		return Link{V: Version, PullRequest: pr}, e.Revision, nil
	}
	return l, e.Revision, nil
}

// ErrTooMany: the pull request already delivers MaxItems work items.
var ErrTooMany = errors.New("links: the pull request already delivers the most work items one may")

// Add links pr to item. already reports that it was linked before.
func (s *Store) Add(ctx context.Context, pr, item string) (already bool, err error) {
	for attempt := 0; ; attempt++ {
		l, rev, err := s.get(ctx, pr)
		if err != nil {
			return false, err
		}
		if slices.Contains(l.WorkItems, item) {
			return true, nil
		}
		if len(l.WorkItems) >= MaxItems {
			return false, ErrTooMany
		}
		l.V, l.PullRequest, l.UpdatedAt = Version, pr, time.Now().UTC()
		l.WorkItems = append(l.WorkItems, item)
		data, err := json.Marshal(l)
		if err != nil {
			return false, err
		}
		_, err = s.kv.CompareAndSet(ctx, catalog.SubjectKey(pr), data, rev)
		if err == nil {
			return false, nil
		}
		if !bus.IsConflict(err) || attempt >= 20 {
			return false, fmt.Errorf("links: %s: %w", pr, err)
		}
		if err := ctx.Err(); err != nil {
			return false, err
		}
	}
}
