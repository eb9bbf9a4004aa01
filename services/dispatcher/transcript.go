package dispatcher

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"time"

	"github.com/the-loop/bus/pkg/bus"
	"github.com/the-loop/bus/pkg/catalog"
	"github.com/the-loop/bus/pkg/graphstate"
	"github.com/the-loop/bus/pkg/redact"
	"github.com/the-loop/bus/pkg/sessions"
)

// A session's transcript is what its terminal shows, and only the host
// running it can read that. Each replica that runs sessions answers for its
// own on a subject named after its host, so that the control plane (which
// never hosts sessions) asks the one that can
// (docs/decisions/122-control-plane-api.md).

// TranscriptService names the endpoint set that answers transcripts.
const TranscriptService = "the-loop-dispatcher-transcripts"

// SubjectTranscript is where the dispatcher running sessions on host
// answers for their transcripts.
func SubjectTranscript(host string) string {
	return catalog.ServiceSubject(Name, "transcript."+catalog.SubjectKey(host))
}

// TranscriptRequest asks for the end of a work item's session.
type TranscriptRequest struct {
	Ref string `json:"ref"`
	// Lines is how many of the last lines (1–2000; 0: 200).
	Lines int `json:"lines,omitempty"`
}

// Transcript is what a session's terminal shows, secrets masked.
type Transcript struct {
	Ref        string    `json:"ref"`
	Host       string    `json:"host"`
	Status     string    `json:"status"`
	Lines      []string  `json:"lines"`
	CapturedAt time.Time `json:"capturedAt"`
}

// maxTranscriptLines bounds one answer.
const maxTranscriptLines = 2000

// serveTranscripts answers this host's transcripts until the returned
// func stops it. A failure to start is logged: sessions run without it.
func (s *Service) serveTranscripts(store *sessions.Store) (stop func()) {
	svc, err := s.deps.Conn.AddService(bus.ServiceSpec{
		Name: TranscriptService, Version: EndpointVersion, Logger: s.deps.Log,
		Description: "the-loop dispatcher: the transcripts of the sessions on " + s.set.Host,
		Endpoints: []bus.Endpoint{{Name: "transcript", Subject: SubjectTranscript(s.set.Host), Handler: func(ctx context.Context, data []byte) ([]byte, error) {
			return s.transcript(ctx, store, data)
		}}},
	})
	if err != nil {
		s.deps.Log.Error("dispatcher: transcript endpoint not started", "err", err)
		return func() {}
	}
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = svc.Stop(ctx)
	}
}

func (s *Service) transcript(ctx context.Context, store *sessions.Store, data []byte) ([]byte, error) {
	var req TranscriptRequest
	if err := json.Unmarshal(data, &req); err != nil || graphstate.WorkItemURL(req.Ref) == "" {
		return nil, bus.Fail(bus.CodeBadRequest, "bad request: want JSON {\"ref\": \"github:owner/repo#N\", \"lines\": N}")
	}
	if req.Lines <= 0 {
		req.Lines = 200
	}
	req.Lines = min(req.Lines, maxTranscriptLines)
	rec, _, err := store.Get(ctx, req.Ref)
	if err != nil {
		return nil, bus.Fail(bus.CodeUnavailable, "sessions unavailable: %v", err)
	}
	sess := rec.Session
	switch {
	case sess == nil || sess.TmuxTarget == "":
		return nil, bus.Fail(bus.CodeNotFound, "%s has no session", req.Ref)
	case sess.Host != s.set.Host:
		return nil, bus.Fail(bus.CodeConflict, "%s runs on %s, not here", req.Ref, sess.Host)
	}
	text, err := s.tmux.Capture(ctx, sess.TmuxTarget, req.Lines)
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			return nil, bus.Fail(bus.CodeUnavailable, "the terminal did not answer in time")
		}
		// A closed session's terminal is gone: say so, without the
		// terminal's own words, which name paths.
		return nil, bus.Fail(bus.CodeNotFound, "%s's terminal cannot be read (its session is %s)", req.Ref, sess.Status)
	}
	scrub := s.set.Scrub
	if scrub == nil {
		scrub = redact.FromOS().Scrub
	}
	lines := strings.Split(scrub(text), "\n")
	if len(lines) == 1 && lines[0] == "" {
		lines = []string{}
	}
	return json.Marshal(Transcript{Ref: req.Ref, Host: sess.Host, Status: string(sess.Status), Lines: lines, CapturedAt: time.Now().UTC()})
}
