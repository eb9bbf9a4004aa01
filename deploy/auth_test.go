package deploy

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"

	"github.com/the-loop/bus/internal/testsupport/bustest"
	"github.com/the-loop/bus/pkg/bus"
)

// natsConfigs are the nats.conf files the deployments run: compose, its
// cluster profile, the Kubernetes cluster (base) and the single-node dev
// overlay.
var natsConfigs = []string{"nats/nats.conf", "nats/cluster.conf", "k8s/base/nats.conf", "k8s/overlays/dev/nats.conf"}

// TestNATSConfigsRequireAuthorization runs each deployment's nats.conf, with
// the authorization block `the-loop auth init` writes beside it, and checks
// that a client without a credential — an agent session, say — is refused,
// a stolen-looking key no server knows is refused, and a service's own
// identity is admitted and held to its grants.
func TestNATSConfigsRequireAuthorization(t *testing.T) {
	t.Setenv("POD_NAME", "nats-0") // the Kubernetes cluster's server_name
	t.Setenv("HOSTNAME", "nats")   // compose's
	for _, conf := range natsConfigs {
		t.Run(conf, func(t *testing.T) {
			raw, err := os.ReadFile(conf)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(string(raw), "include ./auth/auth.conf") {
				t.Fatalf("%s does not include the authorization block ./auth/auth.conf", conf)
			}
			dir := t.TempDir()
			path := filepath.Join(dir, "nats.conf")
			if err := os.WriteFile(path, raw, 0o600); err != nil {
				t.Fatal(err)
			}
			seeds := writeAuth(t, filepath.Join(dir, "auth"))
			if strings.Contains(string(raw), "cluster {") {
				checkClusterBlock(t, conf, string(raw))
				writeRoutes(t, filepath.Join(dir, "auth"), "nats-a:6222", "nats-b:6222", "nats-c:6222")
			}
			srv := bustest.StartFromConfig(t, path)

			connect := func(name string, creds bus.Credentials) error {
				c, err := bus.Connect(context.Background(), bus.Options{URL: srv.URL(), Name: name, Credentials: creds,
					Identity: bus.IdentityLedgerWriter, ReconnectWait: 20 * time.Millisecond})
				if err != nil {
					return err
				}
				defer c.Close()
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				if err := c.WaitConnected(ctx); err != nil {
					return err
				}
				// Admitted: the ledger-writer may check the topology the
				// operator provisioned, not publish a person's gate answer.
				if err := c.CheckTopology(ctx, bus.DefaultTopology(), nil); err != nil {
					return err
				}
				_, err = c.Publish(ctx, bus.Message{Subject: "loop.in.k.gate.feedback", MsgID: "probe", Data: []byte("{}")})
				if !errors.Is(err, bus.ErrDenied) {
					t.Errorf("%s: the ledger-writer published a gate answer to the inbox: %v", conf, err)
				}
				return nil
			}
			var ae *bus.AuthError
			if err := connect("no-credential", bus.Credentials{}); !errors.As(err, &ae) {
				t.Errorf("%s: a client without a credential: %v, want refused", conf, err)
			}
			stranger, _, err := bus.NewIdentityKey()
			if err != nil {
				t.Fatal(err)
			}
			if err := connect("stranger", bus.Credentials{Seed: stranger}); !errors.As(err, &ae) {
				t.Errorf("%s: an unknown key: %v, want refused", conf, err)
			}
			// Provisioning is the operator's (docs/decisions/098-provisioning-is-the-operators.md).
			op, err := bus.Connect(context.Background(), bus.Options{URL: srv.URL(), Name: "provision",
				Credentials: bus.Credentials{Seed: seeds[bus.IdentityOperator]}, Identity: bus.IdentityOperator})
			if err != nil {
				t.Fatal(err)
			}
			defer op.Close()
			pctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if err := op.Provision(pctx, bus.DefaultTopology()); err != nil {
				t.Fatalf("%s: the operator provisions: %v", conf, err)
			}
			if err := connect("ledger-writer", bus.Credentials{Seed: seeds[bus.IdentityLedgerWriter]}); err != nil {
				t.Errorf("%s: the ledger-writer's own identity: %v", conf, err)
			}
		})
	}
}

