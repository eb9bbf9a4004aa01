// Package identity answers "who is this, and may they act here?" for every
// channel from one list: the entries of routing.authorizedUsers
// (docs/requirements.md R5, docs/architecture.md#trust-boundaries). Each entry
// is one person with their native id on each channel they use; a message is
// attributed by looking its channel-native id up here, never by anything the
// message says about itself (abuse case 8).
//
// The package is pure: no I/O, no logging, and it must not import pkg/config
// (config builds a Directory from the YAML; the dependency runs one way).
package identity

import (
	"fmt"
	"slices"
	"strings"
)

// Channel names a channel whose members can be named in an entry. The values
// are the keys an entry mapping uses in the operator YAML.
type Channel string

// The channels an entry may name today (R5.1). Adding one means adding a
// field to Person and a case to Person.ID, Channels and the matching rule in
// sameID.
const (
	ChannelGitHub Channel = "github"
	ChannelSlack  Channel = "slack"
)

// Channels lists every channel an entry may name, in the order entries are
// printed.
func Channels() []Channel { return []Channel{ChannelGitHub, ChannelSlack} }

// KnownChannel reports whether ch is a channel an entry may name.
func KnownChannel(ch Channel) bool { return slices.Contains(Channels(), ch) }

// Person is one routing.authorizedUsers entry: the person's native id on each
// channel they are named on, plus an optional display name. An empty id means
// the person is not named on that channel and so may not act there (R5.5).
type Person struct {
	GitHub string // GitHub login, compared case-insensitively
	Slack  string // Slack member id (U…/W…), compared exactly
	Name   string // display name; never used to match anyone
}

// ID returns p's id on ch, or "" when p is not named on ch.
func (p Person) ID(ch Channel) string {
	switch ch {
	case ChannelGitHub:
		return p.GitHub
	case ChannelSlack:
		return p.Slack
	}
	return ""
}

// IDs returns every id p declares, keyed by channel. The ledger's envelope
// carries all of them so a record reads as one person, not one member id
// (R5.4).
func (p Person) IDs() map[Channel]string {
	out := make(map[Channel]string, 2)
	for _, ch := range Channels() {
		if id := p.ID(ch); id != "" {
			out[ch] = id
		}
	}
	return out
}

// ActsOn reports whether p may act on ch at all: only channels p is named on.
// A person without a GitHub login therefore never passes anything that reads
// GitHub logins — gates, control, the router (R5.2, R5.5, decision 015).
func (p Person) ActsOn(ch Channel) bool { return p.ID(ch) != "" }

// String names p for logs and messages: ids only, which are not secret.
func (p Person) String() string {
	var parts []string
	for _, ch := range Channels() {
		if id := p.ID(ch); id != "" {
			parts = append(parts, string(ch)+":"+id)
		}
	}
	s := strings.Join(parts, " ")
	if p.Name != "" {
		s = fmt.Sprintf("%s (%s)", p.Name, s)
	}
	return s
}

// sameID reports whether two ids on ch name the same member. GitHub logins are
// case-insensitive on GitHub itself, so "Octocat" and "octocat" are one
// person; Slack member ids are opaque and compared exactly.
func sameID(ch Channel, a, b string) bool {
	if a == "" || b == "" {
		return false
	}
	if ch == ChannelGitHub {
		return strings.EqualFold(a, b)
	}
	return a == b
}

// Directory is the set of authorized people, looked up by any channel's
// native id. The zero value and a nil *Directory are empty and authorize
// nobody (fail closed). A Directory is immutable and safe for concurrent use.
type Directory struct {
	people []Person
}

// EntryError says why New left an entry out. Index is the entry's position
// in the slice given to New; Clash is the position of the earlier entry that
// holds the same id, or -1.
type EntryError struct {
	Index  int
	Clash  int
	Reason string
}

func (e *EntryError) Error() string {
	if e.Clash >= 0 {
		return fmt.Sprintf("entry %d: %s (entry %d)", e.Index, e.Reason, e.Clash)
	}
	return fmt.Sprintf("entry %d: %s", e.Index, e.Reason)
}

// New builds a Directory from entries in order. An entry that names no channel
// id, or claims an id an earlier entry already holds, is left out: an id that
// belongs to two people would make the actor of a message ambiguous, and the
// first entry is the one the operator wrote first. Each entry left out yields
// one EntryError for the caller to report; the Directory is usable either way.
func New(entries []Person) (*Directory, []*EntryError) {
	d := &Directory{}
	var origin []int // entries index of each kept person
	var problems []*EntryError
	for i, p := range entries {
		if len(p.IDs()) == 0 {
			problems = append(problems, &EntryError{i, -1, "names no channel id, so it authorizes nobody"})
			continue
		}
		if clash, ch, ok := d.claimed(p); ok {
			problems = append(problems, &EntryError{i, origin[clash], fmt.Sprintf("its %s id %q already belongs to %s, and one id must name one person",
				ch, p.ID(ch), d.people[clash])})
			continue
		}
		d.people = append(d.people, p)
		origin = append(origin, i)
	}
	return d, problems
}

// claimed finds an earlier person holding one of p's ids.
func (d *Directory) claimed(p Person) (index int, ch Channel, ok bool) {
	for _, ch := range Channels() {
		id := p.ID(ch)
		if id == "" {
			continue
		}
		for i, q := range d.people {
			if sameID(ch, q.ID(ch), id) {
				return i, ch, true
			}
		}
	}
	return 0, "", false
}

// Len returns the number of people.
func (d *Directory) Len() int {
	if d == nil {
		return 0
	}
	return len(d.people)
}

// People returns a copy of every person, in entry order.
func (d *Directory) People() []Person {
	if d == nil {
		return nil
	}
	return slices.Clone(d.people)
}

// ByChannel returns the person whose id on ch is id. GitHub logins match
// case-insensitively, Slack ids exactly. An empty id or an unknown channel
// matches nobody.
func (d *Directory) ByChannel(ch Channel, id string) (Person, bool) {
	if d == nil || id == "" {
		return Person{}, false
	}
	for _, p := range d.people {
		if sameID(ch, p.ID(ch), id) {
			return p, true
		}
	}
	return Person{}, false
}

// Authorized reports whether the member id on ch belongs to an authorized
// person. It is false for an empty directory, an empty id and an unknown
// channel: every doubt denies.
func (d *Directory) Authorized(ch Channel, id string) bool {
	_, ok := d.ByChannel(ch, id)
	return ok
}

// IDs returns the ids every person declares on ch, in entry order, skipping
// people not named there.
func (d *Directory) IDs(ch Channel) []string {
	if d == nil {
		return nil
	}
	var out []string
	for _, p := range d.people {
		if id := p.ID(ch); id != "" {
			out = append(out, id)
		}
	}
	return out
}

// GitHubLogins is the view every consumer that read authorizedUsers as GitHub
// logins keeps reading: exactly the GitHub logins, as written, nothing wider
// (R5.2). Compare against it case-insensitively, or use Authorized.
func (d *Directory) GitHubLogins() []string { return d.IDs(ChannelGitHub) }

// SlackIDs is the Slack channel's member-id allow-list (R5.3).
func (d *Directory) SlackIDs() []string { return d.IDs(ChannelSlack) }
