package catalog

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
)

// Subject prefixes (docs/architecture.md#streams-and-state). A publisher writes
// loop.in.<key>.<type>; the stream's subject transform stores it as
// loop.in.<p>.<key>.<type>, where p is the partition of <key>.
const (
	InboxPrefix  = "loop.in"
	EventsPrefix = "loop.ev"
	LogPrefix    = "loop.log"
	DLQPrefix    = "loop.dlq"
	// ServicePrefix is where request/reply endpoints answer:
	// loop.svc.<service>.<endpoint>. No stream captures it, so a request
	// is answered by the service or by nobody, never acknowledged by a
	// stream in its place.
	ServicePrefix = "loop.svc"
)

// DefaultPartitions is N, the number of partitions of the inbox and the event
// stream. Changing it remaps keys to partitions, so drain the inbox first.
const DefaultPartitions = 16

// maxKeyLen bounds a subject key; longer keys keep a readable prefix and a hash
// so that two long refs never share a key by truncation.
const maxKeyLen = 96

// SubjectKey turns a work-item ref (github:octo/repo#15) or a conversation ref
// (slack:C123/1700000000.000100) into one subject-safe token. It lowercases
// (GitHub owners and repositories are case-insensitive, and one work item must
// always land in one partition) and replaces every byte outside [a-z0-9_-]
// with '_'. The mapping is not injective, which is harmless: the key only picks
// a partition and a subject; the ref itself travels in ce-subject.
func SubjectKey(ref string) string {
	if ref == "" {
		return "_"
	}
	var b strings.Builder
	b.Grow(len(ref))
	for i := 0; i < len(ref); i++ {
		c := ref[i]
		switch {
		case c >= 'A' && c <= 'Z':
			b.WriteByte(c + ('a' - 'A'))
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9', c == '_', c == '-':
			b.WriteByte(c)
		default:
			b.WriteByte('_')
		}
	}
	k := b.String()
	if len(k) > maxKeyLen {
		sum := sha256.Sum256([]byte(ref))
		k = k[:maxKeyLen-17] + "_" + hex.EncodeToString(sum[:8])
	}
	return k
}

// InboxSubject is the subject a producer publishes an off-ledger event to.
func InboxSubject(ref string, t Type) string {
	return InboxPrefix + "." + SubjectKey(ref) + "." + string(t)
}

// EventsSubject is the subject the ledger-writer (or a trusted publisher of an
// on-ledger event) fans an event out on.
func EventsSubject(ref string, t Type) string {
	return EventsPrefix + "." + SubjectKey(ref) + "." + string(t)
}

// LogSubject is the subject an event-log record of a service is published on.
// logType is an event-log type such as "bus.recorded".
func LogSubject(service, logType string) string {
	return LogPrefix + "." + SubjectKey(service) + "." + logType
}

// ServiceSubject is the subject service's endpoint answers on, such as
// loop.svc.dispatcher.graph.status; endpoint may hold dots.
func ServiceSubject(service, endpoint string) string {
	return ServicePrefix + "." + SubjectKey(service) + "." + endpoint
}

// ParseSubject splits a stored subject, loop.{in,ev}.<p>.<key>.<type>, or a
// published one, loop.{in,ev}.<key>.<type>, into its parts. partitioned says
// which form s is in. ok is false when s is not an inbox or events subject or
// its type is not a well-formed name.
func ParseSubject(s string, partitioned bool) (prefix, partition, key string, t Type, ok bool) {
	var rest string
	switch {
	case strings.HasPrefix(s, InboxPrefix+"."):
		prefix, rest = InboxPrefix, s[len(InboxPrefix)+1:]
	case strings.HasPrefix(s, EventsPrefix+"."):
		prefix, rest = EventsPrefix, s[len(EventsPrefix)+1:]
	default:
		return "", "", "", "", false
	}
	if partitioned {
		i := strings.IndexByte(rest, '.')
		if i <= 0 {
			return "", "", "", "", false
		}
		partition, rest = rest[:i], rest[i+1:]
	}
	i := strings.IndexByte(rest, '.')
	if i <= 0 || i == len(rest)-1 {
		return "", "", "", "", false
	}
	return prefix, partition, rest[:i], Type(rest[i+1:]), true
}
