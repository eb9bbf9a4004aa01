// Package demo is `the-loop demo`: the story of docs/requirements.md played
// against the five real services, with built-in stand-ins for GitHub and Slack
// (the fakes the tests use) and a stand-in agent harness. The host
// (cmd/the-loop) runs the services on an embedded JetStream server from the
// settings Env returns — their normal LOOP_* settings, nothing demo-specific —
// and Play acts the people and the agent: it writes to the stand-ins what a
// person would write on GitHub or Slack, and runs what the agent would run
// (`ask`, `graph complete`). Every effect it narrates — comments, Slack
// messages, issues, prompts — is produced by the services.
package demo

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/the-loop/bus/internal/testsupport/ghfake"
	"github.com/the-loop/bus/internal/testsupport/slackfake"
	"github.com/the-loop/bus/internal/testsupport/socketfake"
)

// The cast and the set.
const (
	Repo        = "acme/widgets"
	Channel     = "C0DEMO"
	LedgerLogin = "the-loop-bot"
	Person      = "alice"
	PersonSlack = "UALICE"
	// GitHubToken is the stand-in GitHub's token for the-loop: not a secret.
	GitHubToken = "ghp_demo_0000000000000000000000000000"
	// SlackToken is the stand-in Slack's bot token.
	SlackToken = slackfake.Token
	// Label arms a work item (the dispatcher's default auto-execute label).
	Label = "the-loop: auto-execute"
)

// Runners of the dispatcher's sessions (LOOP_DISPATCHER_RUNNER).
const (
	RunnerTmux    = "tmux"
	RunnerProcess = "process"
)

// Options shape a Stage.
type Options struct {
	// Dir holds the demo's files: store, workspace, agent records, logs.
	Dir string
	// Exe is the the-loop binary; the stand-in agent is `Exe demo agent`.
	Exe string
	// Runner is RunnerTmux or RunnerProcess; "" picks tmux when it is
	// installed.
	Runner string
	// AfterStep, if set, is called after each step (1-based) has settled,
	// before the next begins: a test looks at the system mid-story.
	AfterStep func(ctx context.Context, step int) error
}

// Stage is the stand-ins and the files of one demo.
type Stage struct {
	GitHub *ghfake.Server
	Slack  *slackfake.Server
	Socket *socketfake.Server

	dir, agentDir, workdir, runner, tmuxDir string
	secret                                  string
	webhookAddr                             string
	exe                                     string
	afterStep                               func(ctx context.Context, step int) error

	// relay is GitHub delivering webhooks: one at a time, in write order.
	relayMu sync.Mutex
	relays  sync.WaitGroup
	closing bool
	relayFn func()
	seq     int
	errs    []error
}

// NewStage starts the stand-ins and prepares the files.
func NewStage(o Options) (*Stage, error) {
	s := &Stage{dir: o.Dir, exe: o.Exe, runner: o.Runner, afterStep: o.AfterStep}
	if s.runner == "" {
		s.runner = RunnerProcess
		if _, err := exec.LookPath("tmux"); err == nil {
			s.runner = RunnerTmux
		}
	}
	s.agentDir = filepath.Join(o.Dir, "agent")
	s.workdir = filepath.Join(o.Dir, "workspace")
	for _, d := range []string{s.agentDir, s.workdir} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, fmt.Errorf("demo: %w", err)
		}
	}
	raw := make([]byte, 16)
	if _, err := rand.Read(raw); err != nil {
		return nil, fmt.Errorf("demo: %w", err)
	}
	s.secret = hex.EncodeToString(raw)
	s.tmuxDir = filepath.Join(o.Dir, "tmux")
	addr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	s.webhookAddr = addr
	if err := s.writeFiles(); err != nil {
		return nil, err
	}

	s.GitHub = ghfake.Start()
	s.GitHub.AddRepo(Repo)
	s.GitHub.AddToken(GitHubToken, LedgerLogin)
	s.GitHub.SetAuthorAssociation(Repo, Person, "OWNER")
	s.Slack = slackfake.Start(slackfake.WithChannels(Channel))
	s.Socket = socketfake.Start(socketfake.WithAPI(s.Slack.URL()))
	s.relayFn = s.GitHub.AfterWrite(s.relay)
	return s, nil
}

// freeAddr is a loopback address nobody listens on now, for ingress-github's
// webhook (the demo must know where to deliver).
func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("demo: find a free port: %w", err)
	}
	addr := ln.Addr().String()
	return addr, ln.Close()
}

