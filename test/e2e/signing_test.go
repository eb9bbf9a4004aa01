//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/the-loop/bus/internal/testsupport/testkit"
	"github.com/the-loop/bus/pkg/bus"
	"github.com/the-loop/bus/pkg/catalog"
	"github.com/the-loop/bus/pkg/envelope"
	loopv1 "github.com/the-loop/bus/proto/loop/v1"
)

// TestSignedEventsAttacks: the two attacks signatures stop
// (docs/decisions/099-signed-events.md), on the system as deployed — NATS
// with authorization, the five services as processes, the signers bucket
// written by the operator's `the-loop auth signers`. A work item waits at its
// requirements-approval gate.
//
// Server-side path: with the operator's power (no publisher involved) a
// stream's RePublish rule stores on the work item's gate.feedback a gate
// answer of alice's that the dispatcher's stolen seed signed — once as the
// dispatcher's own decision-pending, once as the gate answer itself. The
// ledger-writer refuses both by their signature (bus.forged_event,
// bad-signature and not-allowed), nothing is recorded on GitHub and the gate
// does not move.
//
// Planted dead letter: the dispatcher's seed, whose grant lets it publish
// dead letters, plants one on loop.dlq naming the ledger-writer's inbox
// consumer and alice's gate answer, signed as the dispatcher. `the-loop dlq
// replay` as the operator refuses it, naming why, and the gate does not move.
func TestSignedEventsAttacks(t *testing.T) {
	began := time.Now()
	c := startCluster(t, clusterOptions{slackGates: true, echo: true, replicas: 1})
	s := newAttackSuite(t, c)
	c.addIssues(1)
	n := c.issues[0]
	s.startItems(t, n)
	s.comment(t, n, "the-loop execute")
	s.waitNode(t, n, "requirements")
	s.complete(t, n, "requirements.md", "# Requirements\n\nThe widget SHALL frobnicate.\n")
	before := s.waitNode(t, n, "requirements-approval")
	t.Logf("%s at requirements-approval in %s", ref(n), time.Since(began).Round(time.Second))

	stolen, err := bus.NewSigner(bus.IdentityDispatcher, readFile(t, c.seed(bus.IdentityDispatcher)))
	if err != nil {
		t.Fatal(err)
	}
	// A connection with the stolen seed, as the thief would make it; it
	// reads the signers set, with which the thief adds the
	// ledger-writer's authenticator from the dispatcher, as the
	// dispatcher's own publications carry it.
	disp, err := bus.Connect(s.ctx, bus.Options{URL: c.natsURLs(0), Name: "e2e-stolen-dispatcher",
		Credentials: bus.Credentials{SeedFile: c.seed(bus.IdentityDispatcher)}, Identity: bus.IdentityDispatcher})
	if err != nil {
		t.Fatal(err)
	}
	defer disp.Close()
	keys, err := disp.LoadSigners(s.ctx)
	if err != nil {
		t.Fatal(err)
	}
	answer := func(id string) bus.Message {
		ev := &loopv1.Event{Id: id, Source: "slack", Type: string(catalog.GateFeedback), Subject: ref(n),
			Time: envelope.NewTime(time.Now()), Actor: &loopv1.Actor{Slack: aliceSlack},
			Conversation: &loopv1.Conversation{Channel: slackChannel, ThreadTs: s.threads[n], MessageTs: fmt.Sprintf("%d.000100", time.Now().Unix())},
			Body:         &loopv1.Event_GateFeedback{GateFeedback: &loopv1.GateFeedback{Text: "approved", Action: "approve"}}}
		m, err := envelope.ToMessage(ev, envelope.Inbox, "")
		if err != nil {
			t.Fatal(err)
		}
		return bus.FromEnvelope(m)
	}

	t.Run("readers-authenticators", func(t *testing.T) {
		// What the pipeline fanned out carries an authenticator for each
		// consumer of loop.ev and the operator (decision 110), and no
		// signature to spend a check on.
		js := operatorJetStream(t, c)
		ctx, cancel := context.WithTimeout(s.ctx, 30*time.Second)
		defer cancel()
		str, err := js.Stream(ctx, bus.StreamEvents)
		if err != nil {
			t.Fatal(err)
		}
		m, err := str.GetLastMsgForSubject(ctx, catalog.EventsPrefix+".>")
		if err != nil {
			t.Fatal(err)
		}
		var readers []string
		for _, v := range m.Header.Values(bus.HeaderMAC) {
			id, _, _ := strings.Cut(v, "=")
			readers = append(readers, id)
		}
		slices.Sort(readers)
		if want := []string{bus.IdentityDispatcher, bus.IdentityOperator, bus.IdentitySlackRenderer}; !slices.Equal(readers, want) || m.Header.Get(bus.HeaderSignature) != "" {
			t.Fatalf("%s: authenticators for %v and signature %q, want %v and none", m.Subject, readers, m.Header.Get(bus.HeaderSignature), want)
		}
		t.Logf("%s carries %s's authenticators for %v", m.Subject, m.Header.Get(bus.HeaderSigner), readers)
	})

	t.Run("server-side-path", func(t *testing.T) {
		js := operatorJetStream(t, c)
		ctx, cancel := context.WithTimeout(s.ctx, 30*time.Second)
		defer cancel()
		if _, err := js.CreateStream(ctx, jetstream.StreamConfig{
			Name: "ATTACK", Subjects: []string{"attack.*"}, Storage: jetstream.MemoryStorage,
			RePublish: &jetstream.RePublish{Source: "attack.*", Destination: catalog.InboxPrefix + ".{{wildcard(1)}}." + string(catalog.GateFeedback)},
		}); err != nil {
			t.Fatalf("the RePublish rule: %v", err)
		}
		comments := len(c.gh.Comments(repoName, n))
		moved := answer("slack:EvServerSide1")
		moved.Subject = catalog.InboxSubject(ref(n), catalog.DecisionPending)
		if err := stolen.Sign(&moved, keys); err != nil {
			t.Fatal(err)
		}
		signed := answer("slack:EvServerSide2")
		if err := stolen.Sign(&signed, keys); err != nil {
			t.Fatal(err)
		}
		for _, m := range []bus.Message{moved, signed} {
			nm := &nats.Msg{Subject: "attack." + catalog.SubjectKey(ref(n)), Header: nats.Header{}, Data: m.Data}
			for k, v := range m.Header {
				nm.Header[k] = v
			}
			if _, err := js.PublishMsg(ctx, nm); err != nil {
				t.Fatal(err)
			}
		}
		for id, reason := range map[string]string{"slack:EvServerSide1": bus.ForgedBadSignature, "slack:EvServerSide2": bus.ForgedNotAllowed} {
			r := s.waitLog(t, "the stored gate answer", "bus.forged_event", map[string]any{"event_id": id, "source": bus.IdentityLedgerWriter})
			if r.Fields["reason"] != reason || r.Fields["signer"] != bus.IdentityDispatcher {
				t.Errorf("%s refused as %v by %v, want %s", id, r.Fields["reason"], r.Fields["signer"], reason)
			}
			t.Logf("an event stored on %s by a server-side path, refused by its signature: %s (%v)",
				catalog.InboxSubject(ref(n), catalog.GateFeedback), r.Fields["detail"], r.Fields["reason"])
		}
		s.sentinel(t, n, tokenFor(n, 901))
		s.unmoved(t, n, before)
		if got := c.gh.Comments(repoName, n)[comments:]; len(got) != 1 || !strings.Contains(got[0].Body, tokenFor(n, 901)) {
			t.Errorf("GitHub got %d comments after the forged answers, want only the sentinel", len(got))
		}
		t.Logf("the gate does not move: %s still at %s", ref(n), s.state(t, n).Current)
	})

	t.Run("planted-dead-letter", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(s.ctx, 60*time.Second)
		defer cancel()
		stored := fmt.Sprintf("%s.%d.%s.%s", catalog.InboxPrefix, partitionOf(ref(n)), catalog.SubjectKey(ref(n)), catalog.GateFeedback)
		consumer := bus.ConsumerName(bus.ServiceLedgerWriter, int(partitionOf(ref(n))))
		m := answer("slack:EvPlanted")
		if err := stolen.Sign(&m, nil); err != nil {
			t.Fatal(err)
		}
		m.Header.Set(bus.HeaderDLQSubject, stored)
		m.Header.Set(bus.HeaderDLQConsumer, consumer)
		m.Header.Set(bus.HeaderDLQStream, bus.StreamInbox)
		m.Header.Set(bus.HeaderDLQMsgID, "slack:EvPlanted")
		m.Header.Set(bus.HeaderDLQReason, "permanent: github unavailable")
		m.Subject, m.MsgID = catalog.DLQPrefix+"."+consumer+"."+stored, "planted:1"
		if err := stolen.SignDeadLetter(m.Subject, m.Header, m.Data); err != nil {
			t.Fatal(err)
		}
		if _, err := disp.Publish(ctx, m); err != nil {
			t.Fatalf("the dispatcher's seed publishing on loop.dlq: %v", err)
		}
		var seq uint64
		if !testkit.Poll(attackWait, func() bool {
			l, err := s.op.ListDLQ(ctx, 0)
			for _, e := range l {
				if e.CEID == "slack:EvPlanted" {
					seq = e.Seq
				}
			}
			return err == nil && seq != 0
		}) {
			t.Fatal("the planted dead letter is not in LOOP_DLQ")
		}
		loop, _ := binaries(t)
		cmd := exec.Command(loop, "dlq", "replay", strconv.FormatUint(seq, 10))
		cmd.Env = c.cliEnv("operator")
		out, err := cmd.CombinedOutput()
		if err == nil || !strings.Contains(string(out), "dead letter refused") || !strings.Contains(string(out), "not the consumer of LOOP_INBOX") {
			t.Fatalf("the-loop dlq replay %d: %v\n%s", seq, err, out)
		}
		t.Logf("a planted dead letter's replay refused: the-loop dlq replay %d: %s", seq, strings.TrimSpace(string(out)))
		s.sentinel(t, n, tokenFor(n, 902))
		s.unmoved(t, n, before)
		if l, _ := s.op.ListDLQ(ctx, 0); !containsCEID(l, "slack:EvPlanted") {
			t.Error("the refused dead letter left the DLQ")
		}
	})
	c.stop()
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func containsCEID(l []bus.DLQEntry, id string) bool {
	for _, e := range l {
		if e.CEID == id {
			return true
		}
	}
	return false
}

// operatorJetStream is a plain JetStream client as the operator: the
// power to add streams and their rules.
func operatorJetStream(t *testing.T, c *cluster) jetstream.JetStream {
	t.Helper()
	nc, err := nats.Connect(c.natsURLs(0), nkeyFile(c.seed(bus.IdentityOperator)), nats.CustomInboxPrefix(bus.InboxPrefix(bus.IdentityOperator)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return js
}
