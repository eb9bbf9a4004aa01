package envelope

import "strings"

// SelfMarker is the hidden marker the-loop stamps on every comment it authors
// as itself. Both ingress paths drop a comment carrying it before anything
// else reads the body, which is how a mirrored reply is processed once. The
// spelling is the original's, so both implementations can share a repository.
const SelfMarker = "<!-- the-loop:agent-comment -->"

// SelfAttribution is the visible line that precedes the marker.
const SelfAttribution = "🤖 _the-loop, autonomous comment_"

// HasSelfMarker reports whether body carries the self-authored marker.
func HasSelfMarker(body string) bool { return strings.Contains(body, SelfMarker) }

// MarkSelfAuthored appends the visible attribution and the marker to body. It
// is idempotent: a body that already carries the marker is returned as is.
func MarkSelfAuthored(body string) string {
	if HasSelfMarker(body) {
		return body
	}
	return strings.TrimRight(body, " \t\r\n") + "\n\n" + SelfAttribution + "\n" + SelfMarker + "\n"
}