// operatorConfig authorizes alice on GitHub and Slack and grants the demo
// channel everything: the same file an operator writes (docs/configuration.md).
const operatorConfig = `version: "0.7.0"
routing:
  authorizedUsers:
    - {github: alice, slack: UALICE, name: Alice}
  # The stand-in agent is no Claude Code: nothing to answer in its settings.
  harnessTrust: {enabled: false}
channels:
  ledger: github
  slack:
    enabled: true
    channel: C0DEMO
    read:
      mode: socket
    subscribe: [session.awaiting_input, comment.human, comment.agent, decision-pending, phase-approval-pending,
      pr-review-pending, conflict-escalated, work-item-complete]
    publish: [work-item.reply, gate.feedback, control.command, work-item.create]
    maxChars: 400
    kickoff:
      repo: acme/widgets
      labels: [the-loop]
`

func (s *Stage) configPath() string { return filepath.Join(s.dir, "the-loop.yaml") }
func (s *Stage) agentPath() string  { return filepath.Join(s.dir, "agent.sh") }

func (s *Stage) writeFiles() error {
	if err := os.WriteFile(s.configPath(), []byte(operatorConfig), 0o600); err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	// The harness binary the dispatcher runs: the stand-in agent, reached
	// through a script because a harness is one binary taking Claude Code's
	// argv.
	script := "#!/bin/sh\nexec " + shellQuote(s.exe) + " demo agent --dir " + shellQuote(s.agentDir) + " \"$@\"\n"
	if err := os.WriteFile(s.agentPath(), []byte(script), 0o700); err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	return nil
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// Env is the services' settings: the LOOP_* variables an operator would set,
// pointed at the stand-ins.
func (s *Stage) Env() map[string]string {
	return map[string]string{
		"LOOP_STORE_DIR":             filepath.Join(s.dir, "store"),
		"LOOP_NATS_LISTEN":           "127.0.0.1:0",
		"LOOP_ADMIN_ADDR":            "127.0.0.1:0",
		"LOOP_SESSION_ADDR":          "127.0.0.1:0",
		"LOOP_CONFIG":                s.configPath(),
		"LOOP_LOG_LEVEL":             "info",
		"LOOP_PARTITIONS":            "4",
		"LOOP_GITHUB_TOKEN":          GitHubToken,
		"LOOP_GITHUB_API_URL":        s.GitHub.URL(),
		"LOOP_GITHUB_LOGIN":          LedgerLogin,
		"LOOP_GITHUB_WEBHOOK_SECRET": s.secret,
		"LOOP_GITHUB_WEBHOOK_ADDR":   s.webhookAddr,
		"LOOP_SLACK_BOT_TOKEN":       slackfake.Token,
		"LOOP_SLACK_APP_TOKEN":       socketfake.AppToken,
		"LOOP_SLACK_API_URL":         s.Socket.URL(),
		// The stand-in has no rate limit; real Slack wants 1s.
		"LOOP_SLACK_POST_INTERVAL": "50ms",
		"LOOP_DISPATCHER_RUNNER":   s.runner,
		"LOOP_TMUX_DIR":            s.tmuxDir,
		"LOOP_HARNESS_BINARY":      s.agentPath(),
		"LOOP_DISPATCHER_WORKDIR":  s.workdir,
		// The stand-in GitHub serves no repositories: each work item gets
		// a directory of its own, without git.
		"LOOP_WORKSPACE_STRATEGY":       "dir",
		"LOOP_DISPATCHER_HOST":          "demo",
		"LOOP_DISPATCHER_SPAWN":         "labeled",
		"LOOP_GITHUB_WRITES_PER_MINUTE": "600",
	}
}

// Runner is the dispatcher's session runner for this demo.
func (s *Stage) Runner() string { return s.runner }

// TmuxSockets are the sockets of the sessions' tmux servers, one per
// session (RunnerTmux): `tmux -S SOCKET attach` watches one.
func (s *Stage) TmuxSockets() []string {
	entries, _ := os.ReadDir(s.tmuxDir)
	var out []string
	for _, e := range entries {
		if e.Type()&os.ModeSocket != 0 {
			out = append(out, filepath.Join(s.tmuxDir, e.Name()))
		}
	}
	return out
}

// AgentDir holds the stand-in agent's records.
func (s *Stage) AgentDir() string { return s.agentDir }

// WebhookURL is ingress-github's webhook endpoint.
func (s *Stage) WebhookURL() string { return "http://" + s.webhookAddr + "/gh-webhook" }

// WebhookSecret signs the stand-in GitHub's deliveries.
func (s *Stage) WebhookSecret() string { return s.secret }

// StopDeliveries stops GitHub's webhooks: the one in flight finishes, no
// other starts. Call it before the services stop.
func (s *Stage) StopDeliveries() {
	s.relayMu.Lock()
	s.closing = true
	s.relayMu.Unlock()
	s.relays.Wait()
	s.relayFn()
}

// Close stops the stand-ins and the tmux servers of the sessions.
func (s *Stage) Close() {
	s.StopDeliveries()
	s.Socket.Close()
	s.Slack.Close()
	s.GitHub.Close()
	if s.runner == RunnerTmux {
		for _, sock := range s.TmuxSockets() {
			_ = exec.Command("tmux", "-S", sock, "kill-server").Run()
		}
	}
}

// deliveryErrors are the webhooks GitHub could not deliver.
func (s *Stage) deliveryErrors() error {
	s.relayMu.Lock()
	defer s.relayMu.Unlock()
	return errors.Join(s.errs...)
}

// ---- GitHub: what a person does there, and the webhooks it sends ----

// relay delivers every comment or issue the ledger-writer writes to
// ingress-github as a signed webhook, as GitHub does, in write order.
func (s *Stage) relay(w ghfake.Write) {
	s.relayMu.Lock()
	if s.closing {
		s.relayMu.Unlock()
		return
	}
	s.relays.Add(1)
	s.relayMu.Unlock()
	go func() {
		defer s.relays.Done()
		s.relayMu.Lock()
		defer s.relayMu.Unlock()
		if s.closing {
			return
		}
		var err error
		switch w.Kind {
		case ghfake.WriteComment:
			if c, ok := s.GitHub.Comment(w.ID); ok {
				err = s.deliverLocked("issue_comment", s.GitHub.CommentWebhook(c))
			}
		case ghfake.WriteIssue:
			if is, ok := s.GitHub.Issue(w.Repo, w.IssueNumber); ok {
				err = s.deliverLocked("issues", s.GitHub.IssueWebhook("opened", is, w.Login, ""))
			}
		}
		if err != nil {
			s.errs = append(s.errs, err)
		}
	}()
}

func (s *Stage) deliverLocked(event string, body []byte) error {
	s.seq++
	req, err := http.NewRequest(http.MethodPost, s.WebhookURL(), bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-GitHub-Event", event)
	req.Header.Set("X-GitHub-Delivery", fmt.Sprintf("demo-%d-%d", time.Now().UnixNano(), s.seq))
	req.Header.Set("X-Hub-Signature-256", ghfake.SignWebhook(s.secret, body))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("webhook %s: %w", event, err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("webhook %s: ingress-github answered %s", event, resp.Status)
	}
	return nil
}

// deliver sends one webhook in order with the relay's.
func (s *Stage) deliver(event string, body []byte) error {
	s.relayMu.Lock()
	defer s.relayMu.Unlock()
	return s.deliverLocked(event, body)
}

// openIssue is a person opening an issue with the auto-execute label.
func (s *Stage) openIssue(title, body string) (ghfake.Issue, error) {
	is := s.GitHub.AddIssue(Repo, Person, title, body, Label)
	return is, s.deliver("issues", s.GitHub.IssueWebhook("labeled", is, Person, Label))
}

// comment is the person commenting on issue number on GitHub.
func (s *Stage) comment(number int, body string) error {
	c := s.GitHub.AddComment(Repo, number, Person, body)
	return s.deliver("issue_comment", s.GitHub.CommentWebhook(c))
}

// ---- Slack: what the person does there, over Socket Mode ----

// say is the person's Slack message: a reply in thread root, or top level
// when root is "". The stand-in keeps it in the channel's history, as Slack
// does, and delivers it to ingress-slack over Socket Mode; say returns once
// the envelope was acknowledged.
func (s *Stage) say(root, text string) (string, error) {
	ts := s.Slack.AddMessage(Channel, root, PersonSlack, text)
	id, err := s.Socket.SendEnvelope("events_api", socketfake.MessageEvent(Channel, PersonSlack, text, ts, root))
	if err != nil {
		return "", err
	}
	_, err = s.Socket.AwaitAck(id, 30*time.Second)
	return ts, err
}

// press is the person pressing a button (actionID, value) on message msg of
// thread root.
func (s *Stage) press(msg slackfake.Message, root, actionID, value string) error {
	p := socketfake.Press{Channel: Channel, User: PersonSlack, MessageTS: msg.TS, MessageUser: msg.User, MessageBotID: msg.BotID,
		Root: root, ActionID: actionID, Value: value}
	id, err := s.Socket.SendEnvelope("interactive", p.Payload())
	if err != nil {
		return err
	}
	_, err = s.Socket.AwaitAck(id, 30*time.Second)
	return err
}

// waitConnected waits for ingress-slack's Socket Mode connection.
func (s *Stage) waitConnected(ctx context.Context) error {
	d := 30 * time.Second
	if dl, ok := ctx.Deadline(); ok {
		d = time.Until(dl)
	}
	return s.Socket.AwaitConnected(1, d)
}
