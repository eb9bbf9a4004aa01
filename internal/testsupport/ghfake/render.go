package ghfake

import (
	"encoding/base64"
	"fmt"
	"strconv"
	"time"
)

// htmlBase is where html_url values point: the web UI, not the API. Clients
// only show these to people, so they stay on github.com even though the API
// URLs point at the fake.
const htmlBase = "https://github.com/"

// nodeID builds a legacy GraphQL global id the way GitHub does for these
// objects: base64 of "<len(type)>:<type><id>", e.g. "MDU6SXNzdWUx" for
// Issue 1.
func nodeID(typ string, id int64) string {
	return base64.StdEncoding.EncodeToString(fmt.Appendf(nil, "%02d:%s%d", len(typ), typ, id))
}

func ts(t time.Time) string { return t.UTC().Format(time.RFC3339) }

// The JSON shapes below follow the schemas in
// testdata/github-rest/openapi.issues-comments-reactions.json, field for
// field in the order of the examples, so that a client decoding into
// go-github's types (or anything else) sees what GitHub sends.

type userJSON struct {
	Login             string `json:"login"`
	ID                int64  `json:"id"`
	NodeID            string `json:"node_id"`
	AvatarURL         string `json:"avatar_url"`
	GravatarID        string `json:"gravatar_id"`
	URL               string `json:"url"`
	HTMLURL           string `json:"html_url"`
	FollowersURL      string `json:"followers_url"`
	FollowingURL      string `json:"following_url"`
	GistsURL          string `json:"gists_url"`
	StarredURL        string `json:"starred_url"`
	SubscriptionsURL  string `json:"subscriptions_url"`
	OrganizationsURL  string `json:"organizations_url"`
	ReposURL          string `json:"repos_url"`
	EventsURL         string `json:"events_url"`
	ReceivedEventsURL string `json:"received_events_url"`
	Type              string `json:"type"`
	SiteAdmin         bool   `json:"site_admin"`
}

func renderUser(api string, u *user) userJSON {
	typ := "User"
	if len(u.login) > 5 && u.login[len(u.login)-5:] == "[bot]" {
		typ = "Bot"
	}
	base := api + "users/" + u.login
	return userJSON{
		Login:             u.login,
		ID:                u.id,
		NodeID:            nodeID("User", u.id),
		AvatarURL:         "https://avatars.githubusercontent.com/u/" + strconv.FormatInt(u.id, 10) + "?v=4",
		GravatarID:        "",
		URL:               base,
		HTMLURL:           htmlBase + u.login,
		FollowersURL:      base + "/followers",
		FollowingURL:      base + "/following{/other_user}",
		GistsURL:          base + "/gists{/gist_id}",
		StarredURL:        base + "/starred{/owner}{/repo}",
		SubscriptionsURL:  base + "/subscriptions",
		OrganizationsURL:  base + "/orgs",
		ReposURL:          base + "/repos",
		EventsURL:         base + "/events{/privacy}",
		ReceivedEventsURL: base + "/received_events",
		Type:              typ,
		SiteAdmin:         false,
	}
}

type labelJSON struct {
	ID          int64   `json:"id"`
	NodeID      string  `json:"node_id"`
	URL         string  `json:"url"`
	Name        string  `json:"name"`
	Description *string `json:"description"`
	Color       string  `json:"color"`
	Default     bool    `json:"default"`
}

type issueJSON struct {
	ID                int64       `json:"id"`
	NodeID            string      `json:"node_id"`
	URL               string      `json:"url"`
	RepositoryURL     string      `json:"repository_url"`
	LabelsURL         string      `json:"labels_url"`
	CommentsURL       string      `json:"comments_url"`
	EventsURL         string      `json:"events_url"`
	HTMLURL           string      `json:"html_url"`
	Number            int         `json:"number"`
	State             string      `json:"state"`
	Title             string      `json:"title"`
	Body              *string     `json:"body"`
	User              userJSON    `json:"user"`
	PinnedComment     any         `json:"pinned_comment"`
	Labels            []labelJSON `json:"labels"`
	Assignee          any         `json:"assignee"`
	Assignees         []userJSON  `json:"assignees"`
	Milestone         any         `json:"milestone"`
	Locked            bool        `json:"locked"`
	ActiveLockReason  *string     `json:"active_lock_reason"`
	Comments          int         `json:"comments"`
	ClosedAt          *string     `json:"closed_at"`
	CreatedAt         string      `json:"created_at"`
	UpdatedAt         string      `json:"updated_at"`
	ClosedBy          any         `json:"closed_by"`
	AuthorAssociation string      `json:"author_association"`
	StateReason       *string     `json:"state_reason"`
	// pull_request is left out: GitHub sends it only for pull requests,
	// and its presence is how clients tell the two apart.
}

