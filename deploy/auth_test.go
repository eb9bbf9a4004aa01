package deploy

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/compose-spec/compose-go/v2/cli"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"

	"github.com/the-loop/bus/pkg/bus"
	"github.com/the-loop/bus/pkg/bus/bustest"
)

// natsConfigs are the nats.conf files the deployments run: compose, the
// Kubernetes cluster (base) and the single-node dev overlay. (compose's
// cluster profile, nats/cluster.conf, is checked by TestComposeClusterProfile:
// its routes name the compose hosts.)
var natsConfigs = []string{"nats/nats.conf", "k8s/base/nats.conf", "k8s/overlays/dev/nats.conf"}

// TestNATSConfigsRequireAuthorization runs each deployment's nats.conf, with
// the authorization block `the-loop auth init` writes beside it, and checks
// that a client without a credential — an agent session, say — is refused,
// a stolen-looking key no server knows is refused, and a service's own
// identity is admitted and held to its grants.
func TestNATSConfigsRequireAuthorization(t *testing.T) {
	t.Setenv("POD_NAME", "nats-0") // the cluster's server_name
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
				// Admitted: the ledger-writer may provision and publish its
				// fan-out, not a person's gate answer.
				if err := c.Provision(ctx, bus.DefaultTopology()); err != nil {
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

// TestComposeGivesEachServiceItsOwnIdentity: every service gets its own NKey
// seed as a compose secret and only that one, and NATS gets the
// authorization block.
func TestComposeGivesEachServiceItsOwnIdentity(t *testing.T) {
	opts, err := cli.NewProjectOptions([]string{"../docker-compose.yml"},
		cli.WithWorkingDirectory(".."), cli.WithEnv([]string{}), cli.WithInterpolation(true))
	if err != nil {
		t.Fatal(err)
	}
	project, err := opts.LoadProject(context.Background())
	if err != nil {
		t.Fatal(err)
	}
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
			if kind != "Deployment" && !(kind == "StatefulSet" && name == "nats") {
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
			if !slices.Equal(keys, []string{name + ".nk"}) {
				t.Errorf("%s/%s mounts the-loop-nats keys %v, want only its own %s.nk", overlay, name, keys, name)
			}
		}
	}
}
