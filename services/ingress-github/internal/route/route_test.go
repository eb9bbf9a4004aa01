package route

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/the-loop/bus/pkg/identity"
)

func refsOf(t *testing.T, event, payload string) []string {
	t.Helper()
	p, err := Decode([]byte(payload))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, it := range ExtractWorkItems(event, p.o) {
		out = append(out, it.Ref.String())
	}
	return out
}

// TestExtractWorkItems pins docs/requirements.md K5: linked issues first
// (closing references, branch rule, keywords), then the PR; GHE hosts;
// keyword forms; the branch rule's unanchored quirk.
func TestExtractWorkItems(t *testing.T) {
	repo := `"repository":{"full_name":"octo/repo","html_url":"https://github.com/octo/repo"}`
	tests := []struct {
		name, event, payload string
		want                 []string
	}{
		{"issue", "issues", `{` + repo + `,"issue":{"number":15}}`, []string{"github:octo/repo#15"}},
		{"issue comment", "issue_comment", `{` + repo + `,"issue":{"number":15}}`, []string{"github:octo/repo#15"}},
		{"PR conversation comment: keywords in the PR body", "issue_comment",
			`{` + repo + `,"issue":{"number":16,"pull_request":{},"body":"Fixes: #15"}}`, []string{"github:octo/repo#15", "github:octo/repo#16"}},
		{"poll fallback: pull_request under issue_comment", "issue_comment",
			`{` + repo + `,"pull_request":{"number":16,"body":"closes #3"}}`, []string{"github:octo/repo#3", "github:octo/repo#16"}},
		{"closing references first, then branch, then keywords", "pull_request",
			`{` + repo + `,"pull_request":{"number":30,"head":{"ref":"feature/issue-7"},"body":"Resolves GH-8",
			"closingIssuesReferences":[{"number":9,"repository":{"nameWithOwner":"other/x"}},{"number":"bad"},{"number":10,"url":"https://github.com/a/b/issues/10"}]}}`,
			[]string{"github:other/x#9", "github:a/b#10", "github:octo/repo#7", "github:octo/repo#8", "github:octo/repo#30"}},
		{"keyword forms", "pull_request",
			`{` + repo + `,"pull_request":{"number":40,"body":"fix https://github.com/o2/r2/issues/1, Closes o3/r3#2, resolved GH-3, Fixes#4, fixed:  #5"}}`,
			[]string{"github:o2/r2#1", "github:o3/r3#2", "github:octo/repo#3", "github:octo/repo#5", "github:octo/repo#40"}},
		{"self reference skipped, case-insensitive", "pull_request",
			`{` + repo + `,"pull_request":{"number":41,"body":"closes OCTO/Repo#41 and closes #41"}}`, []string{"github:octo/repo#41"}},
		{"duplicate refs merged, first position wins", "pull_request",
			`{` + repo + `,"pull_request":{"number":42,"head":{"ref":"issue-5"},"body":"fixes #5"}}`, []string{"github:octo/repo#5", "github:octo/repo#42"}},
		{"branch rule is unanchored (quirk)", "pull_request",
			`{` + repo + `,"pull_request":{"number":43,"head":{"ref":"my-tissue-5"}}}`, []string{"github:octo/repo#5", "github:octo/repo#43"}},
		{"GHE host from repository.html_url", "issues",
			`{"repository":{"full_name":"octo/repo","html_url":"https://ghe.corp.example:8443/octo/repo"},"issue":{"number":1}}`,
			[]string{"github:ghe.corp.example:8443/octo/repo#1"}},
		{"host from issue.html_url when the repository has none", "issues",
			`{"repository":{"full_name":"octo/repo"},"issue":{"number":1,"html_url":"https://GHE.example/octo/repo/issues/1"}}`,
			[]string{"github:ghe.example/octo/repo#1"}},
		{"workflow_run: PRs then branch", "workflow_run",
			`{` + repo + `,"workflow_run":{"pull_requests":[{"number":2}],"head_branch":"claude/github-issue-15-x"}}`,
			[]string{"github:octo/repo#2", "github:octo/repo#15"}},
		{"check_run reads its suite", "check_run", `{` + repo + `,"check_run":{"check_suite":{"pull_requests":[{"number":3}]}}}`, []string{"github:octo/repo#3"}},
		{"status reads branches", "status", `{` + repo + `,"branches":[{"name":"issue/9"},{"name":"main"}]}`, []string{"github:octo/repo#9"}},
		{"no repository", "issues", `{"issue":{"number":1}}`, nil},
		{"bad repository", "issues", `{"repository":{"full_name":"justone"},"issue":{"number":1}}`, nil},
		{"unknown event", "push", `{` + repo + `}`, nil},
		{"non-integer number", "issues", `{` + repo + `,"issue":{"number":1.5}}`, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, refsOf(t, tc.event, tc.payload)); diff != "" {
				t.Errorf("refs (-want +got):\n%s", diff)
			}
		})
	}
}

