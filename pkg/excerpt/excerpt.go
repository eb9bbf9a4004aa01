package excerpt

import "strconv"

const (
	// TextMaxChars caps each free-text field (a body, a description, a check
	// run's summary), in code points, before rendering. Only the field is cut,
	// so the excerpt stays parseable and the URL and anchor beside it survive.
	TextMaxChars = 3_500

	// ExcerptMaxChars bounds the whole rendered excerpt. Excerpt halves the
	// per-field cap until the text fits; only a structure with no free text
	// left to shorten (a pathological title or label) reaches the hard cut.
	ExcerptMaxChars = 4_000

	// TruncatedMarker follows the kept part of a truncated value: inside the
	// JSON string for a capped field, after a newline for the hard cut.
	TruncatedMarker = "… (truncated)"

	// Empty is the excerpt of a payload in which nothing is recognised, of a
	// payload that is not a JSON object, and of a malformed payload.
	Empty = "{}"
)

// container is one allow-listed payload object and the fields it carries, in
// emission order. Order is a guarantee, not cosmetics: an inline comment's
// path and line precede its body (issue-246).
type container struct {
	key    string
	fields []string
	// authored containers carry author = user.login. An issue's or pull
	// request's user is whoever opened it, not who acted, so those carry
	// nothing and the lifecycle actor goes to the top level instead.
	authored bool
}

// containers is the table, in the order an event with no rule of its own
// reads it.
var containers = []container{
	{key: "comment", fields: []string{"path", "line", "body", "html_url"}, authored: true},
	{key: "review", fields: []string{"state", "body", "html_url"}, authored: true},
	{key: "issue", fields: []string{"number", "title", "state", "html_url"}},
	{key: "pull_request", fields: []string{"number", "title", "state", "draft", "merged", "html_url"}},
	{key: "label", fields: []string{"name"}},
	{key: "workflow_run", fields: []string{"name", "event", "status", "conclusion", "head_branch", "html_url"}},
	{key: "check_run", fields: []string{"name", "status", "conclusion", "output", "html_url", "details_url"}},
	{key: "check_suite", fields: []string{"status", "conclusion", "head_branch", "head_sha"}},
}

// containerIndex maps a container key to its row of containers.
var containerIndex = func() map[string]int {
	m := make(map[string]int, len(containers))
	for i, c := range containers {
		m[c.key] = i
	}
	return m
}()

// eventContainers names the containers each known event is about. An
// issue_comment drops the issue: the comment's URL names it. CI events never
// read pull_request: GitHub's pull_requests entries there carry only numbers
// and API URLs.
var eventContainers = map[string][]string{
	"issue_comment":               {"comment"},
	"pull_request_review_comment": {"comment"},
	"pull_request_review":         {"review"},
	"issues":                      {"issue", "label"},
	"pull_request":                {"pull_request", "label"},
	"pull_request_review_thread":  {"pull_request"},
	"workflow_run":                {"workflow_run"},
	"check_run":                   {"check_run"},
	"check_suite":                 {"check_suite"},
}

// rootFields lists, for events whose data sits at the payload root, the root
// fields carried.
var rootFields = map[string][]string{
	"status": {"state", "context", "description", "target_url"},
}

// outputFields are the fields of a check run's output, an object distilled by
// the same rules as a container.
var outputFields = []string{"title", "summary"}

// isText reports whether a field is free text an untrusted actor wrote, and so
// capped. Titles are not: they are short by GitHub's own limits.
func isText(name string) bool {
	return name == "body" || name == "description" || name == "summary"
}

// actorEvents carry a top-level actor: the sender, the one who took the
// lifecycle action, as router.event_actor defines it for these events.
func actorEvent(event string) bool {
	return event == "issues" || event == "pull_request" || event == "pull_request_review_thread"
}

// node is one key of the distilled excerpt: either a span of the payload
// (raw, capped when text is set) or an object the distiller built (kids).
type node struct {
	key   string
	raw   []byte
	text  bool
	isObj bool
	kids  []node
}

// Excerpt returns the distilled, JSON-formatted summary of a webhook delivery
// of event (the X-GitHub-Event value) with the raw payload body, byte for byte
// what the-loop's Python event_excerpt returns for the same delivery.
//
// Excerpt is total. A payload that is valid JSON but not an object, or in which
// nothing is recognised, gives Empty and a nil error. A malformed payload gives
// Empty and an error wrapping ErrMalformed; Empty is still a correct excerpt to
// show, so a caller that only renders a prompt may ignore the error.
//
// The result is an ASCII-only JSON object of at most ExcerptMaxChars bytes,
// with two exceptions kept for byte-identity with the original. The hard-cut
// form, reached only when no capped text is left to shorten (a 5,000-character
// title), is the first ExcerptMaxChars bytes of the rendering, a newline and
// TruncatedMarker: not JSON. And a carried float literal beyond float64 range
// (1e400) is written as Python writes inf, the bare word Infinity.
//
// One deliberate difference: for issues, pull_request and
// pull_request_review_thread, a sender that is truthy but not an object made
// the original raise; here it yields no actor and the rest of the excerpt.
func Excerpt(event string, payload []byte) (string, error) {
	top, isObject, err := parse(payload)
	if err != nil {
		return Empty, err
	}
	if !isObject {
		return Empty, nil
	}
	d := distil(event, top)

	// JSON escaping inflates what a cap measured in code points renders as (a
	// body of newlines doubles, non-ASCII grows sixfold), so halve the cap
	// until the excerpt fits: the limit is met by shortening prose rather than
	// by cutting the document. The budget falls to zero in twelve steps.
	budget := TextMaxChars
	e := encoder{buf: make([]byte, 0, 1024)}
	e.nodes(d, 0, budget)
	for len(e.buf) > ExcerptMaxChars && budget > 0 {
		budget /= 2
		e.buf = e.buf[:0]
		e.nodes(d, 0, budget)
	}
	if len(e.buf) > ExcerptMaxChars {
		return string(e.buf[:ExcerptMaxChars]) + "\n" + TruncatedMarker, nil
	}
	return string(e.buf), nil
}

