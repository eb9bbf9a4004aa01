package bus

import (
	"errors"
	"regexp"
	"sync"

	"github.com/nats-io/nats.go"
)

// ErrDenied: the server's permissions do not let this connection publish to
// the subject. It is final: retrying the same publish cannot succeed.
var ErrDenied = errors.New("bus: permission denied")

// publishDeniedRe finds the subject in the server's asynchronous error for a
// denied publish: `Permissions Violation for Publish to "loop.in.x.y"`.
var publishDeniedRe = regexp.MustCompile(`(?i)publish to "([^"]+)"`)

// denials turns the server's asynchronous report of a denied publish into an
// answer for the publish waiting on it: a JetStream publish that the server
// drops for lack of permission would otherwise wait for a PubAck that never
// comes and be retried as ambiguous.
type denials struct {
	mu      sync.Mutex
	waiters map[string]map[*func()]struct{}
	denied  map[string]bool
}

func newDenials() *denials {
	return &denials{waiters: map[string]map[*func()]struct{}{}, denied: map[string]bool{}}
}

// report records an asynchronous error; it returns the denied subject, if it
// was a denied publish.
func (d *denials) report(err error) (string, bool) {
	if !errors.Is(err, nats.ErrPermissionViolation) {
		return "", false
	}
	m := publishDeniedRe.FindStringSubmatch(err.Error())
	if m == nil {
		return "", false
	}
	subject := m[1]
	d.mu.Lock()
	defer d.mu.Unlock()
	d.denied[subject] = true
	for f := range d.waiters[subject] {
		(*f)()
	}
	delete(d.waiters, subject)
	return subject, true
}

// watch calls cancel if subject is reported denied before the returned stop
// is called.
func (d *denials) watch(subject string, cancel func()) (stop func()) {
	d.mu.Lock()
	defer d.mu.Unlock()
	f := &cancel
	if d.waiters[subject] == nil {
		d.waiters[subject] = map[*func()]struct{}{}
	}
	d.waiters[subject][f] = struct{}{}
	return func() {
		d.mu.Lock()
		defer d.mu.Unlock()
		delete(d.waiters[subject], f)
		if len(d.waiters[subject]) == 0 {
			delete(d.waiters, subject)
		}
	}
}

// take reports, and forgets, whether subject was denied since the last take.
func (d *denials) take(subject string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	was := d.denied[subject]
	delete(d.denied, subject)
	return was
}
