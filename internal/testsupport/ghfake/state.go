package ghfake

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Issue is a snapshot of an issue held by the fake.
type Issue struct {
	ID        int64
	NodeID    string
	Repo      string // "owner/name" as given to AddRepo
	Number    int
	Title     string
	Body      string
	Labels    []string
	State     string // "open"
	Login     string // author
	HTMLURL   string
	Comments  int // number of comments on the issue
	CreatedAt time.Time
	UpdatedAt time.Time
}

// Comment is a snapshot of an issue comment held by the fake.
type Comment struct {
	ID                int64
	NodeID            string
	Repo              string
	IssueNumber       int
	Body              string
	Login             string
	AuthorAssociation string
	HTMLURL           string
	CreatedAt         time.Time
	UpdatedAt         time.Time
}

// Reaction is a snapshot of a reaction held by the fake. CommentID is 0 for
// a reaction on the issue itself.
type Reaction struct {
	ID          int64
	Repo        string
	IssueNumber int
	CommentID   int64
	Login       string
	Content     string
	CreatedAt   time.Time
}

type user struct {
	id    int64
	login string
}

type repo struct {
	name   string // as given to AddRepo; used in every URL
	owner  string
	issues []*Issue // index number-1
	// comments per issue number, in creation order (ascending id), which is
	// the order GitHub lists them in.
	comments map[int][]*Comment
	labels   map[string]int64 // label name -> id, created on first use
}

// reactionKey identifies a reaction: GitHub keeps one reaction of each
// content per user per subject, and answers 200 for a repeat.
type reactionKey struct {
	repo      string
	number    int
	commentID int64
	login     string
	content   string
}

// state is everything the fake stores. Guarded by Server.mu.
type state struct {
	repos     map[string]*repo // key: lower-case "owner/name" (GitHub names are case-insensitive)
	tokens    map[string]string
	users     map[string]*user
	assoc     map[string]string // repoKey + "\x00" + login -> author_association
	comments  map[int64]*Comment
	reactions map[reactionKey]*Reaction
	reactList []*Reaction

	lastUserID     int64
	lastIssueID    int64
	lastCommentID  int64
	lastReactionID int64
	lastLabelID    int64
}

func newState() state {
	return state{
		repos:     map[string]*repo{},
		tokens:    map[string]string{},
		users:     map[string]*user{},
		assoc:     map[string]string{},
		comments:  map[int64]*Comment{},
		reactions: map[reactionKey]*Reaction{},
		// Start ids well away from 1 so a test that confuses an issue
		// number with a comment id fails instead of passing by accident.
		lastIssueID:    1_000_000,
		lastCommentID:  2_000_000_000,
		lastReactionID: 100_000,
		lastLabelID:    200_000,
	}
}

func repoKey(name string) string { return strings.ToLower(name) }