func TestActor(t *testing.T) {
	p, _ := Decode([]byte(`{"comment":{"user":{"login":"c"}},"review":{"user":{"login":"r"}},"sender":{"login":"s"}}`))
	for event, want := range map[string]string{
		"issue_comment": "c", "pull_request_review_comment": "c", "pull_request_review": "r",
		"issues": "s", "pull_request": "s", "pull_request_review_thread": "s", "workflow_run": "", "status": "",
	} {
		if got := Actor(event, p.o); got != want {
			t.Errorf("Actor(%s) = %q, want %q", event, got, want)
		}
	}
}

func TestSecondaryIDBounded(t *testing.T) {
	long := "github:" + strings.Repeat("h", 150) + ".example/o/r#1"
	if id := SecondaryID("gh:abc", long); len(id) > 200 || !strings.HasPrefix(id, "gh:abc/") {
		t.Errorf("SecondaryID = %q", id)
	}
	if id := SecondaryID("gh:abc", "github:o/r#1"); id != "gh:abc/github:o/r#1" {
		t.Errorf("SecondaryID = %q", id)
	}
}

func TestLabelCarried(t *testing.T) {
	p, _ := Decode([]byte(`{"action":"labeled","label":{"name":"go"},"issue":{"labels":[{"name":"x"}]}}`))
	if !LabelCarried(p.o, "go") || !LabelCarried(p.o, "x") || LabelCarried(p.o, "Go") || LabelCarried(p.o, "") {
		t.Error("LabelCarried")
	}
}

func TestDecodeRejectsNonObjects(t *testing.T) {
	for _, in := range []string{`[]`, `"x"`, `1`, `null`, `{} x`, ``, `{"a":`} {
		if _, err := Decode([]byte(in)); err == nil {
			t.Errorf("Decode(%q) accepted", in)
		}
	}
	if _, err := Decode([]byte(` {"a":1} `)); err != nil {
		t.Errorf("Decode of an object with spaces: %v", err)
	}
}

// TestCommentCarriesWhatTheExcerptShows: the comment event carries every
// field of the comment the session's excerpt shows besides its body, URL
// and author — an inline comment's path and line, a review's state — so the
// dispatcher shows the excerpt of the delivery itself; a line GitHub sends
// as null (an outdated diff) stays absent.
func TestCommentCarriesWhatTheExcerptShows(t *testing.T) {
	dir, problems := identity.New([]identity.Person{{GitHub: "alice"}})
	if len(problems) > 0 {
		t.Fatal(problems)
	}
	pol := Policy{Directory: dir}
	repo := `"repository":{"full_name":"octo/repo","html_url":"https://github.com/octo/repo"},"pull_request":{"number":2}`
	tests := []struct {
		name, event, payload string
		path                 string
		line                 *int64
		state                string
	}{
		{"inline comment", "pull_request_review_comment", `{"action":"created",` + repo +
			`,"comment":{"id":5,"path":"README.md","line":265,"body":"More emoji here.","user":{"login":"alice"}}}`, "README.md", ptr(265), ""},
		{"comment on an outdated diff", "pull_request_review_comment", `{"action":"created",` + repo +
			`,"comment":{"id":6,"path":"main.go","line":null,"body":"Still?","user":{"login":"alice"}}}`, "main.go", nil, ""},
		{"review with a body", "pull_request_review", `{"action":"submitted",` + repo +
			`,"review":{"id":7,"state":"changes_requested","body":"Split it.","user":{"login":"alice"}}}`, "", nil, "changes_requested"},
		{"conversation comment", "issue_comment", `{"action":"created","repository":{"full_name":"octo/repo"},"issue":{"number":2}` +
			`,"comment":{"id":8,"body":"Thanks.","user":{"login":"alice"}}}`, "", nil, ""},
	}
	for _, tt := range tests {
		p, err := Decode([]byte(tt.payload))
		if err != nil {
			t.Fatal(err)
		}
		dec := Route(Delivery{Event: tt.event, DeliveryID: "d", Payload: []byte(tt.payload)}, p, pol)
		if len(dec.Events) != 1 || dec.Events[0].GetComment() == nil {
			t.Fatalf("%s: routed to %+v", tt.name, dec)
		}
		c := dec.Events[0].GetComment()
		if c.GetPath() != tt.path || c.GetReviewState() != tt.state || (c.Line == nil) != (tt.line == nil) ||
			tt.line != nil && c.GetLine() != *tt.line {
			t.Errorf("%s: path %q line %v state %q, want %q %v %q", tt.name, c.GetPath(), c.Line, c.GetReviewState(), tt.path, tt.line, tt.state)
		}
	}
}

func ptr(n int64) *int64 { return &n }