// PayloadExcerpt distils a payload without an event name, reading every
// container it carries; the legacy payload_excerpt(payload) alias.
func PayloadExcerpt(payload []byte) (string, error) {
	return Excerpt("", payload)
}

// distil selects what the excerpt carries. It does not depend on the text
// budget, so the halving loop renders the same selection again.
func distil(event string, top []member) []node {
	var d []node
	if fields, ok := rootFields[event]; ok {
		d = pick(d, top, fields)
	}
	if actorEvent(event) {
		if actor, ok := senderLogin(top); ok {
			d = append(d, node{key: "actor", raw: actor})
		}
	}
	for _, c := range containersFor(event, top) {
		if n, ok := distilContainer(top, c); ok {
			d = append(d, n)
		}
	}
	return d
}

// containersFor lists the containers event reads, in excerpt order. An event
// with no rule of its own (an operator's extra routing event, status, or the
// legacy no-event call) reads every container of the table the payload carries
// as a key, whatever its value, so it is distilled rather than dumped raw.
func containersFor(event string, top []member) []container {
	var out []container
	if named, ok := eventContainers[event]; ok {
		for _, key := range named {
			out = append(out, containers[containerIndex[key]])
		}
		return out
	}
	for _, c := range containers {
		if _, present := get(top, c.key); present {
			out = append(out, c)
		}
	}
	return out
}

// distilContainer distils container c of the payload. A missing, null or
// non-object container, or one with none of its fields, contributes nothing: a
// shape the-loop has not seen must not cost an authorized event its delivery.
func distilContainer(top []member, c container) (node, bool) {
	raw, ok := get(top, c.key)
	if !ok || raw[0] != '{' {
		return node{}, false
	}
	ms := members(raw)
	kids := pick(nil, ms, c.fields)
	if c.authored {
		if login, ok := authorLogin(ms); ok {
			kids = append(kids, node{key: "author", raw: login})
		}
	}
	if len(kids) == 0 {
		return node{}, false
	}
	return node{key: c.key, isObj: true, kids: kids}, true
}

// pick appends fields of ms to d, in order, skipping any that is absent or
// null: an explicit "line": null says nothing absence does not.
func pick(d []node, ms []member, fields []string) []node {
	for _, name := range fields {
		raw, ok := get(ms, name)
		if !ok || raw[0] == 'n' {
			continue
		}
		n := node{key: name, raw: raw}
		switch {
		case isText(name) && raw[0] == '"':
			n.text = true
		case name == "output" && raw[0] == '{':
			n.isObj = true
			n.kids = pick(nil, members(raw), outputFields)
		}
		d = append(d, n)
	}
	return d
}

// authorLogin is a container's user.login when user is an object and login a
// non-empty string: a bare login, never GitHub's user object.
func authorLogin(ms []member) ([]byte, bool) {
	user, ok := get(ms, "user")
	if !ok || user[0] != '{' {
		return nil, false
	}
	login, ok := get(members(user), "login")
	if !ok || login[0] != '"' || len(login) == 2 {
		return nil, false
	}
	return login, true
}

// senderLogin is router.event_actor for the actor events: the payload's
// sender.login, carried whatever its JSON type when it is truthy in Python's
// sense. A sender that is truthy but not an object made the original raise
// AttributeError; here it yields no actor.
func senderLogin(top []member) ([]byte, bool) {
	sender, ok := get(top, "sender")
	if !ok || sender[0] != '{' {
		return nil, false
	}
	login, ok := get(members(sender), "login")
	if !ok || !truthy(login) {
		return nil, false
	}
	return login, true
}

// truthy is Python's truth value of what json.loads makes of raw.
func truthy(raw []byte) bool {
	switch raw[0] {
	case 'n', 'f':
		return false
	case 't':
		return true
	case '"':
		return len(raw) > 2
	case '{', '[':
		s := scanner{data: raw}
		return raw[s.ws(1)] != raw[0]+2 // '{'+2 == '}', '['+2 == ']'
	default:
		// int or float alike: zero, or a float that underflows to zero.
		f, _ := strconv.ParseFloat(string(raw), 64)
		return f != 0
	}
}
