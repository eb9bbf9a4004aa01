// Package inproc is the in-process end-to-end suite (plain `go test`): the
// five services of the-loop on one real in-process JetStream, built as
// cmd/the-loop's host builds them, with the GitHub fake turned into a webhook
// sender (every write comes back to ingress-github as a signed webhook, as
// GitHub would deliver it), the Slack Web API fake behind the Socket Mode
// fake, and a private tmux server running the stand-in harness. It proves the
// five gaps of docs/requirements.md (R6.1–R6.5) and its ten abuse cases through
// the whole system: nothing of our own is mocked.
//
// It needs tmux (the tests skip without it) and is skipped by -short.
package inproc
