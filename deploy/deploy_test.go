package deploy

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/compose-spec/compose-go/v2/cli"
	composetypes "github.com/compose-spec/compose-go/v2/types"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/client-go/applyconfigurations"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
)

// theServices are the five services, each run as `the-loop serve <name>`.
var theServices = []string{"ingress-github", "ingress-slack", "ledger-writer", "slack-renderer", "dispatcher"}

// setting is one row of the settings table.
type setting struct{ typ, def string }

// settings reads the table of every LOOP_* setting from the generated
// configuration reference (docs/configuration.md, regenerated from the
// services' and the process's settings by `go generate`, which CI verifies).
func settings(t *testing.T) map[string]setting {
	t.Helper()
	doc, err := os.ReadFile("../docs/configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	_, table, _ := strings.Cut(string(doc), "## Environment\n\n```\n")
	table, _, _ = strings.Cut(table, "```")
	lines := strings.Split(strings.TrimSuffix(table, "\n"), "\n")
	if len(lines) < 2 || !strings.HasPrefix(lines[0], "SETTING") {
		t.Fatalf("docs/configuration.md has no settings table")
	}
	typeAt, defAt, reqAt := strings.Index(lines[0], "TYPE"), strings.Index(lines[0], "DEFAULT"), strings.Index(lines[0], "REQUIRED")
	out := map[string]setting{}
	for _, line := range lines[1:] {
		key := strings.Fields(line)[0]
		if !strings.HasPrefix(key, "LOOP_") || len(line) < reqAt {
			t.Fatalf("not a settings row: %q", line)
		}
		out[key] = setting{typ: strings.TrimSpace(line[typeAt:defAt]), def: strings.TrimSpace(line[defAt:reqAt])}
	}
	return out
}

// settingTypes maps every LOOP_* setting to its type.
func settingTypes(t *testing.T) map[string]string {
	t.Helper()
	out := map[string]string{}
	for k, s := range settings(t) {
		out[k] = s.typ
	}
	return out
}

func defaultPort(t *testing.T, name string) string {
	t.Helper()
	addr := settings(t)[name].def
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatalf("%s default %q: %v", name, addr, err)
	}
	return port
}

// loadCompose is docker-compose.yml as compose-go loads it, interpolated in
// an empty environment, with the options more (an env file, a profile).
func loadCompose(t *testing.T, more ...cli.ProjectOptionsFn) *composetypes.Project {
	t.Helper()
	o := append([]cli.ProjectOptionsFn{cli.WithWorkingDirectory(".."), cli.WithEnv([]string{})}, more...)
	opts, err := cli.NewProjectOptions([]string{"../docker-compose.yml"}, append(o, cli.WithInterpolation(true))...)
	if err != nil {
		t.Fatal(err)
	}
	project, err := opts.LoadProject(context.Background())
	if err != nil {
		t.Fatalf("compose-go refuses docker-compose.yml: %v", err)
	}
	return project
}

// requiredSettings are the secret settings each service refuses to start
// without, in the deployment's defaults (webhook intake; the Slack channel
// on, Socket Mode): its Config's Required in services/, which the
// services' tests pin. A service started without one exits 1 naming it,
// so the example env files and the Kubernetes Deployments must offer each.
var requiredSettings = map[string][]string{
	"ledger-writer":  {"LOOP_GITHUB_TOKEN", "LOOP_ENVELOPE_KEY"},
	"ingress-github": {"LOOP_ENVELOPE_KEY", "LOOP_GITHUB_WEBHOOK_SECRET"},
	"ingress-slack":  {"LOOP_SLACK_BOT_TOKEN", "LOOP_SLACK_APP_TOKEN"},
	"slack-renderer": {"LOOP_SLACK_BOT_TOKEN"},
}

