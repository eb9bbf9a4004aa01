package dispatcher

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/the-loop/bus/pkg/eventlog"
	"github.com/the-loop/bus/pkg/sessions"
)

// leases are the hosts' leases in the session registry: this replica renews
// its own, and judges another's to decide whether a session (or an
// unrecorded paste) hosted there is still its host's to serve or is taken
// over here.
type leases struct {
	host   string
	period time.Duration
	log    *slog.Logger
	events *eventlog.Logger
	// elsewhere counts takeovers of a session whose host was still alive.
	elsewhere prometheus.Counter
}

// renew renews this host's lease until ctx ends, running after (the
// reconcile of local sessions) after each renewal.
func (l *leases) renew(ctx context.Context, store *sessions.Store, after func(context.Context, *sessions.Store)) {
	every := l.period / 3
	for {
		if err := store.Heartbeat(ctx, l.host, time.Now()); err != nil && ctx.Err() == nil {
			l.log.Warn("dispatcher: lease renewal failed", "host", l.host, "err", err)
		}
		// A session another replica took over (its partition moved there)
		// must not stay alive here as an idle second copy.
		after(ctx, store)
		select {
		case <-ctx.Done():
			return
		case <-time.After(every):
		}
	}
}

// takeOver makes sure sess runs on this host: nil when it does (or when its
// host's lease has expired and this replica took it over), a delayed retry
// while its host is alive elsewhere.
func (l *leases) takeOver(ctx context.Context, store *sessions.Store, in *input, sess *sessions.Session) error {
	if sess.Host == l.host {
		return nil
	}
	// This event reached this replica because its partition is pinned here
	// now: the replica named in the registry will never receive the work
	// item's events again, whether it died or merely lost the pin. Waiting
	// for it would stall the partition until the event dead-letters, so the
	// session follows the partition: take it over and resume it here. The
	// old host's reconcile loop kills its idle copy within a lease period.
	fresh, err := l.fresh(ctx, store, sess.Host)
	if err != nil {
		return err
	}
	if fresh {
		l.elsewhere.Inc()
	}
	old := sess.Host
	if _, err := store.Mutate(ctx, in.ref, func(r *sessions.Record) error {
		if r.Session == nil || r.Session.Host != old {
			return sessions.ErrNoChange
		}
		r.Session.Host = l.host
		return nil
	}); err != nil {
		return fmt.Errorf("registry: %w", err)
	}
	sess.Host = l.host
	// What a replica's stop or a scale-out does by design: INFO.
	l.log.Info("dispatcher: took over a session whose partition moved here", "work_item", in.ref, "from_host", old, "host", l.host)
	l.events.Emit(ctx, "session.taken_over", slog.String("work_item", in.ref), slog.String("from_host", old), slog.String("host", l.host))
	return nil
}

// awaitPaste says whether to wait for another host to settle in's
// unrecorded paste: only the host that began it can read its pane, and it
// does so when it starts again (panes.settle). Waiting lasts while that
// host's lease is fresh and the bus has deliveries left; then the event is
// judged here, as delivery-uncertain.
func (l *leases) awaitPaste(ctx context.Context, store *sessions.Store, in *input, sess *sessions.Session) (bool, error) {
	if sess.Host == l.host || sess.PendingMarker == "" || in.last {
		return false, nil
	}
	if fresh, err := l.fresh(ctx, store, sess.Host); err != nil || !fresh {
		return false, err
	}
	l.log.Info("dispatcher: waiting for the host of an interrupted paste to settle it",
		"work_item", in.ref, "event_id", in.ev.GetId(), "paste_host", sess.Host)
	return true, nil
}

// fresh reports whether host renewed its lease within the last lease
// period: it is running, or died less than a lease ago.
func (l *leases) fresh(ctx context.Context, store *sessions.Store, host string) (bool, error) {
	at, ok, err := store.Lease(ctx, host)
	if err != nil {
		return false, fmt.Errorf("registry: lease of %s: %w", host, err)
	}
	return ok && time.Since(at) < l.period, nil
}
