// Package e2e is the multi-process end-to-end suite (`make e2e`, build tag
// e2e): it builds the-loop and nats-server, runs a real nats-server process
// (JetStream, sync_interval: always) and the five services as separate
// `the-loop serve <service>` processes — two replicas of ledger-writer,
// slack-renderer and dispatcher — against the GitHub and Slack fakes
// (internal/testsupport/ghfake and slackfake, in the test process, reached
// through LOOP_GITHUB_API_URL and LOOP_SLACK_API_URL) and a stand-in agent
// harness (this test binary, internal/testsupport/tmuxtest) in private tmux servers.
// It drives them only from the outside — signed webhooks, signed Slack
// events — and reads back what GitHub, Slack and the sessions received.
//
//   - TestEndToEnd: a few events through every path, each exactly once,
//     prompts in order, then every service drains on SIGTERM with exit 0.
//   - TestSessionSeesTheExcerpt: one delivery of every event type the loop
//     passes to sessions, GitHub's own examples, an oversized one among
//     them; each prompt carries exactly `the-loop excerpt` of its delivery.
//   - TestChaos: 1,000 events across 50 work items while a random service
//     process is SIGKILLed every few seconds and nats-server once; prints
//     sent/recorded/posted/prompted, lost and duplicated.
//   - TestChaosCluster: the chaos run on a three-node JetStream cluster
//     (routes on loopback, the same authorization, LOOP_STREAM_REPLICAS=3):
//     the server leading LOOP_INBOX is killed and restarted twice besides the
//     service kills; prints lost, duplicated, reordered and the longest stall.
//   - TestAttacks: ten attacks against the running system — from inside an
//     obedient agent session (the bus, the session endpoint, its secrets, a
//     scrubbed question), with the ledger's token (copied envelopes), from
//     Slack (a stale button), GitHub (a fork's CI, a flood, failures) and the
//     operator config — each refused; prints a summary line per attack
//     (docs/decisions/042-multi-process-attack-suite.md).
//   - BenchmarkEndToEnd: webhook → Slack latency and throughput, each with
//     a raw JetStream baseline of the same hops (see its doc comment).
//   - BenchmarkWebhookIntake: webhook intake of `the-loop up` at 1 and 8
//     senders and a sustained load, against raw JetStream on the same
//     server (see its doc comment).
//   - BenchmarkFootprint: `the-loop up`'s start to ready against a bare
//     nats-server's, each process's resident memory idle and under load,
//     and a soak (SOAK) whose growth per 100k events fails it beyond a
//     limit (see its doc comment).
//
// With the build tag compose too (`make compose-e2e`), TestCompose brings
// the repository's docker-compose.yml up on a local Docker engine and drives
// it the same way (docs/deploy.md).
//
// It needs tmux; without it the tests skip.
package e2e
