// Package hatch is the operator's moves as the CLI and the control plane's
// API both make them. The escape hatch (`the-loop graph
// advance|skip|force|escalate`):
// ask the dispatcher where the work item stands, check the move against the
// graph, and publish the graph.override to the inbox as the operator, to be
// recorded on GitHub naming the operator, then applied by the dispatcher
// (docs/decisions/111-operator-escape-hatch.md). And a person's reply to a
// session from the operator's tools, recorded on the work item naming them
// before it is typed in.
package hatch

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/the-loop/bus/internal/statuspage"
	"github.com/the-loop/bus/pkg/bus"
	"github.com/the-loop/bus/pkg/catalog"
	"github.com/the-loop/bus/pkg/config"
	"github.com/the-loop/bus/pkg/control"
	"github.com/the-loop/bus/pkg/envelope"
	"github.com/the-loop/bus/pkg/graph"
	"github.com/the-loop/bus/pkg/identity"
	loopv1 "github.com/the-loop/bus/proto/loop/v1"
	"github.com/the-loop/bus/services/dispatcher"
)

// AskTimeout bounds one question to the dispatcher.
const AskTimeout = 30 * time.Second

// Ask asks the dispatcher's graph endpoint subject about ref over conn and
// decodes its answer into out. A work item without graph state is
// statuspage.ErrNoWorkItem; the other refusals are the dispatcher's words.
func Ask(ctx context.Context, conn *bus.Conn, subject, ref string, out any) error {
	req, err := json.Marshal(dispatcher.GraphRequest{Ref: ref})
	if err != nil {
		return err
	}
	rctx, cancel := context.WithTimeout(ctx, AskTimeout)
	defer cancel()
	data, err := conn.Request(rctx, subject, req)
	var refused *bus.ServiceError
	switch {
	case errors.Is(err, bus.ErrNoResponders):
		return fmt.Errorf("no dispatcher answered on %s — is the dispatcher running? ('the-loop up', or 'the-loop serve dispatcher')", subject)
	case errors.Is(err, bus.ErrRequestTimeout):
		return fmt.Errorf("the dispatcher did not answer on %s within %s", subject, AskTimeout)
	case errors.As(err, &refused) && refused.Code == bus.CodeNotFound:
		return fmt.Errorf("%s: %w", refused.Description, statuspage.ErrNoWorkItem)
	case errors.As(err, &refused):
		return errors.New(refused.Description)
	case err != nil:
		return err
	}
	if err := json.Unmarshal(data, out); err != nil {
		return fmt.Errorf("the dispatcher's answer on %s is not what this the-loop reads (%v); are both the same version?", subject, err)
	}
	return nil
}

// Status asks the dispatcher over conn where ref stands. A work item
// without graph state is statuspage.ErrNoWorkItem.
func Status(ctx context.Context, conn *bus.Conn, ref string) (*dispatcher.GraphStatus, error) {
	var ans dispatcher.GraphStatus
	if err := Ask(ctx, conn, dispatcher.SubjectGraphStatus, ref, &ans); err != nil {
		return nil, err
	}
	if ans.State == nil {
		return nil, fmt.Errorf("the dispatcher's answer on %s carries no state", dispatcher.SubjectGraphStatus)
	}
	return &ans, nil
}

// Move is one operator move.
type Move struct {
	Ref    string
	Action graph.Action
	// To is the target of advance and force.
	To     string
	Reason string
	// Person is the operator's own entry in routing.authorizedUsers, when
	// known; the record names them.
	Person *loopv1.Actor
}

// Published is a move published: its event, the node it was decided at,
// and the node it leads to ("" when cfg does not know the graph).
type Published struct {
	Event    *loopv1.Event
	From, To string
}

// Publish checks m against where its work item stands and publishes it
// over conn, the operator's connection. When cfg knows the work item's
// graph, a move the dispatcher would refuse is refused here, before
// anything is recorded on the work item.
func Publish(ctx context.Context, conn *bus.Conn, cfg *config.Config, m Move) (Published, error) {
	ans, err := Status(ctx, conn, m.Ref)
	if err != nil {
		return Published{}, err
	}
	st := ans.State
	to := m.To
	if g, ok := cfg.Graphs.Registry().Get(st.Graph); ok {
		_, next, err := st.CheckOverride(g, graph.OverrideRequest{Action: m.Action, From: st.Current, To: m.To, Reason: m.Reason})
		if err != nil {
			return Published{}, fmt.Errorf("%s is at %s: %w", m.Ref, st.Current, err)
		}
		to = next
	}
	ev := dispatcher.OverrideEvent(m.Ref, st.Graph, m.Action, st.Current, m.To, m.Reason, m.Person, time.Now())
	msg, err := envelope.ToMessage(ev, envelope.Inbox, "")
	if err != nil {
		return Published{}, err
	}
	if _, err := conn.Publish(ctx, bus.FromEnvelope(msg)); err != nil {
		return Published{}, fmt.Errorf("publish the %s: %w", m.Action, err)
	}
	return Published{Event: ev, From: st.Current, To: to}, nil
}

// Person is login's entry in cfg's routing.authorizedUsers, as a record
// names the person behind the operator.
func Person(cfg *config.Config, login string) (*loopv1.Actor, error) {
	p, ok := cfg.Routing.AuthorizedUsers.ByChannel(identity.ChannelGitHub, login)
	if !ok {
		return nil, fmt.Errorf("%s: %w", login, statuspage.ErrUnknownPerson)
	}
	return &loopv1.Actor{Github: p.GitHub, Slack: p.Slack, Name: p.Name}, nil
}

