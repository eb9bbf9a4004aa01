package deploy

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/compose-spec/compose-go/v2/cli"
	composetypes "github.com/compose-spec/compose-go/v2/types"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"

	"github.com/the-loop/bus/pkg/config"
)

// theServices are the five services, each run as `the-loop serve <name>`.
var theServices = []string{"ingress-github", "ingress-slack", "ledger-writer", "slack-renderer", "dispatcher"}

// settingTypes maps every LOOP_* setting to its type, from the envconfig
// definitions (the table `the-loop serve --help` prints).
func settingTypes(t *testing.T) map[string]string {
	t.Helper()
	var b bytes.Buffer
	if err := config.Usage(&b); err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, line := range strings.Split(b.String(), "\n")[1:] {
		f := strings.Fields(line)
		if len(f) >= 2 {
			out[f[0]] = f[1]
		}
	}
	if len(out) != len(config.Settings()) {
		t.Fatalf("parsed %d settings from Usage, config knows %d", len(out), len(config.Settings()))
	}
	return out
}

func defaultPort(t *testing.T, setting string) string {
	t.Helper()
	var common config.Common
	var gh config.GitHub
	var sl config.Slack
	if err := config.Process(config.Env{}, &common, &gh, &sl); err != nil {
		t.Fatal(err)
	}
	addr := map[string]string{"LOOP_ADMIN_ADDR": common.AdminAddr, "LOOP_GITHUB_WEBHOOK_ADDR": gh.WebhookAddr, "LOOP_SLACK_EVENTS_ADDR": sl.EventsAddr}[setting]
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatalf("%s default %q: %v", setting, addr, err)
	}
	return port
}

func TestComposeFile(t *testing.T) {
	ctx := context.Background()
	opts, err := cli.NewProjectOptions([]string{"../docker-compose.yml"},
		cli.WithWorkingDirectory(".."), cli.WithEnv([]string{}), cli.WithInterpolation(true))
	if err != nil {
		t.Fatal(err)
	}
	project, err := opts.LoadProject(ctx)
	if err != nil {
		t.Fatalf("compose-go refuses docker-compose.yml: %v", err)
	}
	types := settingTypes(t)
	want := append([]string{"nats"}, theServices...)
	got := project.ServiceNames()
	slices.Sort(want)
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Fatalf("services = %v, want %v", got, want)
	}
	nats := project.Services["nats"]
	if nats.HealthCheck == nil || !strings.Contains(strings.Join(nats.HealthCheck.Test, " "), "/healthz?js-enabled-only=true") {
		t.Errorf("nats healthcheck = %+v", nats.HealthCheck)
	}
	for _, p := range nats.Ports {
		if p.Target == 8222 && p.HostIP != "127.0.0.1" {
			t.Errorf("NATS monitoring is published on %q; it has no auth and must stay on loopback", p.HostIP)
		}
	}
	for _, name := range theServices {
		svc := project.Services[name]
		if cmd := []string(svc.Command); !slices.Equal(cmd, []string{"serve", name}) {
			t.Errorf("%s command = %q, want [serve %s]", name, cmd, name)
		}
		if dep, ok := svc.DependsOn["nats"]; !ok || dep.Condition != composetypes.ServiceConditionHealthy {
			t.Errorf("%s does not wait for a healthy nats", name)
		}
		if svc.HealthCheck == nil || !slices.Contains(svc.HealthCheck.Test, "health") {
			t.Errorf("%s healthcheck = %+v, want `the-loop health`", name, svc.HealthCheck)
		}
		if svc.Restart == "" || svc.Restart == "no" {
			t.Errorf("%s has no restart policy", name)
		}
		for k, v := range svc.Environment {
			if _, known := types[k]; !known {
				t.Errorf("%s sets %s, which the-loop does not read (it would refuse to start)", name, k)
			}
			if types[k] == "Secret" && v != nil && *v != "" {
				t.Errorf("%s inlines the secret %s; secrets come from .env", name, k)
			}
		}
		if url := svc.Environment["LOOP_NATS_URL"]; url == nil || !strings.HasPrefix(*url, "nats://nats:") {
			t.Errorf("%s LOOP_NATS_URL = %v", name, url)
		}
	}
	for name, setting := range map[string]string{"ingress-github": "LOOP_GITHUB_WEBHOOK_ADDR", "ingress-slack": "LOOP_SLACK_EVENTS_ADDR"} {
		port := defaultPort(t, setting)
		found := false
		for _, p := range project.Services[name].Ports {
			found = found || fmt.Sprint(p.Target) == port
		}
		if !found {
			t.Errorf("%s does not publish %s's default port %s", name, setting, port)
		}
	}
	for _, name := range []string{"ledger-writer", "slack-renderer", "dispatcher"} {
		if d := project.Services[name].Deploy; d == nil || d.Replicas == nil || *d.Replicas < 2 {
			t.Errorf("%s is not scaled by deploy.replicas", name)
		}
	}
	// Every key of .env.example is a setting, and a secret one.
	env, err := os.ReadFile("../.env.example")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(env), "\n") {
		if k, _, ok := strings.Cut(line, "="); ok && !strings.HasPrefix(line, "#") {
			if types[k] != "Secret" {
				t.Errorf(".env.example names %s, which is not a secret setting", k)
			}
		}
	}
}

// monitoringServiceMonitor is the part of the Prometheus Operator CRD we use;
// decoding into it strictly catches typos in a kind the API types lack.
type serviceMonitor struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name      string            `json:"name"`
		Namespace string            `json:"namespace"`
		Labels    map[string]string `json:"labels"`
	} `json:"metadata"`
	Spec struct {
		Selector struct {
			MatchLabels map[string]string `json:"matchLabels"`
		} `json:"selector"`
		Endpoints []struct {
			Port     string `json:"port"`
			Path     string `json:"path"`
			Interval string `json:"interval"`
		} `json:"endpoints"`
	} `json:"spec"`
}

