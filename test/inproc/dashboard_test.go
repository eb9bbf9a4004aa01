package inproc

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/the-loop/bus/internal/hatch"
	"github.com/the-loop/bus/internal/statuspage"
	"github.com/the-loop/bus/internal/testsupport/bustest"
	"github.com/the-loop/bus/internal/testsupport/testkit"
	"github.com/the-loop/bus/pkg/bus"
	"github.com/the-loop/bus/pkg/redact"
	"github.com/the-loop/bus/pkg/sessions"
)

// browser is a headless Chromium on a page of the control plane.
type browser struct {
	t     *testing.T
	ctx   context.Context
	shots string
}

// openBrowser starts Debian's headless Chromium (.ci/run installs it) on
// url; the test is skipped without it, except in CI.
func openBrowser(t *testing.T, url string) *browser {
	t.Helper()
	exe := ""
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			exe = p
			break
		}
	}
	if exe == "" {
		if os.Getenv("CI") != "" {
			t.Fatal("chromium is not installed: .ci/run installs Debian's chromium for the browser tests")
		}
		t.Skip("chromium is not installed (apt-get install chromium)")
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:0:0],
		chromedp.ExecPath(exe), chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck, chromedp.Flag("disable-quic", true), chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true), chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(t.TempDir()), chromedp.WindowSize(430, 1400)) // a phone's width
	actx, c1 := chromedp.NewExecAllocator(context.Background(), opts...)
	bctx, c2 := chromedp.NewContext(actx)
	t.Cleanup(func() { c2(); c1() })
	if err := chromedp.Do(bctx, chromedp.Navigate(url)); err != nil {
		t.Fatalf("open %s: %v", url, err)
	}
	return &browser{t: t, ctx: bctx, shots: t.ArtifactDir()}
}

// press clicks the element sel selects from the page's own script: the
// page redraws on every update, so a node found through the browser's
// protocol may be gone by the time it is clicked.
func (b *browser) press(what, sel string) {
	b.t.Helper()
	b.await(what, fmt.Sprintf(`(() => { const e = document.querySelector(%q); if (!e) return false; e.click(); return true })()`, sel))
}

// await polls expr (a JavaScript expression) until it is true.
func (b *browser) await(what, expr string) {
	b.t.Helper()
	if _, err := chromedp.Run(b.ctx, chromedp.Poll[bool](expr, chromedp.WithPollingTimeout(wait), chromedp.WithPollingInterval(20*time.Millisecond))); err != nil {
		text, _ := chromedp.Run(b.ctx, chromedp.Evaluate[string](`document.body.innerText`))
		b.t.Fatalf("the page never showed %s (%v); it reads:\n%s", what, err, text)
	}
}

func (b *browser) run(actions ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, wait)
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		b.t.Fatal(err)
	}
}

func (b *browser) shoot(name string) {
	b.t.Helper()
	png, err := chromedp.Run(b.ctx, chromedp.FullScreenshot(100))
	if err != nil {
		b.t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(b.shots, name), png, 0o644); err != nil {
		b.t.Fatal(err)
	}
}

// attentionFor is true once the attention list shows a gate of ref.
func attentionFor(ref string) string {
	return fmt.Sprintf(`[...document.querySelectorAll("li.attention")].some(li => li.dataset.kind === "gate" && li.dataset.ref === %q)`, ref)
}