// AddRepo makes the repository "owner/name" exist. Requests naming any
// other repository get 404, as they would for a private repository the token
// cannot see.
func (s *Server) AddRepo(name string) {
	s.t.Helper()
	owner, _, ok := strings.Cut(name, "/")
	if !ok || owner == "" || strings.Count(name, "/") != 1 || strings.HasSuffix(name, "/") {
		s.t.Fatalf("ghfake: AddRepo(%q): want \"owner/name\"", name)
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.st.repos[repoKey(name)]; ok {
		return
	}
	s.st.repos[repoKey(name)] = &repo{
		name:     name,
		owner:    owner,
		comments: map[int][]*Comment{},
		labels:   map[string]int64{},
	}
}

// AddToken makes token authenticate as login ("Authorization: Bearer
// <token>" or "token <token>"). A login whose repository owner matches is
// OWNER of that repository; see SetAuthorAssociation for other roles.
func (s *Server) AddToken(token, login string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.st.tokens[token] = login
	s.userLocked(login)
}

// SetAuthorAssociation sets the author_association reported for comments
// and issues by login in repo (OWNER, MEMBER, COLLABORATOR, CONTRIBUTOR,
// NONE...). The default is OWNER for the repository owner and NONE for
// everyone else. It applies to comments created afterwards.
func (s *Server) SetAuthorAssociation(repo, login, association string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.st.assoc[repoKey(repo)+"\x00"+login] = association
}

// AddIssue creates an issue directly, bypassing HTTP, limits and hooks, and
// returns it. Use it to seed state for ingress tests.
func (s *Server) AddIssue(repo, login, title, body string, labels ...string) Issue {
	s.t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.st.repos[repoKey(repo)]
	if r == nil {
		s.t.Fatalf("ghfake: AddIssue: unknown repository %q (call AddRepo first)", repo)
		return Issue{}
	}
	is := s.createIssueLocked(r, login, title, body, labels)
	s.changedLocked()
	return cloneIssue(is)
}

// AddComment creates a comment directly, bypassing HTTP, limits and hooks,
// and returns it. Use it to seed human comments for ingress tests.
func (s *Server) AddComment(repo string, number int, login, body string) Comment {
	s.t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.st.repos[repoKey(repo)]
	if r == nil || number < 1 || number > len(r.issues) {
		s.t.Fatalf("ghfake: AddComment: no issue %s#%d", repo, number)
		return Comment{}
	}
	c := s.createCommentLocked(r, r.issues[number-1], login, body)
	s.changedLocked()
	return *c
}

func (s *Server) userLocked(login string) *user {
	u := s.st.users[login]
	if u == nil {
		s.st.lastUserID++
		u = &user{id: s.st.lastUserID, login: login}
		s.st.users[login] = u
	}
	return u
}

func (s *Server) associationLocked(r *repo, login string) string {
	if a, ok := s.st.assoc[repoKey(r.name)+"\x00"+login]; ok {
		return a
	}
	if strings.EqualFold(login, r.owner) {
		return "OWNER"
	}
	return "NONE"
}

// stamp is the current fake time at the precision GitHub reports (seconds),
// so that what a test reads back through the API and through the inspection
// methods agrees.
func (s *Server) stamp() time.Time {
	return s.clk.now().UTC().Truncate(time.Second)
}

func (s *Server) createIssueLocked(r *repo, login, title, body string, labels []string) *Issue {
	s.userLocked(login)
	s.st.lastIssueID++
	now := s.stamp()
	number := len(r.issues) + 1
	is := &Issue{
		ID:        s.st.lastIssueID,
		NodeID:    nodeID("Issue", s.st.lastIssueID),
		Repo:      r.name,
		Number:    number,
		Title:     title,
		Body:      body,
		State:     "open",
		Login:     login,
		HTMLURL:   fmt.Sprintf("%s%s/issues/%d", htmlBase, r.name, number),
		CreatedAt: now,
		UpdatedAt: now,
	}
	s.addLabelsLocked(r, is, labels)
	r.issues = append(r.issues, is)
	return is
}

// addLabelsLocked adds labels to is once each, skipping empty ones, and
// gives a label new to the repository its id.
func (s *Server) addLabelsLocked(r *repo, is *Issue, labels []string) {
	for _, l := range labels {
		if l == "" || slices.Contains(is.Labels, l) {
			continue
		}
		if _, ok := r.labels[l]; !ok {
			s.st.lastLabelID++
			r.labels[l] = s.st.lastLabelID
		}
		is.Labels = append(is.Labels, l)
	}
}

func (s *Server) createCommentLocked(r *repo, is *Issue, login, body string) *Comment {
	s.userLocked(login)
	s.st.lastCommentID++
	now := s.stamp()
	c := &Comment{
		ID:                s.st.lastCommentID,
		NodeID:            nodeID("IssueComment", s.st.lastCommentID),
		Repo:              r.name,
		IssueNumber:       is.Number,
		Body:              body,
		Login:             login,
		AuthorAssociation: s.associationLocked(r, login),
		HTMLURL:           fmt.Sprintf("%s%s/issues/%d#issuecomment-%d", htmlBase, r.name, is.Number, s.st.lastCommentID),
		CreatedAt:         now,
		UpdatedAt:         now,
	}
	r.comments[is.Number] = append(r.comments[is.Number], c)
	s.st.comments[c.ID] = c
	is.Comments++
	// GitHub bumps the issue's updated_at when a comment is added; pollers
	// that list issues by "since" rely on it.
	is.UpdatedAt = now
	return c
}

func cloneIssue(is *Issue) Issue {
	c := *is
	c.Labels = slices.Clone(is.Labels)
	return c
}

// Issues returns the issues of repo in number order.
func (s *Server) Issues(repo string) []Issue {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.st.repos[repoKey(repo)]
	if r == nil {
		return nil
	}
	out := make([]Issue, 0, len(r.issues))
	for _, is := range r.issues {
		out = append(out, cloneIssue(is))
	}
	return out
}

// Issue returns issue number of repo, if it exists.
func (s *Server) Issue(repo string, number int) (Issue, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.st.repos[repoKey(repo)]
	if r == nil || number < 1 || number > len(r.issues) {
		return Issue{}, false
	}
	return cloneIssue(r.issues[number-1]), true
}

// Comments returns the comments on issue number of repo in creation order.
func (s *Server) Comments(repo string, number int) []Comment {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.commentsLocked(repo, number)
}

func (s *Server) commentsLocked(repo string, number int) []Comment {
	r := s.st.repos[repoKey(repo)]
	if r == nil {
		return nil
	}
	out := make([]Comment, 0, len(r.comments[number]))
	for _, c := range r.comments[number] {
		out = append(out, *c)
	}
	return out
}

// Comment returns the comment with the given id, if it exists.
func (s *Server) Comment(id int64) (Comment, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.st.comments[id]
	if !ok {
		return Comment{}, false
	}
	return *c, true
}

// Reactions returns every reaction in repo in creation order.
func (s *Server) Reactions(repo string) []Reaction {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Reaction
	for _, r := range s.st.reactList {
		if strings.EqualFold(r.Repo, repo) {
			out = append(out, *r)
		}
	}
	return out
}

// Wait blocks until cond returns true or ctx is done. cond is evaluated once
// at the start and again after every change the fake sees (a request, a
// write, a seed), never while the fake holds its lock, so it may call the
// inspection methods.
func (s *Server) Wait(ctx context.Context, cond func() bool) error {
	for {
		s.mu.Lock()
		ch := s.changed
		s.mu.Unlock()
		if cond() {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("ghfake: wait: %w", ctx.Err())
		}
	}
}

// WaitForComments blocks until issue number of repo has at least count
// comments, then returns them in order. It fails only when ctx is done.
func (s *Server) WaitForComments(ctx context.Context, repo string, number, count int) ([]Comment, error) {
	var got []Comment
	err := s.Wait(ctx, func() bool {
		got = s.Comments(repo, number)
		return len(got) >= count
	})
	if err != nil {
		return got, fmt.Errorf("ghfake: %s#%d has %d comments, want %d: %w", repo, number, len(got), count, err)
	}
	return got, nil
}

// changedLocked wakes every Wait. Called with s.mu held.
func (s *Server) changedLocked() {
	close(s.changed)
	s.changed = make(chan struct{})
}