// writeAuth writes what `the-loop auth init` writes into dir (auth.conf) and
// returns the seeds.
func writeAuth(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	seeds, users, err := bus.NewUsers(bus.DefaultTopology())
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "auth.conf"), []byte(bus.AuthorizationConf(users, nil)), 0o600); err != nil {
		t.Fatal(err)
	}
	return seeds
}

// checkClusterBlock: a cluster's routes and their credential come from
// ./auth/routes.conf (scripts/nats-routes.sh), never from the config itself —
// a route without a credential would let anything that reaches the route port
// in, as a peer server, around the authorization block.
func checkClusterBlock(t *testing.T, conf, raw string) {
	t.Helper()
	block := raw[strings.Index(raw, "cluster {"):]
	block = block[:strings.Index(block, "\n}")]
	if !strings.Contains(block, "include ./auth/routes.conf") {
		t.Errorf("%s: the cluster block does not include the route credential ./auth/routes.conf", conf)
	}
	for _, line := range strings.Split(block, "\n") {
		if l := strings.TrimSpace(line); strings.HasPrefix(l, "routes") || strings.Contains(l, "nats-route://") || strings.HasPrefix(l, "authorization") {
			t.Errorf("%s: the cluster block names routes or a credential itself: %q", conf, l)
		}
	}
}