// TestDashboardInABrowser drives the control plane's dashboard in a
// headless Chromium at a phone's width, over a running loop: a pending
// gate appears in attention without the page being reloaded (it listens to
// the API's stream; how long it took is logged), the operator skips the
// agent's node from the work item's page with a reason, the record
// appears on GitHub naming the operator, and the page follows the move.
// Screenshots go to the test's artifact directory (go test -artifacts).
func TestDashboardInABrowser(t *testing.T) {
	w := newWorld(t)
	o := statuspage.Options{
		Conn: w.conn, Observer: w.srv.ConnectAs(t, bus.IdentityObserver, "dashboard-reads"), Config: w.cfg.Load,
		Topology: bustest.FastTopology(partitions), AdminToken: operateToken,
		Replay: w.conn, Operator: hatch.Operator{Conn: w.conn, Config: w.cfg.Load},
		Log:   slog.New(slog.NewTextHandler(io.Discard, nil)),
		Scrub: redact.New(redact.Options{Env: map[string]string{"LOOP_GITHUB_TOKEN": ghToken}}),
	}
	mux := http.NewServeMux()
	statuspage.Register(mux, o)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)

	b := openBrowser(t, srv.URL+"/dashboard")
	b.await("that nothing waits", `document.querySelector("#main .empty") !== null && document.getElementById("live").dataset.state === "live"`)
	loads := `performance.getEntriesByType("navigation").length`
	b.shoot("1-nothing-waits.png")

	number, r := w.start("the dashboard")
	b.await("the phase-selection gate in attention", attentionFor(r))
	b.shoot("2-phase-selection.png")

	// A person says execute; the agent's node follows, and the gate leaves
	// attention.
	w.comment(number, alice, "the-loop execute")
	w.waitNode(r, "requirements")
	b.await("attention empty again", `document.querySelectorAll("li.attention").length === 0`)

	// The operator skips the agent's node from the work item's page.
	b.run(chromedp.Navigate(srv.URL + "/dashboard#work-item/" + strings.ReplaceAll(r, "#", "%23")))
	b.await("the work item's graph at requirements", `(() => { const c = document.querySelector('#wi-graph li[aria-current="step"]'); return c && c.dataset.node === "requirements" })()`)
	b.run(chromedp.SendKeys(chromedp.ID("token"), operateToken), chromedp.Click(chromedp.ID("use-token")))
	b.await("the override form", `document.getElementById("override-reason") !== null`)
	const reason = "The issue already states the requirements."
	b.run(
		chromedp.SetValue(chromedp.ID("override-action"), "skip"),
		chromedp.SendKeys(chromedp.ID("override-reason"), reason),
		chromedp.SendKeys(chromedp.ID("override-as"), alice),
		chromedp.Click(chromedp.ID("override-submit")),
	)
	b.await("the request's result", `document.getElementById("override-result").textContent.startsWith("requested skip")`)
	result, err := chromedp.Run(b.ctx, chromedp.Evaluate[string](`document.getElementById("override-result").textContent`))
	if err != nil {
		t.Fatal(err)
	}
	_, rest, _ := strings.Cut(result, "(")
	id, _, _ := strings.Cut(rest, ")")
	rec := w.overrideRecord(number, id)
	if !strings.Contains(rec.Body, "graph **skip** by the operator, as `alice`") || !strings.Contains(rec.Body, reason) {
		t.Fatalf("the record of the dashboard's skip:\n%s", rec.Body)
	}
	w.waitNode(r, "requirements-approval")
	// Blur the form, so the page draws its update.
	if _, err := chromedp.Run(b.ctx, chromedp.Evaluate[bool](`(document.activeElement.blur(), true)`)); err != nil {
		t.Fatal(err)
	}
	b.await("the graph at the approval gate", `(() => { const c = document.querySelector('#wi-graph li[aria-current="step"]'); return c && c.dataset.node === "requirements-approval" })()`)
	b.shoot("3-skipped.png")

	// A reply typed in the page: recorded on GitHub naming the person,
	// typed into the session, and there in the transcript, live.
	const said = "Keep the dashboard usable on a phone."
	b.run(chromedp.SendKeys(chromedp.ID("reply-text"), said), chromedp.SendKeys(chromedp.ID("reply-as"), alice), chromedp.Click(chromedp.ID("reply-submit")))
	b.await("the reply's result", `document.getElementById("reply-result").textContent.startsWith("sent as alice")`)
	testkit.WaitWithin(t, wait, "the reply recorded on GitHub", func() bool {
		for _, cm := range w.gh.Comments(repo, number) {
			if cm.Login == ledgerLogin && strings.Contains(cm.Body, said) && strings.Contains(cm.Body, alice) {
				return true
			}
		}
		return false
	})
	testkit.WaitWithin(t, wait, "the reply typed into the session", func() bool {
		return slices.ContainsFunc(w.inputs(), func(in string) bool { return strings.Contains(in, said) })
	})
	b.await("the reply in the transcript", fmt.Sprintf(`(() => { const p = document.getElementById("transcript"); return p !== null && p.textContent.includes(%q) })()`, said))
	b.shoot("4-replied.png")

	// The sessions view: the operator, acting as alice, pauses the
	// session and resumes it, each recorded on the issue first.
	b.run(chromedp.Navigate(srv.URL+"/dashboard#sessions"), chromedp.SendKeys(chromedp.ID("acting-as"), alice), chromedp.Click(chromedp.ID("use-token")))
	b.await("the session's row", fmt.Sprintf(`document.querySelector('tr.session[data-ref=%q] button.pause') !== null`, r))
	b.press("pause pressed", fmt.Sprintf(`tr.session[data-ref=%q] button.pause`, r))
	b.await("the pause requested", `document.getElementById("session-result").textContent.startsWith("requested pause")`)
	testkit.WaitWithin(t, wait, "the session paused", func() bool { return w.session(r).Status == sessions.Paused })
	b.await("the row says paused", fmt.Sprintf(`(() => { const tr = document.querySelector('tr.session[data-ref=%q]'); return tr && tr.children[1].textContent === "paused" })()`, r))
	b.press("resume pressed", fmt.Sprintf(`tr.session[data-ref=%q] button.resume`, r))
	testkit.WaitWithin(t, wait, "the session resumed", func() bool { return w.session(r).Status == sessions.Active })
	b.shoot("5-sessions.png")

	// Back to attention: the approval gate is there, drawn from the
	// stream, the page never reloaded.
	b.run(chromedp.Navigate(srv.URL + "/dashboard#attention"))
	b.await("the approval gate in attention", attentionFor(r))
	w.comment(number, alice, "Changes requested: say who the users are.")
	w.waitNode(r, "requirements")
	b.await("attention empty after the changes requested", `document.querySelectorAll("li.attention").length === 0`)
	start := time.Now()
	w.writeArtifact(r, "requirements.md", "# Requirements\n\nThe users are the operators.\n")
	w.complete(r)
	b.await("the approval gate in attention again", attentionFor(r))
	t.Logf("a pending gate appeared in attention %s after the agent completed its node (graph move, event log record, stream, page update)", time.Since(start).Round(time.Millisecond))
	n, err := chromedp.Run(b.ctx, chromedp.Evaluate[int](loads))
	if err != nil || n != 1 {
		t.Fatalf("the page was loaded %d times (%v), want once: it updates in place", n, err)
	}
	b.shoot("6-approval-gate.png")
}