func (s *Server) renderIssueLocked(api string, r *repo, is *Issue) issueJSON {
	url := fmt.Sprintf("%srepos/%s/issues/%d", api, r.name, is.Number)
	var body *string
	if is.Body != "" {
		body = &is.Body
	}
	labels := make([]labelJSON, 0, len(is.Labels))
	for _, l := range is.Labels {
		id := r.labels[l]
		labels = append(labels, labelJSON{
			ID:     id,
			NodeID: nodeID("Label", id),
			URL:    fmt.Sprintf("%srepos/%s/labels/%s", api, r.name, l),
			Name:   l,
			Color:  "ededed",
		})
	}
	return issueJSON{
		ID:                is.ID,
		NodeID:            is.NodeID,
		URL:               url,
		RepositoryURL:     api + "repos/" + r.name,
		LabelsURL:         url + "/labels{/name}",
		CommentsURL:       url + "/comments",
		EventsURL:         url + "/events",
		HTMLURL:           is.HTMLURL,
		Number:            is.Number,
		State:             is.State,
		Title:             is.Title,
		Body:              body,
		User:              renderUser(api, s.userLocked(is.Login)),
		Labels:            labels,
		Assignees:         []userJSON{},
		Comments:          is.Comments,
		CreatedAt:         ts(is.CreatedAt),
		UpdatedAt:         ts(is.UpdatedAt),
		AuthorAssociation: s.associationLocked(r, is.Login),
	}
}

type commentJSON struct {
	ID                int64    `json:"id"`
	NodeID            string   `json:"node_id"`
	URL               string   `json:"url"`
	HTMLURL           string   `json:"html_url"`
	Body              string   `json:"body"`
	User              userJSON `json:"user"`
	CreatedAt         string   `json:"created_at"`
	UpdatedAt         string   `json:"updated_at"`
	IssueURL          string   `json:"issue_url"`
	AuthorAssociation string   `json:"author_association"`
	Pin               any      `json:"pin"`
	Minimized         any      `json:"minimized"`
}

func (s *Server) renderCommentLocked(api string, c *Comment) commentJSON {
	return commentJSON{
		ID:                c.ID,
		NodeID:            c.NodeID,
		URL:               fmt.Sprintf("%srepos/%s/issues/comments/%d", api, c.Repo, c.ID),
		HTMLURL:           c.HTMLURL,
		Body:              c.Body,
		User:              renderUser(api, s.userLocked(c.Login)),
		CreatedAt:         ts(c.CreatedAt),
		UpdatedAt:         ts(c.UpdatedAt),
		IssueURL:          fmt.Sprintf("%srepos/%s/issues/%d", api, c.Repo, c.IssueNumber),
		AuthorAssociation: c.AuthorAssociation,
	}
}

type reactionJSON struct {
	ID        int64    `json:"id"`
	NodeID    string   `json:"node_id"`
	User      userJSON `json:"user"`
	Content   string   `json:"content"`
	CreatedAt string   `json:"created_at"`
}

func (s *Server) renderReactionLocked(api string, r *Reaction) reactionJSON {
	return reactionJSON{
		ID:        r.ID,
		NodeID:    nodeID("Reaction", r.ID),
		User:      renderUser(api, s.userLocked(r.Login)),
		Content:   r.Content,
		CreatedAt: ts(r.CreatedAt),
	}
}

// errorJSON is GitHub's basic-error, and validation-error when Errors is
// set.
type errorJSON struct {
	Message          string           `json:"message"`
	Errors           []fieldErrorJSON `json:"errors,omitempty"`
	DocumentationURL string           `json:"documentation_url"`
	Status           string           `json:"status,omitempty"`
}

type fieldErrorJSON struct {
	Resource string `json:"resource"`
	Field    string `json:"field"`
	Code     string `json:"code"`
	Message  string `json:"message,omitempty"`
}

type rateJSON struct {
	Limit     int   `json:"limit"`
	Used      int   `json:"used"`
	Remaining int   `json:"remaining"`
	Reset     int64 `json:"reset"`
}