func TestKubernetesOverlays(t *testing.T) {
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{corev1.AddToScheme, appsv1.AddToScheme, policyv1.AddToScheme, autoscalingv2.AddToScheme, networkingv1.AddToScheme} {
		if err := add(scheme); err != nil {
			t.Fatal(err)
		}
	}
	decoder := serializer.NewCodecFactory(scheme, serializer.EnableStrict).UniversalDeserializer()
	types := settingTypes(t)
	adminPort := defaultPort(t, "LOOP_ADMIN_ADDR")

	overlays, err := filepath.Glob("k8s/overlays/*")
	if err != nil || len(overlays) < 2 {
		t.Fatalf("overlays: %v %v", overlays, err)
	}
	for _, overlay := range overlays {
		t.Run(filepath.Base(overlay), func(t *testing.T) {
			resmap, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), overlay)
			if err != nil {
				t.Fatalf("kustomize build %s: %v", overlay, err)
			}
			deployments := map[string]*appsv1.Deployment{}
			natsReplicas := int32(0)
			kinds := map[string]int{}
			for _, res := range resmap.Resources() {
				y, err := res.AsYAML()
				if err != nil {
					t.Fatal(err)
				}
				kinds[res.GetKind()]++
				if res.GetKind() == "ServiceMonitor" {
					js, err := res.MarshalJSON()
					if err != nil {
						t.Fatal(err)
					}
					dec := json.NewDecoder(bytes.NewReader(js))
					dec.DisallowUnknownFields()
					var sm serviceMonitor
					if err := dec.Decode(&sm); err != nil {
						t.Errorf("ServiceMonitor: %v", err)
					}
					if len(sm.Spec.Endpoints) == 0 || sm.Spec.Endpoints[0].Port != "admin" || sm.Spec.Endpoints[0].Path != "/metrics" {
						t.Errorf("ServiceMonitor does not scrape admin /metrics: %+v", sm.Spec.Endpoints)
					}
					continue
				}
				obj, _, err := decoder.Decode(y, nil, nil)
				if err != nil {
					t.Errorf("%s/%s does not decode strictly: %v", res.GetKind(), res.GetName(), err)
					continue
				}
				switch o := obj.(type) {
				case *appsv1.Deployment:
					deployments[o.Name] = o
				case *appsv1.StatefulSet:
					if o.Name == "nats" && o.Spec.Replicas != nil {
						natsReplicas = *o.Spec.Replicas
					}
				}
			}
			for _, k := range []string{"StatefulSet", "PodDisruptionBudget", "HorizontalPodAutoscaler", "NetworkPolicy", "ConfigMap", "ServiceMonitor"} {
				if kinds[k] == 0 {
					t.Errorf("no %s rendered", k)
				}
			}
			for _, name := range theServices {
				d, ok := deployments[name]
				if !ok {
					t.Errorf("no Deployment %s", name)
					continue
				}
				checkDeployment(t, d, name, types, adminPort)
				// Streams cannot have more replicas than there are servers.
				for _, e := range d.Spec.Template.Spec.Containers[0].Env {
					if e.Name == "LOOP_STREAM_REPLICAS" && e.Value != fmt.Sprint(natsReplicas) {
						t.Errorf("%s: LOOP_STREAM_REPLICAS=%s with %d NATS servers", name, e.Value, natsReplicas)
					}
				}
			}
		})
	}
}

func checkDeployment(t *testing.T, d *appsv1.Deployment, name string, types map[string]string, adminPort string) {
	t.Helper()
	spec := d.Spec.Template.Spec
	if spec.EnableServiceLinks == nil || *spec.EnableServiceLinks {
		t.Errorf("%s: enableServiceLinks must be false (service links inject unknown variables)", name)
	}
	if spec.TerminationGracePeriodSeconds == nil || *spec.TerminationGracePeriodSeconds < 60 {
		t.Errorf("%s: terminationGracePeriodSeconds below the longest GitHub call", name)
	}
	if len(spec.Containers) != 1 {
		t.Fatalf("%s: %d containers", name, len(spec.Containers))
	}
	c := spec.Containers[0]
	if !slices.Equal(c.Args, []string{"serve", name}) {
		t.Errorf("%s: args %q, want [serve %s]", name, c.Args, name)
	}
	for _, e := range c.Env {
		typ, known := types[e.Name]
		if !known {
			t.Errorf("%s: env %s is not a setting the-loop reads", name, e.Name)
		}
		if typ == "Secret" && (e.Value != "" || e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil) {
			t.Errorf("%s: secret %s must come from a Secret reference", name, e.Name)
		}
	}
	ports := map[string]string{}
	for _, p := range c.Ports {
		ports[p.Name] = fmt.Sprint(p.ContainerPort)
	}
	if ports["admin"] != adminPort {
		t.Errorf("%s: admin port %q, LOOP_ADMIN_ADDR defaults to %s", name, ports["admin"], adminPort)
	}
	if p := c.ReadinessProbe; p == nil || p.HTTPGet == nil || p.HTTPGet.Path != "/readyz" {
		t.Errorf("%s: readiness must be /readyz", name)
	}
	if p := c.LivenessProbe; p == nil || p.HTTPGet == nil || p.HTTPGet.Path != "/healthz" {
		t.Errorf("%s: liveness must be /healthz (never tied to NATS)", name)
	}
}
