// Package observability holds the tests of what an operator watches, in a
// module of their own so that the product module does not carry their
// validators (docs/decisions/104-one-workspace-lean-product-module.md):
//
//   - TestDashboardAndAlerts loads deploy/observability's Grafana dashboard
//     and Prometheus alert rules with their tools' own Go libraries and
//     checks every metric they name against /metrics of a running `up`.
//   - TestStatusPageInABrowser follows the demo's story on the status page
//     in headless Chromium (Debian's chromium; .ci/run installs it).
//
// Both build the-loop from the workspace and run it as an operator would,
// `the-loop up`, so they exercise the binary rather than its internals.
package observability
