package observability

import (
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/grafana/grafana-foundation-sdk/go/cog"
	"github.com/grafana/grafana-foundation-sdk/go/cog/plugins"
	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"

	"github.com/the-loop/bus/internal/testsupport/testkit"
)

const observabilityDir = "../../deploy/observability"

// upEnv is the environment of an `up` on free ports, its store and
// sessions' workdir in the test's temporary directories.
func upEnv(t *testing.T) map[string]string {
	t.Helper()
	return map[string]string{
		"LOOP_NATS_LISTEN": "127.0.0.1:0", "LOOP_ADMIN_ADDR": "127.0.0.1:0", "LOOP_SESSION_ADDR": "127.0.0.1:0",
		"LOOP_GITHUB_WEBHOOK_ADDR": "127.0.0.1:0", "LOOP_SLACK_EVENTS_ADDR": "127.0.0.1:0",
		"LOOP_STORE_DIR": filepath.Join(t.TempDir(), "store"), "LOOP_DISPATCHER_WORKDIR": t.TempDir(),
		"LOOP_DISPATCHER_RUNNER": "process", "HOME": t.TempDir(),
	}
}

// TestDashboardAndAlerts loads the Grafana dashboard and the Prometheus
// alert rules under deploy/ with their tools' own Go validators, and checks
// that every metric they name is exported on /metrics of a running `up`.
func TestDashboardAndAlerts(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the five services")
	}
	p := parser.NewParser(parser.Options{})
	var exprs []string

	groups, errs := rulefmt.ParseFile(filepath.Join(observabilityDir, "alerts.yaml"), false, model.UTF8Validation, p, slog.New(slog.NewTextHandler(io.Discard, nil)))
	for _, err := range errs {
		t.Errorf("alert rules: %v", err)
	}
	if groups == nil || len(groups.Groups) == 0 {
		t.Fatal("alert rules: no group")
	}
	for _, g := range groups.Groups {
		for _, r := range g.Rules {
			exprs = append(exprs, r.Expr)
		}
	}

	raw, err := os.ReadFile(filepath.Join(observabilityDir, "dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	plugins.RegisterDefaultPlugins()
	// The classic dashboard model, the JSON Grafana imports and provisions;
	// dashboardv2 is another schema, not its replacement for a file.
	//lint:ignore SA1019 see above
	var dash dashboard.Dashboard
	if err := sdkError(dash.UnmarshalJSONStrict(raw)); err != nil {
		t.Fatalf("dashboard: %v", err)
	}
	if err := sdkError(dash.Validate()); err != nil {
		t.Fatalf("dashboard: %v", err)
	}
	// The targets as Grafana stores them: every panel's PromQL.
	var doc struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	if len(doc.Panels) < 6 {
		t.Fatalf("dashboard has %d panels", len(doc.Panels))
	}
	for _, panel := range doc.Panels {
		if len(panel.Targets) == 0 {
			t.Errorf("panel %q queries nothing", panel.Title)
		}
		for _, tg := range panel.Targets {
			exprs = append(exprs, tg.Expr)
		}
	}

	named := map[string]bool{}
	for _, e := range exprs {
		expr, err := p.ParseExpr(e)
		if err != nil {
			t.Errorf("%q: %v", e, err)
			continue
		}
		parser.Inspect(expr, func(n parser.Node, _ []parser.Node) error {
			if vs, ok := n.(*parser.VectorSelector); ok {
				named[vs.Name] = true
			}
			return nil
		})
	}
	for _, want := range []string{"loop_build_info", "loop_dlq_depth", "loop_consumer_pending", "loop_consumer_redelivered", "loop_gate_wait_seconds_bucket"} {
		if !named[want] {
			t.Errorf("neither the dashboard nor the alerts use %s", want)
		}
	}

	exported := scrapeUp(t)
	for name := range named {
		if !exported[name] {
			t.Errorf("%s is named by the dashboard or the alerts but not exported on /metrics", name)
		}
	}
}

// sdkError is err, or nil for the SDK's empty list of build errors (which
// it returns as a non-nil error).
func sdkError(err error) error {
	var be cog.BuildErrors
	if errors.As(err, &be) && len(be) == 0 {
		return nil
	}
	return err
}

// scrapeUp runs `the-loop up` and returns the metric names its /metrics
// exports (histograms as their _bucket, _sum and _count series).
func scrapeUp(t *testing.T) map[string]bool {
	t.Helper()
	up := startUp(t, upEnv(t))
	admin := up.printed(t, "the admin address", adminRE)
	testkit.WaitWithin(t, 60*time.Second, "/readyz to cover every service", func() bool {
		resp, err := http.Get(admin + "/readyz")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		var r struct {
			Checks []string `json:"checks"`
		}
		return json.NewDecoder(resp.Body).Decode(&r) == nil && len(r.Checks) >= 6
	})
	names := map[string]bool{}
	testkit.WaitWithin(t, 30*time.Second, "the bus state on /metrics", func() bool {
		resp, err := http.Get(admin + "/metrics")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		tp := expfmt.NewTextParser(model.UTF8Validation)
		families, err := tp.TextToMetricFamilies(resp.Body)
		if err != nil {
			return false
		}
		for name, f := range families {
			names[name] = true
			if f.GetType().String() == "HISTOGRAM" {
				for _, s := range []string{"_bucket", "_sum", "_count"} {
					names[name+s] = true
				}
			}
		}
		return names["loop_consumer_pending"] && names["loop_dlq_depth"]
	})
	if !strings.Contains(up.out.String(), "what this run can do") {
		t.Errorf("up printed no checklist:\n%s", up.out.String())
	}
	return names
}
