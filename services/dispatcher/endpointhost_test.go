package dispatcher

import (
	"net/url"
	"os"
	"testing"
)

// The URL sessions are given names the host LOOP_SESSION_ENDPOINT_HOST
// says: loopback by default, this replica's hostname for sessions in
// another container, or a name given; the port is the listener's.
func TestSessionEndpointURLHost(t *testing.T) {
	hostname, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	for setting, want := range map[string]string{"": "127.0.0.1", "hostname": hostname, "dispatcher.sessions": "dispatcher.sessions"} {
		ep := &sessionEndpoint{addr: "127.0.0.1:0", urlHost: setting}
		ln, u, err := ep.listen()
		if err != nil {
			t.Fatal(err)
		}
		ln.Close()
		parsed, err := url.Parse(u)
		if err != nil || parsed.Hostname() != want || parsed.Port() == "" || parsed.Port() == "0" {
			t.Errorf("LOOP_SESSION_ENDPOINT_HOST=%q: sessions are given %q, want host %s and the listener's port", setting, u, want)
		}
	}
}