// writeRoutes runs scripts/nats-routes.sh as an operator does: DIR/routes.conf
// with routes to hosts.
func writeRoutes(t *testing.T, dir string, hosts ...string) string {
	t.Helper()
	out, err := exec.Command("../scripts/nats-routes.sh", append([]string{dir}, hosts...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("scripts/nats-routes.sh: %v\n%s", err, out)
	}
	b, err := os.ReadFile(filepath.Join(dir, "routes.conf"))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestRouteCredential: scripts/nats-routes.sh writes a secret file (mode
// 0600) that makes a node require the credential of every route and present
// it on each of its own routes, one fresh credential per run.
func TestRouteCredential(t *testing.T) {
	dir := t.TempDir()
	hosts := []string{"nats:6222", "nats-2:6222", "nats-3:6222"}
	conf := writeRoutes(t, dir, hosts...)
	fi, err := os.Stat(filepath.Join(dir, "routes.conf"))
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("routes.conf mode %v, want 0600", fi.Mode().Perm())
	}
	m := regexp.MustCompile(`(?s)authorization \{\s*user: route\s*password: "([0-9a-f]{48})"\s*\}`).FindStringSubmatch(conf)
	if m == nil {
		t.Fatalf("routes.conf has no route user with a 24-byte password:\n%s", conf)
	}
	for _, h := range hosts {
		if !strings.Contains(conf, fmt.Sprintf("%q", "nats-route://route:"+m[1]+"@"+h)) {
			t.Errorf("routes.conf has no route to %s with the credential:\n%s", h, conf)
		}
	}
	if again := writeRoutes(t, dir, hosts...); strings.Contains(again, m[1]) {
		t.Error("a second run kept the credential")
	}
	if out, err := exec.Command("../scripts/nats-routes.sh", dir, "nats:6222").CombinedOutput(); err == nil {
		t.Errorf("one host accepted: %s", out)
	}
}

// TestComposeGivesEachServiceItsOwnIdentity: every service gets its own NKey
// seed as a compose secret and only that one, and NATS gets the
// authorization block.
func TestComposeGivesEachServiceItsOwnIdentity(t *testing.T) {
	project := loadCompose(t)
	for _, name := range theServices {
		svc := project.Services[name]
		if f := svc.Environment["LOOP_NATS_NKEY_FILE"]; f == nil || *f != "/run/secrets/nats.nk" {
			t.Errorf("%s: LOOP_NATS_NKEY_FILE = %v, want /run/secrets/nats.nk", name, f)
		}
		if len(svc.Secrets) != 1 || svc.Secrets[0].Source != "nats-"+name || svc.Secrets[0].Target != "nats.nk" {
			t.Errorf("%s: secrets %+v, want exactly its own seed nats-%s as nats.nk", name, svc.Secrets, name)
			continue
		}
		if f := project.Secrets["nats-"+name].File; !strings.HasSuffix(f, filepath.Join("deploy", "secrets", "nats", name+".nk")) {
			t.Errorf("secret nats-%s is read from %q, not what `the-loop auth init deploy/secrets` writes", name, f)
		}
	}
	mounted := false
	for _, v := range project.Services["nats"].Volumes {
		mounted = mounted || v.Target == "/etc/nats/auth/auth.conf" && strings.HasSuffix(v.Source, filepath.Join("deploy", "secrets", "auth.conf"))
	}
	if !mounted {
		t.Error("nats does not mount deploy/secrets/auth.conf where nats.conf includes it")
	}
}

// TestKubernetesIdentities: in every overlay each service mounts exactly its
// own key of the Secret the-loop-nats, names it in LOOP_NATS_NKEY_FILE, and
// NATS mounts the authorization block beside nats.conf.
func TestKubernetesIdentities(t *testing.T) {
	overlays, err := filepath.Glob("k8s/overlays/*")
	if err != nil || len(overlays) == 0 {
		t.Fatalf("overlays: %v %v", overlays, err)
	}
	for _, overlay := range overlays {
		resmap, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), overlay)
		if err != nil {
			t.Fatal(err)
		}
		for _, res := range resmap.Resources() {
			kind, name := res.GetKind(), res.GetName()
			if kind != "Deployment" && kind != "Job" && !(kind == "StatefulSet" && name == "nats") {
				continue
			}
			y, err := res.AsYAML()
			if err != nil {
				t.Fatal(err)
			}
			var obj appsv1.Deployment // the pod template is all that is read
			if err := yaml.Unmarshal(y, &obj); err != nil {
				t.Fatal(err)
			}
			spec := obj.Spec.Template.Spec
			if kind == "StatefulSet" {
				found := false
				for _, v := range spec.Volumes {
					if v.Projected == nil {
						continue
					}
					for _, src := range v.Projected.Sources {
						found = found || src.Secret != nil && src.Secret.Name == "the-loop-nats-auth" &&
							slices.ContainsFunc(src.Secret.Items, func(i corev1.KeyToPath) bool { return i.Path == "auth/auth.conf" })
					}
				}
				if !found {
					t.Errorf("%s: nats does not get auth/auth.conf from the Secret the-loop-nats-auth", overlay)
				}
				// A cluster's nodes get the route credential too;
				// one server has no routes and needs none.
				routes := false
				for _, v := range spec.Volumes {
					if v.Projected == nil {
						continue
					}
					for _, src := range v.Projected.Sources {
						routes = routes || src.Secret != nil && src.Secret.Name == "the-loop-nats-auth" &&
							slices.ContainsFunc(src.Secret.Items, func(i corev1.KeyToPath) bool { return i.Key == "routes.conf" && i.Path == "auth/routes.conf" })
					}
				}
				var set appsv1.StatefulSet
				if err := yaml.Unmarshal(y, &set); err != nil {
					t.Fatal(err)
				}
				if clustered := set.Spec.Replicas == nil || *set.Spec.Replicas > 1; routes != clustered {
					t.Errorf("%s: nats mounts the route credential: %v, with replicas %v", overlay, routes, set.Spec.Replicas)
				}
				continue
			}
			c := spec.Containers[0]
			if !slices.ContainsFunc(c.Env, func(e corev1.EnvVar) bool {
				return e.Name == "LOOP_NATS_NKEY_FILE" && e.Value == "/var/run/secrets/the-loop/nats.nk"
			}) {
				t.Errorf("%s/%s: no LOOP_NATS_NKEY_FILE", overlay, name)
			}
			var keys []string
			for _, v := range spec.Volumes {
				if v.Secret != nil && v.Secret.SecretName == "the-loop-nats" {
					for _, it := range v.Secret.Items {
						keys = append(keys, it.Key)
					}
				}
			}
			own := name + ".nk"
			if kind == "Job" {
				// The provision Job is the operator's act, and the only
				// pod with its seed.
				own = "operator.nk"
			}
			if !slices.Equal(keys, []string{own}) {
				t.Errorf("%s/%s mounts the-loop-nats keys %v, want only %s", overlay, name, keys, own)
			}
		}
	}
}