func TestComposeFile(t *testing.T) {
	project := loadCompose(t)
	types := settingTypes(t)
	wantNames := append([]string{"nats", "nats-volumes", "provision", "sessions"}, theServices...)
	got := project.ServiceNames()
	slices.Sort(wantNames)
	slices.Sort(got)
	if !slices.Equal(got, wantNames) {
		t.Fatalf("services = %v, want %v (the cluster profile's nodes only with --profile cluster)", got, wantNames)
	}
	checkComposeHardened(t, project)
	checkComposeSessions(t, project)
	nats := project.Services["nats"]
	// Healthy means JetStream ready (a cluster: a meta leader, this node
	// current), not merely enabled: the services start only then.
	if nats.HealthCheck == nil || !slices.Contains(nats.HealthCheck.Test, "http://localhost:8222/healthz") {
		t.Errorf("nats healthcheck = %+v, want the full /healthz", nats.HealthCheck)
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
		if svc.HealthCheck == nil || !slices.Contains(svc.HealthCheck.Test, "health") || !slices.Contains(svc.HealthCheck.Test, "--ready") {
			t.Errorf("%s healthcheck = %+v, want `the-loop health --ready` (/readyz)", name, svc.HealthCheck)
		}
		// Its own tokens only: one env file, named after the service.
		if len(svc.EnvFiles) != 1 || !strings.HasSuffix(svc.EnvFiles[0].Path, filepath.Join("deploy", "secrets", name+".env")) {
			t.Errorf("%s env_file = %+v, want only deploy/secrets/%s.env", name, svc.EnvFiles, name)
		}
		wantTarget, wantImage := "service", "the-loop:local"
		if name == "dispatcher" {
			wantTarget, wantImage = "session", "the-loop-session:local"
		}
		if svc.Build == nil || svc.Build.Target != wantTarget || svc.Image != wantImage {
			t.Errorf("%s builds %+v as %q, want deploy/Dockerfile's target %s as %s", name, svc.Build, svc.Image, wantTarget, wantImage)
		}
		if svc.Restart != composetypes.RestartPolicyUnlessStopped && svc.Restart != composetypes.RestartPolicyAlways {
			t.Errorf("%s has no restart policy", name)
		}
		for k, v := range svc.Environment {
			if k == "HOME" && name == "dispatcher" {
				continue // the sessions' HOME, on the volume they share
			}
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
	// Every key of a service's example env file is a secret setting, and
	// every setting it cannot start without is there to fill in.
	for _, name := range theServices {
		env, err := os.ReadFile(filepath.Join("secrets.example", name+".env"))
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range requiredSettings[name] {
			if !strings.Contains("\n"+string(env), "\n"+r+"=") {
				t.Errorf("secrets.example/%s.env lacks %s, without which the service exits at start", name, r)
			}
		}
		for _, line := range strings.Split(string(env), "\n") {
			if k, _, ok := strings.Cut(line, "="); ok && !strings.HasPrefix(line, "#") {
				if types[k] != "Secret" {
					t.Errorf("secrets.example/%s.env names %s, which is not a secret setting", name, k)
				}
			}
		}
	}
	// The NATS image is the server the tests run (go.mod's nats-server).
	want := "nats:" + strings.TrimPrefix(natsServerVersion(t), "v") + "-alpine"
	for _, n := range []string{"nats", "nats-2", "nats-3", composeInit} {
		svc, ok := project.Services[n]
		if !ok {
			svc, ok = project.DisabledServices[n]
		}
		if !ok || svc.Image != want {
			t.Errorf("%s image %q, want %s", n, svc.Image, want)
		}
	}
}

// TestComposeProvisionsAsTheOperator: a one-shot `provision` service runs
// `the-loop provision` with the operator's seed once NATS is healthy, and
// every service starts only after it succeeded; no service gets the
// operator's seed (docs/decisions/098-provisioning-is-the-operators.md).
func TestComposeProvisionsAsTheOperator(t *testing.T) {
	project := loadCompose(t)
	p, ok := project.Services["provision"]
	if !ok {
		t.Fatal("no provision service")
	}
	if cmd := []string(p.Command); !slices.Equal(cmd, []string{"provision"}) {
		t.Errorf("provision command = %q, want [provision]", cmd)
	}
	if p.Restart != composetypes.RestartPolicyNo {
		t.Errorf("provision restart = %q, want \"no\": it runs once", p.Restart)
	}
	if dep, ok := p.DependsOn["nats"]; !ok || dep.Condition != composetypes.ServiceConditionHealthy {
		t.Error("provision does not wait for a healthy nats")
	}
	if _, ok := p.DependsOn["provision"]; ok {
		t.Error("provision depends on itself")
	}
	if len(p.Secrets) != 1 || p.Secrets[0].Source != "nats-operator" || p.Secrets[0].Target != "nats.nk" {
		t.Errorf("provision secrets %+v, want exactly the operator's seed nats-operator as nats.nk", p.Secrets)
	}
	if f := p.Environment["LOOP_NATS_NKEY_FILE"]; f == nil || *f != "/run/secrets/nats.nk" {
		t.Errorf("provision LOOP_NATS_NKEY_FILE = %v, want /run/secrets/nats.nk", f)
	}
	if f := project.Secrets["nats-operator"].File; !strings.HasSuffix(f, filepath.Join("deploy", "secrets", "nats", "operator.nk")) {
		t.Errorf("secret nats-operator is read from %q, not what `the-loop auth init deploy/secrets` writes", f)
	}
	// The services run with the same topology settings as provision.
	for _, k := range []string{"LOOP_NATS_URL", "LOOP_STREAM_REPLICAS", "LOOP_PARTITIONS"} {
		for _, name := range theServices {
			a, b := p.Environment[k], project.Services[name].Environment[k]
			if (a == nil) != (b == nil) || a != nil && *a != *b {
				t.Errorf("%s: provision has %v, %s %v", k, a, name, b)
			}
		}
	}
	for _, name := range theServices {
		svc := project.Services[name]
		if dep, ok := svc.DependsOn["provision"]; !ok || dep.Condition != composetypes.ServiceConditionCompletedSuccessfully {
			t.Errorf("%s does not wait for provision to complete successfully: %+v", name, svc.DependsOn)
		}
		for _, sec := range svc.Secrets {
			if sec.Source == "nats-operator" {
				t.Errorf("%s gets the operator's seed", name)
			}
		}
	}
}

// natsServerVersion is the nats-server module version go.mod requires.
func natsServerVersion(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "github.com/nats-io/nats-server/v2" {
			return f[1]
		}
	}
	t.Fatal("go.mod requires no nats-server")
	return ""
}

// composeInit is the one-shot that makes the NATS volumes the servers' user's:
// the one service that starts as root, with only chown's capabilities.
const composeInit = "nats-volumes"

// checkComposeHardened: every service of the compose file, the cluster
// profile's too, runs with a read-only root filesystem, no capability, no
// privilege gained by exec, and as a user other than root — but the
// one-shot that hands the NATS volumes to the servers' user, which may
// chown and nothing else.
func checkComposeHardened(t *testing.T, project *composetypes.Project) {
	t.Helper()
	all := map[string]composetypes.ServiceConfig{}
	for name, svc := range project.Services {
		all[name] = svc
	}
	for name, svc := range project.DisabledServices {
		all[name] = svc
	}
	for _, n := range []string{"nats", "nats-2", "nats-3"} {
		if _, ok := all[n]; !ok {
			t.Errorf("no %s service", n)
		}
	}
	for name, svc := range all {
		if !svc.ReadOnly {
			t.Errorf("%s: read_only is not set (the root filesystem must be read-only)", name)
		}
		if !slices.Contains(svc.CapDrop, "ALL") {
			t.Errorf("%s: cap_drop %v, want [ALL]", name, svc.CapDrop)
		}
		if !slices.Contains(svc.SecurityOpt, "no-new-privileges:true") {
			t.Errorf("%s: security_opt %v, want no-new-privileges:true", name, svc.SecurityOpt)
		}
		for _, o := range svc.SecurityOpt {
			if strings.HasPrefix(o, "seccomp") || strings.HasPrefix(o, "apparmor") || strings.HasPrefix(o, "label") {
				t.Errorf("%s: security_opt %q loosens Docker's defaults", name, o)
			}
		}
		if svc.Privileged || svc.Pid == "host" || svc.NetworkMode == "host" || svc.Ipc == "host" {
			t.Errorf("%s: runs privileged or in a host namespace", name)
		}
		uid, _, _ := strings.Cut(svc.User, ":")
		if name == composeInit {
			if !slices.Equal(svc.CapAdd, []string{"CHOWN", "DAC_READ_SEARCH"}) || svc.Restart != composetypes.RestartPolicyNo {
				t.Errorf("%s: cap_add %v restart %q, want only CHOWN and DAC_READ_SEARCH, once", name, svc.CapAdd, svc.Restart)
			}
			continue
		}
		if len(svc.CapAdd) > 0 {
			t.Errorf("%s: cap_add %v", name, svc.CapAdd)
		}
		if n, err := strconv.Atoi(uid); err != nil || n == 0 {
			t.Errorf("%s: user %q, want a numeric non-root uid", name, svc.User)
		}
	}
	// The servers depend on the one-shot, and it chowns every server's
	// data volume to the servers' user.
	init := all[composeInit]
	for _, n := range []string{"nats", "nats-2", "nats-3"} {
		svc := all[n]
		if dep, ok := svc.DependsOn[composeInit]; !ok || dep.Condition != composetypes.ServiceConditionCompletedSuccessfully {
			t.Errorf("%s does not wait for %s", n, composeInit)
		}
		var data string
		for _, v := range svc.Volumes {
			if v.Target == "/data" {
				data = v.Source
			}
		}
		chowned := false
		for _, v := range init.Volumes {
			chowned = chowned || v.Source == data && slices.Contains(init.Entrypoint, v.Target)
		}
		uid, _, _ := strings.Cut(svc.User, ":")
		if data == "" || !chowned || !slices.Contains(init.Entrypoint, uid+":"+uid) {
			t.Errorf("%s: its data volume %q is not chowned to its user %q by %s (%q)", n, data, svc.User, composeInit, init.Entrypoint)
		}
	}
}

// checkComposeSessions: the agent sessions run in their own container
// (docs/decisions/101-sessions-in-their-own-container.md): the session
// image, the session host as its command, another uid than the
// dispatcher's but its group, no secret, no env file, no LOOP_* setting,
// only the sessions network (NATS is only on the default one, the
// dispatcher on both), and nothing shared with the dispatcher but the
// workspace and the session host's socket directory. The dispatcher's
// tmux is the session host's wrapper, and its session endpoint is
// reachable from there by its name.
func checkComposeSessions(t *testing.T, project *composetypes.Project) {
	t.Helper()
	sess, ok := project.Services["sessions"]
	disp := project.Services["dispatcher"]
	if !ok {
		t.Fatal("no sessions service")
	}
	if sess.Build == nil || sess.Build.Target != "session" || sess.Image != disp.Image {
		t.Errorf("sessions builds %+v as %q, want the dispatcher's session image %q", sess.Build, sess.Image, disp.Image)
	}
	if len(sess.Command) == 0 || sess.Command[0] != "session-host" {
		t.Errorf("sessions command %q, want the session host", sess.Command)
	}
	su, sg, _ := strings.Cut(sess.User, ":")
	du, dg, _ := strings.Cut(disp.User, ":")
	if su == "" || su == du || sg == "" || sg != dg {
		t.Errorf("sessions user %q, dispatcher %q: want another uid, the same gid", sess.User, disp.User)
	}
	if len(sess.Secrets) > 0 || len(sess.EnvFiles) > 0 {
		t.Errorf("sessions gets secrets %v and env files %v; it must hold no credential", sess.Secrets, sess.EnvFiles)
	}
	for k := range sess.Environment {
		if strings.HasPrefix(k, "LOOP_") {
			t.Errorf("sessions sets %s: no loop setting belongs there", k)
		}
	}
	nets := func(svc composetypes.ServiceConfig) []string {
		var out []string
		for n := range svc.Networks {
			out = append(out, n)
		}
		if len(out) == 0 {
			out = []string{"default"}
		}
		slices.Sort(out)
		return out
	}
	if got := nets(sess); !slices.Equal(got, []string{"sessions"}) {
		t.Errorf("sessions is on networks %v, want only sessions", got)
	}
	if got := nets(disp); !slices.Equal(got, []string{"default", "sessions"}) {
		t.Errorf("dispatcher is on networks %v, want default and sessions", got)
	}
	for name, svc := range project.Services {
		if name != "dispatcher" && name != "sessions" && slices.Contains(nets(svc), "sessions") {
			t.Errorf("%s is on the sessions network", name)
		}
	}
	mounts := func(svc composetypes.ServiceConfig) map[string]string {
		out := map[string]string{}
		for _, v := range svc.Volumes {
			out[v.Source] = v.Target
		}
		return out
	}
	dm := mounts(disp)
	var shared []string
	for src, target := range mounts(sess) {
		if _, ok := dm[src]; ok {
			shared = append(shared, src)
			if dm[src] != target {
				t.Errorf("%s is mounted at %s in the dispatcher, %s in sessions: the paths the dispatcher hands sessions must hold", src, dm[src], target)
			}
		}
		if strings.Contains(src, "secrets") || strings.HasSuffix(src, ".nk") || strings.HasSuffix(src, ".env") {
			t.Errorf("sessions mounts %s", src)
		}
	}
	slices.Sort(shared)
	if !slices.Equal(shared, []string{"session-host", "workspace"}) {
		t.Errorf("dispatcher and sessions share %v, want only the workspace and the session host's socket directory", shared)
	}
	env := disp.Environment
	for k, want := range map[string]string{"LOOP_TMUX_BINARY": "/usr/local/libexec/the-loop/tmux",
		"LOOP_SESSION_ENDPOINT_HOST": "hostname", "LOOP_WORKSPACE_SHARED": "true"} {
		if v := env[k]; v == nil || *v != want {
			t.Errorf("dispatcher %s = %v, want %s", k, v, want)
		}
	}
	if v := env["LOOP_SESSION_ADDR"]; v == nil || strings.HasPrefix(*v, "127.") {
		t.Errorf("dispatcher LOOP_SESSION_ADDR = %v: the sessions' container cannot reach its loopback", v)
	}
	if dep, ok := disp.DependsOn["sessions"]; !ok || dep.Condition != composetypes.ServiceConditionHealthy {
		t.Error("the dispatcher does not wait for the session host")
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

// rendered is one kustomization, built.
type rendered struct {
	name string
	res  []*unstructured.Unstructured
}

// kustomizations are the two overlays and a test kustomization that adds
// every component to the base, so that components no overlay uses are
// rendered and validated too.
func kustomizations(t *testing.T) []rendered {
	t.Helper()
	overlays, err := filepath.Glob("k8s/overlays/*")
	if err != nil || len(overlays) < 2 {
		t.Fatalf("overlays: %v %v", overlays, err)
	}
	components, err := filepath.Glob("k8s/components/*")
	if err != nil || len(components) < 3 {
		t.Fatalf("components: %v %v", components, err)
	}
	// Kustomize takes no absolute path: the test kustomization sits
	// beside the overlays for the test's duration.
	all, err := os.MkdirTemp("k8s", ".all-components-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(all) })
	k := "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n  - ../base\ncomponents:\n"
	for _, c := range components {
		k += "  - ../components/" + filepath.Base(c) + "\n"
	}
	if err := os.WriteFile(filepath.Join(all, "kustomization.yaml"), []byte(k), 0o600); err != nil {
		t.Fatal(err)
	}
	opts := krusty.MakeDefaultOptions()
	var out []rendered
	for _, dir := range append(overlays, all) {
		name := filepath.Base(dir)
		if dir == all {
			name = "base+all-components"
		}
		resmap, err := krusty.MakeKustomizer(opts).Run(filesys.MakeFsOnDisk(), dir)
		if err != nil {
			t.Fatalf("kustomize build %s: %v", name, err)
		}
		r := rendered{name: name}
		for _, res := range resmap.Resources() {
			js, err := res.MarshalJSON()
			if err != nil {
				t.Fatal(err)
			}
			u := &unstructured.Unstructured{}
			if err := u.UnmarshalJSON(js); err != nil {
				t.Fatal(err)
			}
			r.res = append(r.res, u)
		}
		out = append(out, r)
	}
	return out
}

// TestKubernetesOverlays renders every overlay (and the base with every
// component) and validates each object twice: decoded strictly into the
// Kubernetes API types, and against the API's schema (the OpenAPI-derived
// schema client-go's apply configurations use), which refuses a field the
// API does not have and a value of the wrong type. Then it checks what an
// operator expects of each service: its PDB, its three probes, resources,
// a non-root security context, and no secret in an environment variable's
// plain value.
func TestKubernetesOverlays(t *testing.T) {
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{corev1.AddToScheme, appsv1.AddToScheme, policyv1.AddToScheme, autoscalingv2.AddToScheme, networkingv1.AddToScheme, batchv1.AddToScheme} {
		if err := add(scheme); err != nil {
			t.Fatal(err)
		}
	}
	decoder := serializer.NewCodecFactory(scheme, serializer.EnableStrict).UniversalDeserializer()
	schema := applyconfigurations.NewTypeConverter(scheme)
	types := settingTypes(t)
	adminPort := defaultPort(t, "LOOP_ADMIN_ADDR")

	for _, k := range kustomizations(t) {
		t.Run(k.name, func(t *testing.T) {
			deployments := map[string]*appsv1.Deployment{}
			pdbs := map[string]*policyv1.PodDisruptionBudget{}
			hpas := map[string]bool{}
			configMaps := map[string]*corev1.ConfigMap{}
			policies := map[string]*networkingv1.NetworkPolicy{}
			var nats *appsv1.StatefulSet
			var provision *batchv1.Job
			kinds := map[string]int{}
			for _, u := range k.res {
				kind, name := u.GetKind(), u.GetName()
				kinds[kind]++
				js, err := u.MarshalJSON()
				if err != nil {
					t.Fatal(err)
				}
				if kind == "ServiceMonitor" {
					dec := json.NewDecoder(bytes.NewReader(js))
					dec.DisallowUnknownFields()
					var sm serviceMonitor
					if err := dec.Decode(&sm); err != nil {
						t.Errorf("ServiceMonitor %s: %v", name, err)
					}
					if len(sm.Spec.Endpoints) == 0 || sm.Spec.Endpoints[0].Path != "/metrics" {
						t.Errorf("ServiceMonitor %s does not scrape /metrics: %+v", name, sm.Spec.Endpoints)
					}
					continue
				}
				if _, err := schema.ObjectToTyped(u); err != nil {
					t.Errorf("%s/%s does not validate against the API schema: %v", kind, name, err)
				}
				obj, _, err := decoder.Decode(js, nil, nil)
				if err != nil {
					t.Errorf("%s/%s does not decode strictly: %v", kind, name, err)
					continue
				}
				switch o := obj.(type) {
				case *appsv1.Deployment:
					deployments[o.Name] = o
					checkPodHardened(t, "Deployment/"+o.Name, o.Spec.Template.Spec)
				case *appsv1.StatefulSet:
					checkPodHardened(t, "StatefulSet/"+o.Name, o.Spec.Template.Spec)
					if o.Name == "nats" {
						nats = o
					}
				case *policyv1.PodDisruptionBudget:
					pdbs[o.Name] = o
				case *autoscalingv2.HorizontalPodAutoscaler:
					hpas[o.Spec.ScaleTargetRef.Name] = true
				case *corev1.ConfigMap:
					configMaps[o.Name] = o
				case *batchv1.Job:
					if o.Name == "the-loop-provision" {
						provision = o
					}
				case *networkingv1.NetworkPolicy:
					policies[o.Name] = o
				}
			}
			for _, kind := range []string{"StatefulSet", "PodDisruptionBudget", "NetworkPolicy", "ConfigMap"} {
				if kinds[kind] == 0 {
					t.Errorf("no %s rendered", kind)
				}
			}
			if nats == nil || nats.Spec.Replicas == nil {
				t.Fatal("no NATS StatefulSet with replicas")
			}
			checkNATS(t, nats, configMaps, pdbs["nats"])
			checkProvisionJob(t, provision, nats, policies["nats"])
			for _, name := range theServices {
				d, ok := deployments[name]
				if !ok {
					t.Errorf("no Deployment %s", name)
					continue
				}
				checkDeployment(t, d, name, types, adminPort)
				checkPDB(t, name, pdbs[name], d)
				// The HPA owns the replica count of what it scales.
				if hpas[name] && d.Spec.Replicas != nil {
					t.Errorf("%s: replicas %d set on a Deployment its HPA manages", name, *d.Spec.Replicas)
				}
				// Streams cannot have more replicas than there are servers.
				for _, e := range d.Spec.Template.Spec.Containers[0].Env {
					if e.Name == "LOOP_STREAM_REPLICAS" && e.Value != fmt.Sprint(*nats.Spec.Replicas) {
						t.Errorf("%s: LOOP_STREAM_REPLICAS=%s with %d NATS servers", name, e.Value, *nats.Spec.Replicas)
					}
				}
			}
			if k.name == "prod" {
				for name, d := range deployments {
					if img := d.Spec.Template.Spec.Containers[0].Image; strings.HasSuffix(img, ":latest") || !strings.Contains(img, ":") {
						t.Errorf("prod %s runs %s: pin the tag", name, img)
					}
				}
				if *nats.Spec.Replicas != 3 {
					t.Errorf("prod runs %d NATS servers, want 3", *nats.Spec.Replicas)
				}
				if kinds["Ingress"] == 0 || len(hpas) == 0 {
					t.Errorf("prod has %d Ingress and HPAs for %v", kinds["Ingress"], hpas)
				}
			}
			// A cluster without the Prometheus Operator refuses a
			// ServiceMonitor: only the monitoring component brings one.
			if k.name != "base+all-components" && kinds["ServiceMonitor"] > 0 {
				t.Errorf("%s renders a ServiceMonitor without the monitoring component", k.name)
			}
		})
	}
}

// checkProvisionJob: the Job runs `the-loop provision` with the operator's
// seed alone, with the services' stream replicas, non-root, and NATS's
// network policy lets its pod in
// (docs/decisions/098-provisioning-is-the-operators.md).
func checkProvisionJob(t *testing.T, j *batchv1.Job, nats *appsv1.StatefulSet, policy *networkingv1.NetworkPolicy) {
	t.Helper()
	if j == nil {
		t.Error("no Job the-loop-provision")
		return
	}
	spec := j.Spec.Template.Spec
	checkPodHardened(t, "Job the-loop-provision", spec)
	if len(spec.Containers) != 1 || !slices.Equal(spec.Containers[0].Args, []string{"provision"}) {
		t.Fatalf("the-loop-provision runs %+v, want one container with args [provision]", spec.Containers)
	}
	if spec.RestartPolicy != corev1.RestartPolicyOnFailure && spec.RestartPolicy != corev1.RestartPolicyNever {
		t.Errorf("the-loop-provision restartPolicy %q", spec.RestartPolicy)
	}
	c := spec.Containers[0]
	if c.TerminationMessagePolicy != corev1.TerminationMessageFallbackToLogsOnError {
		t.Errorf("the-loop-provision: terminationMessagePolicy %q, want FallbackToLogsOnError (its last line says why it failed)", c.TerminationMessagePolicy)
	}
	env := map[string]string{}
	for _, e := range c.Env {
		env[e.Name] = e.Value
	}
	if env["LOOP_NATS_NKEY_FILE"] == "" || env["LOOP_STREAM_REPLICAS"] != fmt.Sprint(*nats.Spec.Replicas) {
		t.Errorf("the-loop-provision env %v: want LOOP_NATS_NKEY_FILE and LOOP_STREAM_REPLICAS=%d", env, *nats.Spec.Replicas)
	}
	var keys []string
	for _, v := range spec.Volumes {
		if v.Secret != nil && v.Secret.SecretName == "the-loop-nats" {
			for _, it := range v.Secret.Items {
				keys = append(keys, it.Key)
			}
		}
	}
	if !slices.Equal(keys, []string{"operator.nk"}) {
		t.Errorf("the-loop-provision mounts the-loop-nats keys %v, want only operator.nk", keys)
	}
	if sc := spec.SecurityContext; sc == nil || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot {
		t.Error("the-loop-provision may run as root")
	}
	if c.SecurityContext == nil || c.SecurityContext.ReadOnlyRootFilesystem == nil || !*c.SecurityContext.ReadOnlyRootFilesystem {
		t.Error("the-loop-provision's root filesystem is writable")
	}
	admitted := false
	if policy != nil {
		pod := labels.Set(j.Spec.Template.Labels)
		for _, rule := range policy.Spec.Ingress {
			for _, from := range rule.From {
				if from.PodSelector == nil {
					continue
				}
				sel, err := metav1.LabelSelectorAsSelector(from.PodSelector)
				if err == nil && sel.Matches(pod) && slices.ContainsFunc(rule.Ports, func(p networkingv1.NetworkPolicyPort) bool {
					return p.Port != nil && p.Port.IntValue() == 4222
				}) {
					admitted = true
				}
			}
		}
	}
	if !admitted {
		t.Error("NATS's network policy does not let the provision Job's pod reach port 4222")
	}
}

// checkPodHardened: every container of a workload — NATS, its exporter,
// the services, the sessions — runs as a non-root user, on a read-only root
// filesystem, with no capability, no privilege escalation and the
// runtime's default seccomp profile.
func checkPodHardened(t *testing.T, name string, spec corev1.PodSpec) {
	t.Helper()
	pod := spec.SecurityContext
	if pod == nil {
		pod = &corev1.PodSecurityContext{}
	}
	for _, c := range append(slices.Clone(spec.InitContainers), spec.Containers...) {
		sc := c.SecurityContext
		if sc == nil {
			t.Errorf("%s: container %s has no security context", name, c.Name)
			continue
		}
		nonRoot := sc.RunAsNonRoot
		if nonRoot == nil {
			nonRoot = pod.RunAsNonRoot
		}
		uid := sc.RunAsUser
		if uid == nil {
			uid = pod.RunAsUser
		}
		if nonRoot == nil || !*nonRoot || uid == nil || *uid == 0 {
			t.Errorf("%s: container %s may run as root (runAsNonRoot %v, runAsUser %v)", name, c.Name, nonRoot, uid)
		}
		seccomp := sc.SeccompProfile
		if seccomp == nil {
			seccomp = pod.SeccompProfile
		}
		if seccomp == nil || seccomp.Type != corev1.SeccompProfileTypeRuntimeDefault {
			t.Errorf("%s: container %s seccomp profile %+v, want RuntimeDefault", name, c.Name, seccomp)
		}
		if sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
			t.Errorf("%s: container %s root filesystem is writable", name, c.Name)
		}
		if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
			t.Errorf("%s: container %s allows privilege escalation", name, c.Name)
		}
		if sc.Capabilities == nil || !slices.Contains(sc.Capabilities.Drop, "ALL") || len(sc.Capabilities.Add) > 0 {
			t.Errorf("%s: container %s capabilities %+v, want drop ALL and none added", name, c.Name, sc.Capabilities)
		}
		if sc.Privileged != nil && *sc.Privileged {
			t.Errorf("%s: container %s is privileged", name, c.Name)
		}
	}
	if spec.HostNetwork || spec.HostPID || spec.HostIPC {
		t.Errorf("%s: shares a host namespace", name)
	}
}

// checkPDB: every service has a PodDisruptionBudget that selects its pods
// and never blocks a drain (at least one pod may always go).
func checkPDB(t *testing.T, name string, pdb *policyv1.PodDisruptionBudget, d *appsv1.Deployment) {
	t.Helper()
	if pdb == nil {
		t.Errorf("%s: no PodDisruptionBudget", name)
		return
	}
	sel, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector)
	if err != nil || !sel.Matches(labels.Set(d.Spec.Template.Labels)) {
		t.Errorf("%s: the PodDisruptionBudget's selector %v does not select its pods", name, pdb.Spec.Selector)
	}
	if pdb.Spec.MaxUnavailable == nil || pdb.Spec.MaxUnavailable.IntValue() < 1 {
		t.Errorf("%s: PodDisruptionBudget %+v may block a drain; want maxUnavailable ≥ 1", name, pdb.Spec)
	}
}

// checkNATS: the NATS servers run the tested version with authorization,
// the prometheus-nats-exporter sidecar, a PDB that keeps quorum without
// blocking a drain, and a pid_file for the lame-duck preStop.
func checkNATS(t *testing.T, s *appsv1.StatefulSet, configMaps map[string]*corev1.ConfigMap, pdb *policyv1.PodDisruptionBudget) {
	t.Helper()
	spec := s.Spec.Template.Spec
	var server, exporter *corev1.Container
	for i := range spec.Containers {
		switch c := &spec.Containers[i]; {
		case strings.HasPrefix(c.Image, "nats:"):
			server = c
		case strings.Contains(c.Image, "prometheus-nats-exporter"):
			exporter = c
		}
	}
	if server == nil {
		t.Fatal("no nats-server container")
	}
	if want := "nats:" + strings.TrimPrefix(natsServerVersion(t), "v") + "-alpine"; server.Image != want {
		t.Errorf("NATS image %s, want %s (the version the tests run)", server.Image, want)
	}
	if exporter == nil || !slices.Contains(exporter.Args, "http://localhost:8222") {
		t.Errorf("no prometheus-nats-exporter sidecar reading the monitoring port: %+v", exporter)
	}
	conf := ""
	for name, cm := range configMaps {
		if strings.HasPrefix(name, "nats-config") {
			conf = cm.Data["nats.conf"]
		}
	}
	if !strings.Contains(conf, "include ./auth/auth.conf") {
		t.Error("NATS runs without the authorization block")
	}
	if pre := server.Lifecycle; pre != nil && pre.PreStop != nil && pre.PreStop.Exec != nil {
		for _, a := range pre.PreStop.Exec.Command {
			if pid, ok := strings.CutPrefix(a, "-sl=ldm="); ok && !strings.Contains(conf, "pid_file: "+pid) {
				t.Errorf("the preStop signals the server through %s, which nats.conf does not write", pid)
			}
		}
	}
	if pdb == nil || pdb.Spec.MaxUnavailable == nil || pdb.Spec.MaxUnavailable.IntValue() != 1 {
		t.Errorf("NATS PodDisruptionBudget %+v: want maxUnavailable 1", pdb)
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
	if sc := spec.SecurityContext; sc == nil || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot || sc.RunAsUser == nil || *sc.RunAsUser == 0 {
		t.Errorf("%s: the pod must run as a non-root user: %+v", name, sc)
	}
	if name == "dispatcher" {
		checkSessionsContainer(t, spec)
	} else if len(spec.Containers) != 1 {
		t.Fatalf("%s: %d containers", name, len(spec.Containers))
	}
	c := spec.Containers[0]
	if !slices.Equal(c.Args, []string{"serve", name}) {
		t.Errorf("%s: args %q, want [serve %s]", name, c.Args, name)
	}
	wantImage := "ghcr.io/the-loop/bus:"
	if name == "dispatcher" {
		wantImage = "ghcr.io/the-loop/bus-session:" // tmux, git and the harness
	}
	if !strings.HasPrefix(c.Image, wantImage) {
		t.Errorf("%s: image %s, want %s…", name, c.Image, wantImage)
	}
	if sc := c.SecurityContext; sc == nil || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
		sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem || sc.Capabilities == nil || !slices.Contains(sc.Capabilities.Drop, "ALL") {
		t.Errorf("%s: container security context %+v", name, sc)
	}
	if c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero() || c.Resources.Limits.Memory().IsZero() {
		t.Errorf("%s: resources %+v, want CPU and memory requests and a memory limit", name, c.Resources)
	}
	// A service missing a required setting exits 1 with one line naming
	// it: the pod's status must show that line, not an empty reason.
	if c.TerminationMessagePolicy != corev1.TerminationMessageFallbackToLogsOnError {
		t.Errorf("%s: terminationMessagePolicy %q, want FallbackToLogsOnError (the line a missing setting ends it with)", name, c.TerminationMessagePolicy)
	}
	for _, r := range requiredSettings[name] {
		if !slices.ContainsFunc(c.Env, func(e corev1.EnvVar) bool {
			return e.Name == r && e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil
		}) {
			t.Errorf("%s: requires %s, which its env does not take from a Secret", name, r)
		}
	}
	for _, e := range c.Env {
		typ, known := types[e.Name]
		fromSecret := e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil
		switch {
		case !known && !strings.HasPrefix(e.Name, "LOOP_") && fromSecret:
			// The harness's own credential (ANTHROPIC_API_KEY), which
			// the dispatcher hands to sessions by LOOP_SESSION_ENV.
		case name == "dispatcher" && e.Name == "HOME" && !fromSecret:
			// The sessions' HOME, on the workspace they share.
		case !known:
			t.Errorf("%s: env %s is not a setting the-loop reads", name, e.Name)
		case typ == "Secret" && (e.Value != "" || !fromSecret):
			t.Errorf("%s: secret %s must come from a Secret reference, never a plain value", name, e.Name)
		}
		if fromSecret && e.Value != "" {
			t.Errorf("%s: %s has a plain value beside its Secret reference", name, e.Name)
		}
	}
	ports := map[string]string{}
	for _, p := range c.Ports {
		ports[p.Name] = fmt.Sprint(p.ContainerPort)
	}
	if ports["admin"] != adminPort {
		t.Errorf("%s: admin port %q, LOOP_ADMIN_ADDR defaults to %s", name, ports["admin"], adminPort)
	}
	if p := c.StartupProbe; p == nil || p.HTTPGet == nil || p.HTTPGet.Path != "/healthz" {
		t.Errorf("%s: startup probe must be /healthz (a NATS outage at start is readiness's business)", name)
	} else {
		// The admin port opens once streams and consumers are
		// provisioned, which a service allows 30 s a replica: the
		// kubelet must not kill it sooner.
		replicas := 1
		for _, e := range c.Env {
			if e.Name == "LOOP_STREAM_REPLICAS" {
				fmt.Sscan(e.Value, &replicas)
			}
		}
		if budget := p.PeriodSeconds * p.FailureThreshold; int(budget) < 30*replicas+10 {
			t.Errorf("%s: the startup probe allows %ds, provisioning R%d up to %ds", name, budget, replicas, 30*replicas)
		}
	}
	if p := c.ReadinessProbe; p == nil || p.HTTPGet == nil || p.HTTPGet.Path != "/readyz" {
		t.Errorf("%s: readiness must be /readyz", name)
	}
	if p := c.LivenessProbe; p == nil || p.HTTPGet == nil || p.HTTPGet.Path != "/healthz" {
		t.Errorf("%s: liveness must be /healthz (never tied to NATS)", name)
	}
}

// checkSessionsContainer: the dispatcher's pod runs the agent sessions in a
// second container (docs/decisions/101-sessions-in-their-own-container.md):
// the session image's session host, another uid than the dispatcher's and
// the pod's fsGroup as its group, no Secret in any form, no loop setting,
// and only the workspace and the socket directory shared with the
// dispatcher, whose bus identity is mounted in the dispatcher container
// alone.
func checkSessionsContainer(t *testing.T, spec corev1.PodSpec) {
	t.Helper()
	if len(spec.Containers) != 2 || spec.Containers[0].Name != "dispatcher" || spec.Containers[1].Name != "sessions" {
		t.Fatalf("dispatcher: containers %d, want dispatcher and sessions", len(spec.Containers))
	}
	disp, sess := spec.Containers[0], spec.Containers[1]
	if sess.Image != disp.Image || len(sess.Args) == 0 || sess.Args[0] != "session-host" {
		t.Errorf("sessions runs %s %q, want the dispatcher's image (%s) and the session host", sess.Image, sess.Args, disp.Image)
	}
	pod := spec.SecurityContext
	sc := sess.SecurityContext
	if pod == nil || pod.RunAsUser == nil || pod.FSGroup == nil || sc == nil || sc.RunAsUser == nil || sc.RunAsGroup == nil ||
		*sc.RunAsUser == *pod.RunAsUser || *sc.RunAsGroup != *pod.FSGroup {
		t.Errorf("sessions security context %+v in pod %+v: want another uid than the dispatcher's, the pod's fsGroup as its group", sc, pod)
	}
	for _, e := range sess.Env {
		if e.ValueFrom != nil || strings.HasPrefix(e.Name, "LOOP_") {
			t.Errorf("sessions sets %s (%+v): it holds no credential and no loop setting", e.Name, e.ValueFrom)
		}
	}
	if len(sess.EnvFrom) > 0 {
		t.Errorf("sessions takes its environment from %+v", sess.EnvFrom)
	}
	secretVolumes := map[string]bool{}
	for _, v := range spec.Volumes {
		if v.Secret != nil || v.Projected != nil {
			secretVolumes[v.Name] = true
		}
	}
	mounted := func(c corev1.Container) map[string]string {
		out := map[string]string{}
		for _, m := range c.VolumeMounts {
			out[m.Name] = m.MountPath
		}
		return out
	}
	dm, sm := mounted(disp), mounted(sess)
	var shared []string
	for v, path := range sm {
		if secretVolumes[v] {
			t.Errorf("sessions mounts the secret volume %s", v)
		}
		if dpath, ok := dm[v]; ok {
			shared = append(shared, v)
			if dpath != path {
				t.Errorf("%s is at %s in the dispatcher, %s in sessions", v, dpath, path)
			}
		}
	}
	slices.Sort(shared)
	if !slices.Equal(shared, []string{"session-host", "workspace"}) {
		t.Errorf("dispatcher and sessions share %v, want only the workspace and the session host's socket directory", shared)
	}
	seed := false
	for v := range dm {
		seed = seed || secretVolumes[v]
	}
	if !seed {
		t.Error("the dispatcher container does not mount its bus identity")
	}
	env := map[string]string{}
	for _, e := range disp.Env {
		env[e.Name] = e.Value
	}
	if env["LOOP_TMUX_BINARY"] != "/usr/local/libexec/the-loop/tmux" || env["LOOP_WORKSPACE_SHARED"] != "true" {
		t.Errorf("the dispatcher's LOOP_TMUX_BINARY %q, LOOP_WORKSPACE_SHARED %q: its tmux must be the session host's", env["LOOP_TMUX_BINARY"], env["LOOP_WORKSPACE_SHARED"])
	}
}

// TestComposeClusterProfile: deploy/nats/cluster.env turns the compose file
// into a three-node JetStream cluster — nats, nats-2 and nats-3 each running
// cluster.conf with the authorization block, routes to all three — and gives
// every service R3 and every server's URL.
func TestComposeClusterProfile(t *testing.T) {
	// As `docker compose --env-file deploy/nats/cluster.env` reads it.
	project := loadCompose(t, cli.WithEnvFiles("nats/cluster.env"), cli.WithDotEnv, cli.WithProfiles([]string{"cluster"}))
	conf, err := os.ReadFile("nats/cluster.conf")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"include ./auth/auth.conf", "server_name: $HOSTNAME"} {
		if !strings.Contains(string(conf), want) {
			t.Errorf("cluster.conf lacks %q", want)
		}
	}
	for _, n := range []string{"nats", "nats-2", "nats-3"} {
		svc, ok := project.Services[n]
		if !ok {
			t.Errorf("the cluster profile has no %s", n)
			continue
		}
		if svc.Hostname != n {
			t.Errorf("%s hostname %q: the server's name must be stable", n, svc.Hostname)
		}
		mounted := map[string]string{}
		for _, v := range svc.Volumes {
			mounted[v.Target] = v.Source
		}
		if !strings.HasSuffix(mounted["/etc/nats/nats.conf"], filepath.Join("deploy", "nats", "cluster.conf")) ||
			!strings.HasSuffix(mounted["/etc/nats/auth/auth.conf"], filepath.Join("deploy", "secrets", "auth.conf")) ||
			!strings.HasSuffix(mounted["/etc/nats/auth/routes.conf"], filepath.Join("deploy", "secrets", "routes.conf")) {
			t.Errorf("%s mounts %v, want cluster.conf, the authorization block and the route credential", n, mounted)
		}
	}
	for _, name := range theServices {
		e := project.Services[name].Environment
		if r := e["LOOP_STREAM_REPLICAS"]; r == nil || *r != "3" {
			t.Errorf("%s LOOP_STREAM_REPLICAS = %v under the cluster profile, want 3", name, r)
		}
		if u := e["LOOP_NATS_URL"]; u == nil || strings.Count(*u, "nats://") != 3 {
			t.Errorf("%s LOOP_NATS_URL = %v, want the three servers", name, u)
		}
	}
}

// TestDockerBuild: the build context is an allow-list that never holds a
// secret, and the Dockerfile's two targets are what compose and Kubernetes
// run.
func TestDockerBuild(t *testing.T) {
	ignore, err := os.ReadFile("../.dockerignore")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(ignore), "\n")
	if !slices.Contains(lines, "*") {
		t.Error(".dockerignore does not start from excluding everything")
	}
	for _, l := range lines {
		for _, secret := range []string{".env", ".the-loop", "deploy", ".git"} {
			if strings.HasPrefix(l, "!") && strings.HasPrefix(strings.TrimPrefix(l, "!"), secret) {
				t.Errorf(".dockerignore lets %s into the build context", l)
			}
		}
	}
	df, err := os.ReadFile("Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"AS service", "AS session", "ARG STATIC_BASE=", "ARG SESSION_BASE=", "ARG BINARY=",
		"ARG HARNESS=claude-code", "@anthropic-ai/claude-code@${HARNESS_VERSION}", "USER 65532:65532", "VOLUME /workspace",
		// The sessions' own user, of the dispatcher's group, the shared
		// workspace and git's group repositories, and the dispatcher's
		// tmux wrapper (docs/decisions/101-sessions-in-their-own-container.md).
		"useradd --uid 65533 --gid 65532", "chmod 2775 /workspace", "core.sharedRepository group",
		"exec /usr/local/bin/the-loop session-host tmux -- \"$@\"' > /usr/local/libexec/the-loop/tmux"} {
		if !strings.Contains(string(df), want) {
			t.Errorf("deploy/Dockerfile lacks %q", want)
		}
	}
	if m := regexp.MustCompile(`ARG HARNESS_VERSION=(\S+)`).FindStringSubmatch(string(df)); m == nil || !regexp.MustCompile(`^\d+\.\d+\.\d+$`).MatchString(m[1]) {
		t.Errorf("Claude Code is not pinned to a version: %v", m)
	}
	// The session image installs the loop's plugin where its
	// LOOP_HARNESS_PLUGIN_DIR tells the dispatcher to hand it to the harness.
	env := regexp.MustCompile(`LOOP_HARNESS_PLUGIN_DIR=(\S+)`).FindStringSubmatch(string(df))
	inst := regexp.MustCompile(`the-loop plugin install (\S+);`).FindStringSubmatch(string(df))
	if env == nil || inst == nil || env[1] != inst[1] {
		t.Errorf("deploy/Dockerfile installs the plugin in %v, its LOOP_HARNESS_PLUGIN_DIR is %v", inst, env)
	}
	// BINARY=build compiles cmd/the-loop from what the build stage copies:
	// every top-level directory of the module its packages live in.
	out, err := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}}", "../cmd/the-loop").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	const module = "github.com/the-loop/bus/"
	dirs := map[string]bool{}
	for _, p := range strings.Fields(string(out)) {
		if rest, ok := strings.CutPrefix(p, module); ok {
			dirs[strings.Split(rest, "/")[0]] = true
		}
	}
	if len(dirs) == 0 {
		t.Fatal("go list found none of the module's packages")
	}
	for d := range dirs {
		if !strings.Contains(string(df), "COPY "+d+" ./"+d+"\n") || !slices.Contains(lines, "!"+d+"/") {
			t.Errorf("the-loop's packages in %s/ are not in the build stage (deploy/Dockerfile COPY, .dockerignore !%s/)", d, d)
		}
	}
}
