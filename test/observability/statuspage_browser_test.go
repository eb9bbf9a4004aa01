package observability

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/the-loop/bus/internal/demo"
	"github.com/the-loop/bus/internal/testsupport/testkit"
	"github.com/the-loop/bus/pkg/bus"
	"github.com/the-loop/bus/pkg/catalog"
	"github.com/the-loop/bus/pkg/envelope"
	loopv1 "github.com/the-loop/bus/proto/loop/v1"
)

// chromium is Debian's headless browser (packages chromium and
// chromium-driver; .ci/run installs them).
func chromium(t *testing.T) string {
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("CI") != "" {
		t.Fatal("chromium is not installed: .ci/run installs Debian's chromium for the status page's browser test")
	}
	t.Skip("chromium is not installed (apt-get install chromium chromium-driver)")
	return ""
}

// pageView is what the browser test reads of the status page's DOM.
type pageView struct {
	LoadedAt  float64 `json:"loadedAt"`
	Updates   int     `json:"updates"`
	Role      string  `json:"role"`
	WorkItems []struct {
		Ref       string   `json:"ref"`
		Current   string   `json:"current"`
		Highlight []string `json:"highlight"`
		Gate      string   `json:"gate"`
		WaitFor   string   `json:"waitFor"`
		Approvals []struct {
			Login string `json:"login"`
			Node  string `json:"node"`
			Href  string `json:"href"`
		} `json:"approvals"`
		Thread string `json:"thread"`
		Link   string `json:"link"`
	} `json:"workItems"`
	DeadLetters []struct {
		Seq    string `json:"seq"`
		Event  string `json:"event"`
		Reason string `json:"reason"`
		Replay bool   `json:"replay"`
	} `json:"deadLetters"`
	Consumers int `json:"consumers"`
	// Partitions is the summary the consumer rows fold under, and
	// whether they are unfolded.
	Partitions     string   `json:"partitions"`
	PartitionsOpen bool     `json:"partitionsOpen"`
	Location       string   `json:"location"`
	Readiness      string   `json:"readiness"`
	Events         []string `json:"events"`
	Text           string   `json:"text"`
}

// readPage reads the page's DOM: elements and attributes, not the HTML's
// text.
const readPage = `(() => {
  const q = (root, sel) => Array.from(root.querySelectorAll(sel));
  return {
    loadedAt: window.statusPageLoadedAt,
    updates: Number(document.getElementById("updated").dataset.updates || "0"),
    role: document.getElementById("role").textContent,
    workItems: q(document, "article.work-item").map(a => ({
      ref: a.dataset.ref,
      current: a.dataset.current,
      highlight: q(a, "ol.graph li.current").map(li => li.dataset.node),
      gate: (a.querySelector(".gate") || {dataset: {}}).dataset.node || "",
      waitFor: (a.querySelector(".gate .waiting-for") || {}).textContent || "",
      approvals: q(a, "li.approval").map(li => ({login: li.dataset.login, node: li.dataset.node,
        href: (li.querySelector("a.record") || {}).href || ""})),
      thread: (a.querySelector(".thread") || {dataset: {}}).dataset.ts || "",
      link: (a.querySelector("a.ref") || {}).href || "",
    })),
    deadLetters: q(document, "tr.dead-letter").map(tr => ({seq: tr.dataset.seq, event: tr.children[1].textContent,
      reason: tr.querySelector("td.reason").textContent, replay: !!tr.querySelector("button.replay")})),
    consumers: q(document, "tr.consumer").length,
    partitions: document.querySelector("#partitions > summary").textContent,
    partitionsOpen: document.getElementById("partitions").open,
    location: location.pathname,
    readiness: document.getElementById("readiness").innerText,
    events: q(document, "li.event").map(li => li.dataset.type),
    text: document.body.innerText,
  };
})()`

// demoLive is the running demo, as the test sees it mid-story.
type demoLive struct {
	adminAddr string
	conn      *bus.Conn
	stage     *demo.Stage
}

