package ghfake

import (
	"bytes"
	"encoding/json"
	"slices"
)

// An issue's labels, as GitHub's REST API serves them (the labels
// endpoints of docs.github.com/rest/issues/labels): list them, add some
// (the answer is every label the issue then has), remove one (the answer is
// those left; a label the issue does not have is 404 "Label does not
// exist").

const (
	docListLabels  = "https://docs.github.com/rest/issues/labels#list-labels-for-an-issue"
	docAddLabels   = "https://docs.github.com/rest/issues/labels#add-labels-to-an-issue"
	docRemoveLabel = "https://docs.github.com/rest/issues/labels#remove-a-label-from-an-issue"
)

func (s *Server) labelsJSONLocked(api string, r *repo, is *Issue) []labelJSON {
	return s.renderIssueLocked(api, r, is).Labels
}

func (s *Server) listLabelsLocked(c *call, r *repo) *response {
	is, e := s.issueLocked(c, r, docListLabels)
	if e != nil {
		return e
	}
	return s.jsonResponse(200, s.labelsJSONLocked(c.api, r, is))
}

func (s *Server) addLabelsHTTPLocked(c *call, r *repo) *response {
	is, e := s.issueLocked(c, r, docAddLabels)
	if e != nil {
		return e
	}
	// GitHub takes {"labels": [...]} or the bare array.
	var in struct {
		Labels []string `json:"labels"`
	}
	if bytes.HasPrefix(bytes.TrimSpace(c.body), []byte("[")) {
		if json.Unmarshal(c.body, &in.Labels) != nil {
			return s.errorResponse(400, "Problems parsing JSON", docProblemsParsing)
		}
	} else if e := s.decode(c, &in); e != nil {
		return e
	}
	if len(in.Labels) == 0 || slices.Contains(in.Labels, "") {
		return s.validation(docAddLabels, "Label", "name", "invalid", "")
	}
	if e := s.secondaryLocked(c); e != nil {
		return e
	}
	s.addLabelsLocked(r, is, in.Labels)
	is.UpdatedAt = s.stamp()
	return s.wroteLocked(200, s.labelsJSONLocked(c.api, r, is), "",
		Write{Kind: WriteLabel, Repo: r.name, IssueNumber: is.Number, Login: c.login})
}

func (s *Server) removeLabelLocked(c *call, r *repo) *response {
	is, e := s.issueLocked(c, r, docRemoveLabel)
	if e != nil {
		return e
	}
	name := c.segs[6]
	i := slices.Index(is.Labels, name)
	if i < 0 {
		return s.errorResponse(404, "Label does not exist", docRemoveLabel)
	}
	if e := s.secondaryLocked(c); e != nil {
		return e
	}
	is.Labels = slices.Delete(is.Labels, i, i+1)
	is.UpdatedAt = s.stamp()
	return s.wroteLocked(200, s.labelsJSONLocked(c.api, r, is), "",
		Write{Kind: WriteLabel, Repo: r.name, IssueNumber: is.Number, Login: c.login})
}
