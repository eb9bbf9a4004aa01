package excerpt

import (
	"bytes"
	"slices"
	"strconv"
	"sync"
)

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
// path and line precede its body (docs/requirements.md E1).
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
	w := works.Get().(*work)
	defer w.release()
	doc, isObject, err := parse(payload, &w.want)
	if err != nil {
		return Empty, err
	}
	if !isObject || len(doc) == 0 {
		return Empty, nil
	}
	d := w.distil(event)

	// JSON escaping inflates what a cap measured in code points renders as (a
	// body of newlines doubles, non-ASCII grows sixfold), so halve the cap
	// until the excerpt fits: the limit is met by shortening prose rather than
	// by cutting the document. The budget falls to zero in twelve steps.
	budget := TextMaxChars
	e := encoder{buf: w.buf[:0]}
	e.nodes(d, 0, budget)
	for len(e.buf) > ExcerptMaxChars && budget > 0 {
		budget /= 2
		e.buf = e.buf[:0]
		e.nodes(d, 0, budget)
	}
	w.buf = e.buf
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

// want is what the one pass over a payload keeps: the members called names
// of one object (vals, spans of the payload; nil when absent), and for some
// of them the members of their own value when it is an object (subs). The
// tree below says which; everything else is only validated.
type want struct {
	names []string
	vals  [][]byte
	subs  []*want // per name; nil: the value's members are not needed
}

// reset forgets what a previous pass kept.
func (w *want) reset() {
	clear(w.vals)
	for _, s := range w.subs {
		if s != nil {
			s.reset()
		}
	}
}

// index is the position of key (a string's raw content) in names, or -1.
func (w *want) index(key []byte) int {
	if bytes.IndexByte(key, '\\') < 0 {
		for k, name := range w.names {
			if string(key) == name {
				return k
			}
		}
		return -1
	}
	decoded := decodeKey(key)
	for k, name := range w.names {
		if decoded == name {
			return k
		}
	}
	return -1
}

// get is the value kept for name, and its members' want.
func (w *want) get(name string) ([]byte, *want) {
	for k, n := range w.names {
		if n == name {
			return w.vals[k], w.subs[k]
		}
	}
	return nil, nil
}

func newWant(names []string) *want {
	return &want{names: names, vals: make([][]byte, len(names)), subs: make([]*want, len(names))}
}

// newTopWant is the tree of what any event reads: the root fields, the
// sender's login, and every container's fields, its user's login and a
// check run's output.
func newTopWant() want {
	names := []string{"sender"}
	for _, fields := range rootFields {
		names = append(names, fields...)
	}
	for _, c := range containers {
		names = append(names, c.key)
	}
	top := newWant(names)
	top.subs[0] = newWant([]string{"login"})
	for _, c := range containers {
		fields := c.fields
		if c.authored {
			fields = append(fields[:len(fields):len(fields)], "user")
		}
		cw := newWant(fields)
		for k, f := range fields {
			switch f {
			case "user":
				cw.subs[k] = newWant([]string{"login"})
			case "output":
				cw.subs[k] = newWant(outputFields)
			}
		}
		top.subs[slices.Index(names, c.key)] = cw
	}
	return *top
}

// work is what one excerpt needs besides its result: what the pass kept,
// the distilled nodes and the rendering buffer, all of fixed size (the
// tables bound the nodes, renderLimit the rendering), kept in a pool. An
// excerpt allocates its result and nothing else, however large the payload;
// only a carried field that is itself an object (none of GitHub's is) costs
// a list of its members to render.
type work struct {
	want want
	top  [maxTop]node
	kids [maxKids]node
	buf  []byte
}

var works = sync.Pool{New: func() any {
	return &work{want: newTopWant(), buf: make([]byte, 0, renderLimit+renderSlack)}
}}

// release forgets the payload (the kept values and the nodes are spans of
// it) and returns w to the pool.
func (w *work) release() {
	w.want.reset()
	clear(w.top[:])
	clear(w.kids[:])
	works.Put(w)
}

// renderSlack is what one step of rendering may write past renderLimit
// before the encoder notices: a key with its indent, an escaped code point.
const renderSlack = 64