// TestStatusPageInABrowser opens the status page in headless Chromium
// against the demo's story — its stand-ins and script (internal/demo) with
// the five services of a `the-loop up` process configured from the stage's
// settings, as the demo runs them — and follows the story on it, by the
// page's DOM: the approval gate the work item waits at, approvedBy with the
// record's link after the approval, a dead letter injected mid-run, and
// the replay button that only the admin token brings. The page is loaded
// once: everything after is its own updates. Screenshots go to the test's
// artifact directory (go test -artifacts).
func TestStatusPageInABrowser(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the demo's services and a browser")
	}
	exe := chromium(t)
	shots := t.ArtifactDir()
	const adminToken = "status-admin-token-7f3c9a1e5b"

	var (
		bctx   context.Context
		cancel []context.CancelFunc
		first  pageView
	)
	defer func() {
		for i := len(cancel) - 1; i >= 0; i-- {
			cancel[i]()
		}
	}()
	view := func() (pageView, error) {
		return chromedp.Run(bctx, chromedp.Evaluate[pageView](readPage))
	}
	// await polls the DOM until ok holds.
	await := func(ctx context.Context, what string, ok func(pageView) bool) (pageView, error) {
		ctx, c := context.WithTimeout(ctx, 30*time.Second)
		defer c()
		for {
			v, err := view()
			if err == nil && ok(v) {
				return v, nil
			}
			select {
			case <-ctx.Done():
				return v, fmt.Errorf("the page never showed %s (last read: %v); it reads:\n%s", what, err, v.Text)
			case <-time.After(200 * time.Millisecond):
			}
		}
	}
	shoot := func(name string) error {
		png, err := chromedp.Run(bctx, chromedp.FullScreenshot(100))
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(shots, name), png, 0o644)
	}

	var gateRef string
	var forgedID string
	afterStep := func(ctx context.Context, step int, live demoLive) error {
		switch step {
		case 1:
			opts := append(chromedp.DefaultExecAllocatorOptions[:0:0],
				chromedp.ExecPath(exe), chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun,
				chromedp.NoDefaultBrowserCheck, chromedp.Flag("disable-quic", true), chromedp.Flag("disable-background-networking", true),
				chromedp.Flag("disable-component-update", true), chromedp.Flag("disable-sync", true),
				chromedp.UserDataDir(t.TempDir()), chromedp.WindowSize(1280, 1600))
			actx, c1 := chromedp.NewExecAllocator(context.Background(), opts...)
			cancel = append(cancel, c1)
			var c2 context.CancelFunc
			bctx, c2 = chromedp.NewContext(actx)
			cancel = append(cancel, c2)
			// The admin address alone: / redirects to the page.
			if err := chromedp.Do(bctx, chromedp.Navigate("http://"+live.adminAddr+"/")); err != nil {
				return fmt.Errorf("open the status page: %w", err)
			}
			v, err := await(ctx, "the work item and the bus", func(v pageView) bool { return len(v.WorkItems) == 1 && v.Consumers > 0 && len(v.Events) > 0 })
			if err != nil {
				return err
			}
			first = v
			if v.LoadedAt == 0 {
				return errors.New("the page's script did not run")
			}
			if v.Location != "/status" {
				return fmt.Errorf("/ led to %s, not to the status page", v.Location)
			}
			// The partition rows are folded under their sums.
			if v.PartitionsOpen || !strings.HasPrefix(v.Partitions, fmt.Sprintf("Consumers per partition: 3 services × %d partitions;", v.Consumers/3)) {
				return fmt.Errorf("the partitions' summary reads %q (open %v), want the %d rows folded under their count", v.Partitions, v.PartitionsOpen, v.Consumers)
			}
			if !strings.Contains(v.Readiness, "Readiness") {
				return fmt.Errorf("the page shows no readiness: %q", v.Readiness)
			}
			if !strings.HasPrefix(v.WorkItems[0].Link, "https://github.com/"+demo.Repo+"/issues/") {
				return fmt.Errorf("the work item links to %q, not to its issue on GitHub", v.WorkItems[0].Link)
			}
			return shoot("1-started.png")
		case 4:
			v, err := await(ctx, "the work item at its approval gate", func(v pageView) bool {
				return len(v.WorkItems) == 1 && v.WorkItems[0].Gate == "requirements-approval"
			})
			if err != nil {
				return err
			}
			w := v.WorkItems[0]
			gateRef = w.Ref
			if len(w.Highlight) != 1 || w.Highlight[0] != "requirements-approval" {
				return fmt.Errorf("highlighted nodes %v, want the gate requirements-approval", w.Highlight)
			}
			if !strings.Contains(w.WaitFor, demo.Person) {
				return fmt.Errorf("the gate waits for %q, want %s named", w.WaitFor, demo.Person)
			}
			if len(w.Approvals) != 0 {
				return fmt.Errorf("approvals before anyone approved: %+v", w.Approvals)
			}
			if w.Thread == "" {
				return errors.New("the bound Slack thread is not shown")
			}
			return shoot("2-approval-gate.png")
		case 5:
			v, err := await(ctx, "approvedBy after the approval", func(v pageView) bool {
				return len(v.WorkItems) == 1 && len(v.WorkItems[0].Approvals) > 0
			})
			if err != nil {
				return err
			}
			w := v.WorkItems[0]
			if w.Ref != gateRef || w.Gate == "requirements-approval" {
				return fmt.Errorf("after the approval: %s at gate %q", w.Ref, w.Gate)
			}
			a := w.Approvals[0]
			if a.Login != demo.Person || a.Node != "requirements-approval" {
				return fmt.Errorf("approvedBy %+v, want %s at requirements-approval", a, demo.Person)
			}
			// The record link is the ledger's comment on the stand-in GitHub.
			var record bool
			for _, is := range live.stage.GitHub.Issues(demo.Repo) {
				for _, c := range live.stage.GitHub.Comments(demo.Repo, is.Number) {
					record = record || (c.HTMLURL == a.Href && c.Login == demo.LedgerLogin)
				}
			}
			if !record {
				return fmt.Errorf("approvedBy's record link %q is not a ledger record on GitHub", a.Href)
			}
			if err := shoot("3-approved.png"); err != nil {
				return err
			}
			// A dead letter, injected while the page is open: a reply's
			// body under the control command's type.
			forgedID = "slack:EvStatusForged"
			ev := &loopv1.Event{Id: forgedID, Source: "slack", Type: string(catalog.WorkItemReply), Subject: "github:" + demo.Repo + "#99",
				Time: envelope.NewTime(time.Now()), Body: &loopv1.Event_Reply{Reply: &loopv1.Reply{Text: "the-loop stop"}}}
			m, err := envelope.ToMessage(ev, envelope.Inbox, "")
			if err != nil {
				return err
			}
			forged := bus.FromEnvelope(m)
			forged.Subject = catalog.InboxSubject(ev.Subject, catalog.ControlCommand)
			forged.Header[envelope.HeaderType] = []string{string(catalog.ControlCommand)}
			if _, err := live.conn.Publish(ctx, forged); err != nil {
				return fmt.Errorf("inject a dead letter: %w", err)
			}
			v, err = await(ctx, "the injected dead letter", func(v pageView) bool {
				for _, d := range v.DeadLetters {
					if d.Event == forgedID {
						return true
					}
				}
				return false
			})
			if err != nil {
				return err
			}
			for _, d := range v.DeadLetters {
				if d.Replay {
					return errors.New("a replay button without the admin token")
				}
				if d.Reason == "" {
					return fmt.Errorf("dead letter %s has no reason", d.Seq)
				}
			}
			if err := shoot("4-dead-letter.png"); err != nil {
				return err
			}
			// The admin token brings the button; pressing it replays.
			if err := chromedp.Do(bctx, chromedp.SendKeys(chromedp.ID("token"), adminToken), chromedp.Click(chromedp.ID("use-token"))); err != nil {
				return err
			}
			if _, err := await(ctx, "the replay button for the admin", func(v pageView) bool {
				return len(v.DeadLetters) > 0 && v.DeadLetters[0].Replay && strings.HasPrefix(v.Role, "admin")
			}); err != nil {
				return err
			}
			// Pressed from the page itself: the table is drawn again on every
			// update, so a node the browser's protocol found may be gone by
			// the time it is clicked ("Could not find node with given id").
			if _, err := chromedp.Run(bctx, chromedp.Poll[bool](`(() => { const b = document.querySelector("tr.dead-letter button.replay"); if (!b) return false; b.click(); return true })()`,
				chromedp.WithPollingTimeout(20*time.Second))); err != nil {
				return fmt.Errorf("press replay: %w", err)
			}
			if _, err := chromedp.Run(bctx, chromedp.Poll[bool](`document.getElementById("dlq-result").textContent.startsWith("replayed")`,
				chromedp.WithPollingTimeout(20*time.Second))); err != nil {
				return fmt.Errorf("the replay's result: %w", err)
			}
			result, err := chromedp.Run(bctx, chromedp.TextContent(chromedp.ID("dlq-result")))
			if err != nil {
				return err
			}
			if !strings.Contains(result, forgedID+":replay:") {
				return fmt.Errorf("replay result %q", result)
			}
			if err := shoot("5-replayed.png"); err != nil {
				return err
			}
			last, err := view()
			if err != nil {
				return err
			}
			// Loaded once, updated in place since.
			if last.LoadedAt != first.LoadedAt || last.Updates <= first.Updates {
				return fmt.Errorf("the page was reloaded or never updated: loaded at %v then %v, %d then %d updates",
					first.LoadedAt, last.LoadedAt, first.Updates, last.Updates)
			}
			for _, secret := range []string{adminToken, demo.GitHubToken, demo.SlackToken} {
				if strings.Contains(last.Text, secret) {
					t.Errorf("the page shows a secret (%.8s…)", secret)
				}
			}
		}
		return nil
	}

	var live demoLive
	stage, err := demo.NewStage(demo.Options{Dir: t.TempDir(), Exe: theLoopBinary(t), Runner: demo.RunnerProcess,
		AfterStep: func(ctx context.Context, step int) error { return afterStep(ctx, step, live) }})
	if err != nil {
		t.Fatal(err)
	}
	defer stage.Close()
	env := stage.Env()
	env["LOOP_ADMIN_TOKEN"] = adminToken
	// As the demo runs them: the stand-in agent lives in the stage's
	// directory beside the store, which up's default Landlock sandbox
	// (Linux) would rightly refuse to give a session.
	env["LOOP_SESSION_SANDBOX"] = "off"
	up := startUp(t, env)
	defer up.stop(t)
	// The stand-ins stop delivering before the services stop, as in the
	// demo.
	defer stage.StopDeliveries()
	admin := up.printed(t, "the admin address", adminRE)
	live.adminAddr = strings.TrimPrefix(admin, "http://")
	natsURL := up.printed(t, "the NATS address", natsRE)
	testkit.WaitWithin(t, 60*time.Second, "/readyz to answer 200", func() bool {
		resp, err := http.Get(admin + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	// The story plays the people and the stand-ins: it reads and writes as
	// the operator, whose identity up keeps in its store.
	ctx, stopCtx := context.WithCancel(context.Background())
	defer stopCtx()
	live.conn, err = bus.Connect(ctx, bus.Options{URL: natsURL, Name: "status-page-browser-test", Identity: bus.IdentityOperator,
		Credentials: bus.Credentials{SeedFile: filepath.Join(env["LOOP_STORE_DIR"], "nats", "operator.nk")}})
	if err != nil {
		t.Fatal(err)
	}
	defer live.conn.Close()
	live.stage = stage
	var out testkit.SyncBuffer
	if _, err := stage.Play(ctx, live.conn, &out); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	if gateRef == "" || forgedID == "" {
		t.Fatal("the story ended before the page was checked")
	}
	t.Logf("screenshots: %s", shots)
}