// Operator makes the control plane's graph moves over the host's operator
// connection (statuspage.Operator).
type Operator struct {
	Conn   *bus.Conn
	Config func() *config.Config
}

// Override publishes o as the operator.
func (op Operator) Override(ctx context.Context, o statuspage.Override) (statuspage.OverrideAccepted, error) {
	cfg := op.Config()
	m := Move{Ref: o.Ref, Action: o.Action, To: o.To, Reason: o.Reason}
	if o.As != "" {
		p, err := Person(cfg, o.As)
		if err != nil {
			return statuspage.OverrideAccepted{}, err
		}
		m.Person = p
	}
	pub, err := Publish(ctx, op.Conn, cfg, m)
	if err != nil {
		return statuspage.OverrideAccepted{}, err
	}
	return statuspage.OverrideAccepted{EventID: pub.Event.GetId(), Ref: o.Ref, Action: string(o.Action), From: pub.From, To: pub.To}, nil
}

// ReplyEvent is a person's reply to a work item's session from the
// operator's tools (`the-loop standing say`, the control plane): a
// work-item.reply from the cli source, recorded on the work item naming the
// person, then typed into the session. kind tells the tools apart in the
// event's id, which derives from the request and its time, so a retried
// publish is stored once.
func ReplyEvent(kind, ref string, person *loopv1.Actor, text string, now time.Time) *loopv1.Event {
	return &loopv1.Event{
		Id:      envelope.LoopID(kind, ref, person.GetGithub(), now.UTC().Format(time.RFC3339Nano)),
		Source:  catalog.SourceCLI,
		Type:    string(catalog.WorkItemReply),
		Subject: ref,
		Time:    envelope.NewTime(now),
		Actor:   person,
		Body:    &loopv1.Event_Reply{Reply: &loopv1.Reply{Text: text}},
	}
}

// Reply publishes r as the person's reply to its work item's session, over
// the operator's connection.
func (op Operator) Reply(ctx context.Context, r statuspage.Reply) (statuspage.ReplyAccepted, error) {
	person, err := Person(op.Config(), r.As)
	if err != nil {
		return statuspage.ReplyAccepted{}, err
	}
	ev := ReplyEvent("api-reply", r.Ref, person, r.Text, time.Now())
	msg, err := envelope.ToMessage(ev, envelope.Inbox, "")
	if err != nil {
		return statuspage.ReplyAccepted{}, err
	}
	if _, err := op.Conn.Publish(ctx, bus.FromEnvelope(msg)); err != nil {
		return statuspage.ReplyAccepted{}, fmt.Errorf("publish the reply: %w", err)
	}
	return statuspage.ReplyAccepted{EventID: ev.GetId(), Ref: r.Ref, As: person.GetGithub()}, nil
}

// SessionCommands are the control commands the operator's tools send a
// work item's session (`the-loop sessions …`, the control plane).
var SessionCommands = []control.Command{control.Pause, control.Resume, control.Stop, control.Cleanup, control.Adopt, control.End}

// ControlEvent is the person login's control command cmd for ref's session
// from the operator's tools: a control.command from the cli source,
// recorded on the work item naming the person, then carried out by the
// dispatcher that hosts the session. The person comes from cfg, never from
// the caller alone: every id of theirs goes into the record.
func ControlEvent(cfg *config.Config, kind, ref string, cmd control.Command, login string, now time.Time) (*loopv1.Event, error) {
	person, err := Person(cfg, login)
	if err != nil {
		return nil, err
	}
	grammar, err := control.New(cfg.Routing.Control.Enabled, cfg.Routing.Control.Keywords)
	if err != nil {
		return nil, err
	}
	keyword := grammar.Keyword(cmd)
	if keyword == "" {
		return nil, fmt.Errorf("the %s command: %w", cmd, statuspage.ErrCommandDisabled)
	}
	return &loopv1.Event{
		Id:      envelope.LoopID(kind, ref, string(cmd), login, now.UTC().Format(time.RFC3339Nano)),
		Source:  catalog.SourceCLI,
		Type:    string(catalog.ControlCommand),
		Subject: ref,
		Time:    envelope.NewTime(now),
		Actor:   person,
		Body:    &loopv1.Event_ControlCommand{ControlCommand: &loopv1.ControlCommand{Command: string(cmd), Text: keyword}},
	}, nil
}

// Control publishes c as the person's control command for its work item's
// session, over the operator's connection.
func (op Operator) Control(ctx context.Context, c statuspage.Control) (statuspage.ControlAccepted, error) {
	ev, err := ControlEvent(op.Config(), "api-control", c.Ref, control.Command(c.Command), c.As, time.Now())
	if err != nil {
		return statuspage.ControlAccepted{}, err
	}
	msg, err := envelope.ToMessage(ev, envelope.Inbox, "")
	if err != nil {
		return statuspage.ControlAccepted{}, err
	}
	if _, err := op.Conn.Publish(ctx, bus.FromEnvelope(msg)); err != nil {
		return statuspage.ControlAccepted{}, fmt.Errorf("publish the %s: %w", c.Command, err)
	}
	return statuspage.ControlAccepted{EventID: ev.GetId(), Ref: c.Ref, Command: c.Command, As: ev.GetActor().GetGithub()}, nil
}
