// Package excerpt distils a GitHub webhook payload into the short JSON text a
// session is shown about the event it just received: the $payload_excerpt of
// the event and spawn prompts (docs/requirements.md E1–E7, K11).
//
// It is a byte-identical port of the original the-loop's excerpt
// (docs/requirements.md E1–E7). The excerpt is a field allow-list per
// container, not a payload subset: a comment carries its path, line, body and
// html_url and its author's bare login; an issues or pull_request lifecycle
// event carries the acting login and the entity's number, title, state and URL;
// CI events carry their status. Nothing from sender, repository, user objects,
// reactions or API URLs reaches the text. Free text (body, description,
// summary) is capped per field at TextMaxChars, with TruncatedMarker inside the
// string, so the excerpt always stays parseable; the whole excerpt is held
// under ExcerptMaxChars by halving that cap.
//
// The output reproduces Python's json.dumps(indent=2): two-space indent, ": "
// between key and value, keys in emission order, every non-ASCII character
// escaped as \uXXXX (astral ones as surrogate pairs, lowercase hex), no HTML
// escaping, Python's int and float spelling. The payload is therefore read with
// a small scanner of its own rather than encoding/json, which would lose key
// order, lone surrogates and the distinction between 1 and 1.0.
//
// Nothing acts on an excerpt: every gate (authorization, control keywords,
// reactions, head ref) reads the full payload. The excerpt fails safe, costing
// context rather than delivery: Excerpt never panics, and any input yields a
// usable string.
//
// excerpt is pure: no I/O, no clock, no globals that change. It imports only the
// standard library and must not import any other package of this module.
package excerpt
