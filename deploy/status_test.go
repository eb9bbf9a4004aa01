package deploy

import (
	"fmt"
	"net"
	"slices"
	"testing"
)

// TestComposePublishesTheStatusPageOnLoopback: one service's admin port
// (/status, /readyz, /metrics) is published, on this machine's loopback only
// (docs/deploy.md, "The status page").
func TestComposePublishesTheStatusPageOnLoopback(t *testing.T) {
	project := loadCompose(t)
	var publishers []string
	for name, svc := range project.Services {
		addr := svc.Environment["LOOP_ADMIN_ADDR"]
		if addr == nil {
			continue
		}
		_, admin, err := net.SplitHostPort(*addr)
		if err != nil {
			t.Fatalf("%s LOOP_ADMIN_ADDR %q: %v", name, *addr, err)
		}
		for _, p := range svc.Ports {
			if fmt.Sprint(p.Target) != admin {
				continue
			}
			publishers = append(publishers, name)
			if p.HostIP != "127.0.0.1" || p.Published != "9090" {
				t.Errorf("%s publishes its admin port on %s:%s, want 127.0.0.1:9090 (loopback only)", name, p.HostIP, p.Published)
			}
		}
	}
	if !slices.Equal(publishers, []string{"ingress-github"}) {
		t.Fatalf("services publishing the admin port: %v, want ingress-github alone (one replica, one host port)", publishers)
	}
	svc := project.Services["ingress-github"]
	// Exposing needs the token, or the service refuses to start: neither is
	// set here, both are the operator's to add in the service's env file.
	if _, set := svc.Environment["LOOP_STATUS_EXPOSE"]; set {
		t.Error("compose sets LOOP_STATUS_EXPOSE; without the token from the env file the service would refuse to start")
	}
}