// maxTop and maxKids bound the distilled excerpt, as the tables fix it: at
// most the root fields, an actor and every container at the top; for each
// container its fields, its author, and two for a check run's output.
const (
	maxTop  = 16
	maxKids = 64
)

// distil selects what the excerpt carries from what the pass kept, in w's
// nodes. It does not depend on the text budget, so the halving loop renders
// the same selection again.
func (w *work) distil(event string) []node {
	top := &w.want
	out, pool := w.top[:0], w.kids[:]
	if fields, ok := rootFields[event]; ok {
		for _, name := range fields {
			v, _ := top.get(name)
			out = pickField(out, name, v)
		}
	}
	if actorEvent(event) {
		if actor, ok := senderLogin(top); ok {
			out = append(out, node{key: "actor", raw: actor})
		}
	}
	each := func(c container) {
		raw, cw := top.get(c.key)
		if raw == nil || raw[0] != '{' {
			// A missing, null or non-object container contributes
			// nothing: a shape the-loop has not seen must not cost an
			// authorized event its delivery.
			return
		}
		var n node
		var ok bool
		if n, pool, ok = distilContainer(c, cw, pool); ok {
			out = append(out, n)
		}
	}
	// An event with no rule of its own (an operator's extra routing event,
	// status, or the legacy no-event call) reads every container of the
	// table the payload carries as a key, whatever its value, so it is
	// distilled rather than dumped raw.
	if named, ok := eventContainers[event]; ok {
		for _, key := range named {
			each(containers[containerIndex[key]])
		}
	} else {
		for _, c := range containers {
			if v, _ := top.get(c.key); v != nil {
				each(c)
			}
		}
	}
	return out
}

// distilContainer distils container c from what the pass kept of its
// members (cw), into nodes from the front of pool, and returns the rest of
// pool. A container with none of its fields contributes nothing.
func distilContainer(c container, cw *want, pool []node) (node, []node, bool) {
	n := len(c.fields) + 1 // the fields and the author
	kids, sub, rest := pool[:0:n], pool[n:n+len(outputFields)], pool[n+len(outputFields):]
	for k, name := range c.fields {
		raw := cw.vals[k]
		if name == "output" && raw != nil && raw[0] == '{' {
			// A check run's output: an object distilled by the same rules.
			ow, out := cw.subs[k], sub[:0:len(outputFields)]
			for j, f := range outputFields {
				out = pickField(out, f, ow.vals[j])
			}
			kids = append(kids, node{key: name, raw: raw, isObj: true, kids: out})
			continue
		}
		kids = pickField(kids, name, raw)
	}
	if c.authored {
		if login, ok := authorLogin(cw.get("user")); ok {
			kids = append(kids, node{key: "author", raw: login})
		}
	}
	if len(kids) == 0 {
		return node{}, rest, false
	}
	return node{key: c.key, isObj: true, kids: kids}, rest, true
}

// pickField appends field name, whose value is raw (nil: absent), to d,
// unless it is absent or null: an explicit "line": null says nothing
// absence does not. Free text is marked to be capped.
func pickField(d []node, name string, raw []byte) []node {
	if raw == nil || raw[0] == 'n' {
		return d
	}
	return append(d, node{key: name, raw: raw, text: isText(name) && raw[0] == '"'})
}

// authorLogin is a container's user.login when user is an object and login a
// non-empty string: a bare login, never GitHub's user object.
func authorLogin(user []byte, uw *want) ([]byte, bool) {
	if user == nil || user[0] != '{' || uw == nil {
		return nil, false
	}
	login := uw.vals[0]
	if login == nil || login[0] != '"' || len(login) == 2 {
		return nil, false
	}
	return login, true
}

// senderLogin is router.event_actor for the actor events: the payload's
// sender.login, carried whatever its JSON type when it is truthy in Python's
// sense. A sender that is truthy but not an object made the original raise
// AttributeError; here it yields no actor.
func senderLogin(top *want) ([]byte, bool) {
	sender, sw := top.get("sender")
	if sender == nil || sender[0] != '{' {
		return nil, false
	}
	login := sw.vals[0]
	if login == nil || !truthy(login) {
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
