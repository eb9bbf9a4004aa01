package helm

import (
	"encoding/json"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	"helm.sh/helm/v3/pkg/lint"
	"helm.sh/helm/v3/pkg/lint/support"
	"helm.sh/helm/v3/pkg/releaseutil"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/client-go/applyconfigurations"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"
)

// chartDir is the chart; k8sDir the kustomize tree it mirrors.
const (
	chartDir = "the-loop"
	k8sDir   = "../k8s"
)

// hashSuffix is the content hash kustomize appends to a generated name.
var hashSuffix = regexp.MustCompile(`^(.+)-[a-z0-9]{10}$`)

// key names an object: its kind and name.
type key struct{ kind, name string }

func (k key) String() string { return k.kind + "/" + k.name }

// objects are rendered objects by kind and name.
type objects map[key]*unstructured.Unstructured

func (o objects) keys() []key {
	out := make([]key, 0, len(o))
	for k := range o {
		out = append(out, k)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].String() < out[j].String() })
	return out
}

// kustomized renders a kustomization of deploy/k8s, as deploy/deploy_test.go
// does, from an in-memory copy of the tree (so that a kustomization the test
// adds never touches the work tree). It returns the objects (Namespace objects
// left out: a chart is installed into one, --create-namespace) under their
// original names, and the generated ConfigMaps' hashed names mapped to those.
func kustomized(t *testing.T, dir string, extra map[string]string) (objects, map[string]string) {
	t.Helper()
	mem := filesys.MakeFsInMemory()
	err := filepath.WalkDir(k8sDir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || strings.HasPrefix(d.Name(), ".") {
			return err
		}
		rel, err := filepath.Rel(k8sDir, path)
		if err != nil {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return mem.WriteFile(filepath.Join("/k8s", rel), b)
	})
	if err != nil {
		t.Fatal(err)
	}
	for path, content := range extra {
		if err := mem.WriteFile(filepath.Join("/k8s", path), []byte(content)); err != nil {
			t.Fatal(err)
		}
	}
	resmap, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(mem, filepath.Join("/k8s", dir))
	if err != nil {
		t.Fatalf("kustomize build %s: %v", dir, err)
	}
	// A generated ConfigMap's name ends in the hash of its content.
	hashed := map[string]string{}
	for _, res := range resmap.Resources() {
		if m := hashSuffix.FindStringSubmatch(res.GetName()); res.GetKind() == "ConfigMap" && m != nil {
			hashed[res.GetName()] = m[1]
		}
	}
	out := objects{}
	for _, res := range resmap.Resources() {
		js, err := res.MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		// References to a generated ConfigMap name it by its hash.
		s := string(js)
		for h, orig := range hashed {
			s = strings.ReplaceAll(s, `"`+h+`"`, `"`+orig+`"`)
		}
		u := &unstructured.Unstructured{}
		if err := u.UnmarshalJSON([]byte(s)); err != nil {
			t.Fatal(err)
		}
		if u.GetKind() == "Namespace" {
			continue
		}
		out[key{u.GetKind(), u.GetName()}] = u
	}
	return out, hashed
}

// mergeValues merges src into dst as Helm merges values files and --set:
// maps key by key, anything else replaced.
func mergeValues(dst, src map[string]any) map[string]any {
	for k, v := range src {
		if sm, ok := v.(map[string]any); ok {
			if dm, ok := dst[k].(map[string]any); ok {
				dst[k] = mergeValues(dm, sm)
				continue
			}
		}
		dst[k] = v
	}
	return dst
}

// chartRender renders the chart as `helm template --namespace ns -f FILE…`
// with more values last (as --set), through Helm's own loader and engine.
// It returns the objects and the rendered NOTES.txt.
func chartRender(t *testing.T, ns string, files []string, more map[string]any) (objects, string) {
	t.Helper()
	rendered, err := helmTemplate(t, ns, files, more)
	if err != nil {
		t.Fatalf("helm template: %v", err)
	}
	return objectsOf(t, rendered)
}

// helmTemplate renders the chart's templates as `helm template` does.
func helmTemplate(t *testing.T, ns string, files []string, more map[string]any) (map[string]string, error) {
	t.Helper()
	ch, err := loader.Load(chartDir)
	if err != nil {
		t.Fatalf("helm loads %s: %v", chartDir, err)
	}
	vals := map[string]any{}
	for _, f := range files {
		v, err := chartutil.ReadValuesFile(filepath.Join(chartDir, f))
		if err != nil {
			t.Fatal(err)
		}
		vals = mergeValues(vals, v)
	}
	vals = mergeValues(vals, more)
	rv, err := chartutil.ToRenderValues(ch, vals, chartutil.ReleaseOptions{Name: "the-loop", Namespace: ns, Revision: 1, IsInstall: true}, chartutil.DefaultCapabilities)
	if err != nil {
		t.Fatal(err)
	}
	return engine.Render(ch, rv)
}

// objectsOf parses Helm's rendered templates into objects, and returns the
// rendered NOTES.txt beside them.
func objectsOf(t *testing.T, rendered map[string]string) (objects, string) {
	t.Helper()
	out := objects{}
	var notes string
	names := make([]string, 0, len(rendered))
	for n := range rendered {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, name := range names {
		content := rendered[name]
		if strings.HasSuffix(name, "NOTES.txt") {
			notes = content
			continue
		}
		for _, doc := range releaseutil.SplitManifests(content) {
			u := &unstructured.Unstructured{}
			if err := yaml.Unmarshal([]byte(doc), &u.Object); err != nil {
				t.Fatalf("%s does not parse as YAML: %v\n%s", name, err, doc)
			}
			if len(u.Object) == 0 {
				continue
			}
			k := key{u.GetKind(), u.GetName()}
			if _, dup := out[k]; dup {
				t.Errorf("the chart renders %s twice", k)
			}
			out[k] = u
		}
	}
	return out, notes
}

var (
	scheme  = runtime.NewScheme()
	decoder runtime.Decoder
	schema  = applyconfigurations.NewTypeConverter(scheme)
)

func init() {
	for _, add := range []func(*runtime.Scheme) error{corev1.AddToScheme, appsv1.AddToScheme, policyv1.AddToScheme, autoscalingv2.AddToScheme, networkingv1.AddToScheme, batchv1.AddToScheme} {
		if err := add(scheme); err != nil {
			panic(err)
		}
	}
	decoder = serializer.NewCodecFactory(scheme, serializer.EnableStrict).UniversalDeserializer()
}

// typed decodes an object strictly into its Kubernetes API type, validates it
// against the API's schema (a ServiceMonitor, not an API type here, stays
// unstructured), and returns it as the API type marshals it: the form two
// objects are compared in, so that 4222 and "4222", or 1024Mi and 1Gi, are
// not told apart where the API does not.
func typed(t *testing.T, who string, u *unstructured.Unstructured) map[string]any {
	t.Helper()
	js, err := u.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	if u.GetKind() != "ServiceMonitor" {
		if _, err := schema.ObjectToTyped(u); err != nil {
			t.Errorf("%s %s/%s does not validate against the API schema: %v", who, u.GetKind(), u.GetName(), err)
		}
		obj, _, err := decoder.Decode(js, nil, nil)
		if err != nil {
			t.Errorf("%s %s/%s does not decode strictly: %v", who, u.GetKind(), u.GetName(), err)
		} else if js, err = json.Marshal(obj); err != nil {
			t.Fatal(err)
		}
	}
	var m map[string]any
	if err := json.Unmarshal(js, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

// natsConfStatements is nats.conf without its comments and blank lines.
func natsConfStatements(conf string) []string {
	var out []string
	for _, line := range strings.Split(conf, "\n") {
		if line = strings.TrimSpace(line); line != "" && !strings.HasPrefix(line, "#") {
			out = append(out, line)
		}
	}
	return out
}

// registry is the registry host an image reference starts with, if any.
func registry(image string) string {
	first, _, ok := strings.Cut(image, "/")
	if ok && (strings.ContainsAny(first, ".:") || first == "localhost") {
		return first
	}
	return ""
}

// withoutRegistry replaces every image reference of an object (any "image"
// field) by the reference without its registry.
func withoutRegistry(v any) {
	switch v := v.(type) {
	case map[string]any:
		for k, x := range v {
			if s, ok := x.(string); ok && k == "image" {
				if r := registry(s); r != "" {
					v[k] = strings.TrimPrefix(s, r+"/")
				}
				continue
			}
			withoutRegistry(x)
		}
	case []any:
		for _, x := range v {
			withoutRegistry(x)
		}
	}
}

// compare checks that the chart renders exactly the kustomization's objects:
// the same kinds and names, and each the same once decoded into its API type,
// but for what only a chart adds: Helm's labels beside the base's, its hook
// annotations, and the config checksums on pod templates (a kustomize
// ConfigMap's hashed name does that job). nats.conf is compared without its
// comments.
func compare(t *testing.T, kust, chart objects, ignoreRegistry bool) {
	t.Helper()
	if got, want := chart.keys(), kust.keys(); !slices.Equal(got, want) {
		t.Errorf("the chart renders\n  %v\nkustomize\n  %v", got, want)
	}
	for _, k := range kust.keys() {
		c, ok := chart[k]
		if !ok {
			continue
		}
		want, got := typed(t, "kustomize's", kust[k]), typed(t, "the chart's", c)
		wantMeta, _ := want["metadata"].(map[string]any)
		gotMeta, _ := got["metadata"].(map[string]any)
		// Labels: the base's, and Helm's besides.
		wantLabels, _ := wantMeta["labels"].(map[string]any)
		gotLabels, _ := gotMeta["labels"].(map[string]any)
		for l, v := range wantLabels {
			if gotLabels[l] != v {
				t.Errorf("%s: label %s = %v, kustomize's %v", k, l, gotLabels[l], v)
			}
		}
		for _, l := range []string{"helm.sh/chart", "app.kubernetes.io/managed-by", "app.kubernetes.io/instance"} {
			if gotLabels[l] == nil {
				t.Errorf("%s has no label %s", k, l)
			}
		}
		if ns := wantMeta["namespace"]; ns != nil && gotMeta["namespace"] != ns {
			t.Errorf("%s: namespace %v, kustomize's %v", k, gotMeta["namespace"], ns)
		}
		if a, _ := gotMeta["annotations"].(map[string]any); len(a) > 0 {
			for n := range a {
				if !strings.HasPrefix(n, "helm.sh/hook") {
					t.Errorf("%s: annotation %s", k, n)
				}
			}
		}
		if a := wantMeta["annotations"]; a != nil {
			t.Errorf("%s: kustomize renders annotations %v the chart has not", k, a)
		}
		delete(want, "metadata")
		delete(got, "metadata")
		// Pod templates: the checksums only a chart adds.
		if tmpl, ok := nested(got, "spec", "template", "metadata"); ok {
			if a, _ := tmpl["annotations"].(map[string]any); a != nil {
				for n := range a {
					if strings.HasPrefix(n, "checksum/") {
						delete(a, n)
					}
				}
				if len(a) == 0 {
					delete(tmpl, "annotations")
				}
			}
		}
		if k.kind == "ConfigMap" {
			for _, m := range []map[string]any{want, got} {
				if data, ok := m["data"].(map[string]any); ok {
					if conf, ok := data["nats.conf"].(string); ok {
						data["nats.conf"] = natsConfStatements(conf)
					}
				}
			}
		}
		if ignoreRegistry {
			withoutRegistry(want)
		}
		if d := cmp.Diff(want, got); d != "" {
			t.Errorf("%s differs from kustomize's (-kustomize +chart):\n%s", k, d)
		}
	}
}

func nested(m map[string]any, path ...string) (map[string]any, bool) {
	for _, p := range path {
		next, ok := m[p].(map[string]any)
		if !ok {
			return nil, false
		}
		m = next
	}
	return m, true
}

// imageOf is the first container's image of a Deployment.
func imageOf(t *testing.T, o objects, name string) string {
	t.Helper()
	u, ok := o[key{"Deployment", name}]
	if !ok {
		t.Fatalf("no Deployment %s", name)
	}
	cs, _, _ := unstructured.NestedSlice(u.Object, "spec", "template", "spec", "containers")
	if len(cs) == 0 {
		t.Fatalf("Deployment %s has no container", name)
	}
	img, _ := cs[0].(map[string]any)["image"].(string)
	return img
}

// TestChartRendersTheKustomizeObjects renders the chart, with Helm's loader
// and engine, for its default values, values-dev.yaml, values-production.yaml
// and every optional part turned on, and compares each with the kustomization
// it stands for: the base, the dev and prod overlays, and the base with every
// component.
func TestChartRendersTheKustomizeObjects(t *testing.T) {
	allComponents := "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n  - ../base\ncomponents:\n"
	comps, err := filepath.Glob(filepath.Join(k8sDir, "components", "*"))
	if err != nil || len(comps) == 0 {
		t.Fatalf("components: %v %v", comps, err)
	}
	for _, c := range comps {
		allComponents += "  - ../components/" + filepath.Base(c) + "\n"
	}
	on := map[string]any{"enabled": true}
	for _, tc := range []struct {
		name, dir string
		extra     map[string]string
		files     []string
		more      map[string]any
		// the registry of the kustomization's two images is set as
		// image.registry and sessionImage.registry, as an install names its own
		setRegistry bool
		// nats.conf's server_name is left out of the comparison
		serverName bool
	}{
		{name: "default", dir: "base", files: []string{"values.yaml"}},
		// The dev overlay's nats.conf names its one server; the chart's
		// names it by its pod, as the base's does.
		{name: "dev", dir: "overlays/dev", files: []string{"values.yaml", "values-dev.yaml"}, serverName: true},
		{name: "production", dir: "overlays/prod", files: []string{"values.yaml", "values-production.yaml"}, setRegistry: true},
		{name: "every-option", dir: ".all-components", extra: map[string]string{".all-components/kustomization.yaml": allComponents},
			files: []string{"values.yaml"}, setRegistry: true, more: map[string]any{
				"serviceMonitor": on, "ingress": on,
				"services": map[string]any{"ingress-github": map[string]any{"autoscaling": on}, "ingress-slack": map[string]any{"autoscaling": on}},
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			kust, hashed := kustomized(t, tc.dir, tc.extra)
			if len(hashed) != 2 {
				t.Errorf("kustomize generated ConfigMaps %v, want the-loop-config and nats-config", hashed)
			}
			ns := "default"
			if u := kust[key{"StatefulSet", "nats"}]; u != nil && u.GetNamespace() != "" {
				ns = u.GetNamespace()
			}
			more := map[string]any{}
			if tc.setRegistry {
				reg := registry(imageOf(t, kust, "ledger-writer"))
				if reg == "" {
					t.Fatalf("kustomize's image %s names no registry", imageOf(t, kust, "ledger-writer"))
				}
				more["image"] = map[string]any{"registry": reg}
				more["sessionImage"] = map[string]any{"registry": reg}
			}
			chart, notes := chartRender(t, ns, tc.files, mergeValues(more, tc.more))
			if tc.serverName {
				for _, o := range []objects{kust, chart} {
					if cm := o[key{"ConfigMap", "nats-config"}]; cm != nil {
						conf, _, _ := unstructured.NestedString(cm.Object, "data", "nats.conf")
						conf = regexp.MustCompile(`(?m)^server_name: .*$`).ReplaceAllString(conf, "server_name: (any)")
						if err := unstructured.SetNestedField(cm.Object, conf, "data", "nats.conf"); err != nil {
							t.Fatal(err)
						}
					}
				}
			}
			compare(t, kust, chart, !tc.setRegistry)
			for _, s := range []string{"the-loop-nats", "the-loop-nats-auth", "the-loop-secrets", "the-loop-provision"} {
				if !strings.Contains(notes, s) {
					t.Errorf("NOTES.txt does not name %s:\n%s", s, notes)
				}
			}
		})
	}
}

// TestChartValues: what the values change, the chart changes everywhere —
// the Secrets' names, the images, pull secrets, replicas, resources, the
// stream replicas with the servers, the optional parts — and the operator
// config is the kustomize base's, byte for byte.
func TestChartValues(t *testing.T) {
	base, err := os.ReadFile(filepath.Join(k8sDir, "base", "the-loop.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	own, err := os.ReadFile(filepath.Join(chartDir, "files", "the-loop.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if string(own) != string(base) {
		t.Errorf("%s/files/the-loop.yaml differs from deploy/k8s/base/the-loop.yaml: copy it", chartDir)
	}

	chart, notes := chartRender(t, "loop", []string{"values.yaml"}, map[string]any{
		"global": map[string]any{"image": map[string]any{"registry": "example.invalid", "pullSecretNames": []any{"pull"}}},
		"secrets": map[string]any{
			"tokens":         map[string]any{"secretName": "tok"},
			"natsIdentities": map[string]any{"secretName": "ids"},
			"natsAuth":       map[string]any{"secretName": "auth"},
		},
		"sessionImage":        map[string]any{"fullImageName": "elsewhere.invalid/session@sha256:0"},
		"nats":                map[string]any{"replicas": 1, "promExporter": map[string]any{"enabled": false}},
		"networkPolicy":       map[string]any{"enabled": false},
		"podDisruptionBudget": map[string]any{"enabled": false},
		"provision":           map[string]any{"helmHook": false},
		"config":              map[string]any{"contents": "version: \"0.7.0\"\n"},
		"services": map[string]any{
			"ledger-writer": map[string]any{"replicas": 5, "env": map[string]any{"LOOP_PARTITIONS": 24}},
			"dispatcher": map[string]any{"resources": map[string]any{"limits": map[string]any{"memory": "2Gi"}},
				"sessionSecrets": []any{map[string]any{"env": "A_KEY", "key": "a"}, map[string]any{"env": "B_KEY", "key": "b"}}},
		},
	})
	for _, k := range chart.keys() {
		typed(t, "the chart's", chart[k])
		switch k.kind {
		case "NetworkPolicy", "PodDisruptionBudget":
			t.Errorf("%s rendered although disabled", k)
		}
		if k.name == "nats-metrics" {
			t.Errorf("%s rendered without the exporter", k)
		}
		if ns := chart[k].GetNamespace(); ns != "loop" {
			t.Errorf("%s in namespace %q", k, ns)
		}
	}
	var all []map[string]any
	for _, k := range chart.keys() {
		all = append(all, chart[k].Object)
	}
	js, err := json.Marshal(all)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{`"the-loop-secrets"`, `"the-loop-nats"`, `"the-loop-nats-auth"`, "routes.conf", "-jsz=all"} {
		if strings.Contains(string(js), s) {
			t.Errorf("the chart still renders %s", s)
		}
	}
	var podSpecs []corev1.PodSpec
	for _, k := range chart.keys() {
		u := chart[k]
		b, _ := u.MarshalJSON()
		switch k.kind {
		case "Deployment":
			var d appsv1.Deployment
			if err := json.Unmarshal(b, &d); err != nil {
				t.Fatal(err)
			}
			podSpecs = append(podSpecs, d.Spec.Template.Spec)
			img := d.Spec.Template.Spec.Containers[0].Image
			switch {
			case d.Name == "dispatcher" && img != "elsewhere.invalid/session@sha256:0":
				t.Errorf("dispatcher runs %s", img)
			case d.Name != "dispatcher" && img != "example.invalid/the-loop/bus:latest":
				t.Errorf("%s runs %s", d.Name, img)
			}
			env := map[string]corev1.EnvVar{}
			for _, e := range d.Spec.Template.Spec.Containers[0].Env {
				env[e.Name] = e
			}
			if env["LOOP_STREAM_REPLICAS"].Value != "1" {
				t.Errorf("%s: LOOP_STREAM_REPLICAS %q with one NATS server", d.Name, env["LOOP_STREAM_REPLICAS"].Value)
			}
			for _, e := range env {
				if r := e.ValueFrom; r != nil && r.SecretKeyRef != nil && r.SecretKeyRef.Name != "tok" {
					t.Errorf("%s: %s from the Secret %s", d.Name, e.Name, r.SecretKeyRef.Name)
				}
			}
			switch d.Name {
			case "ledger-writer":
				if *d.Spec.Replicas != 5 || env["LOOP_PARTITIONS"].Value != "24" {
					t.Errorf("ledger-writer: replicas %d, LOOP_PARTITIONS %q", *d.Spec.Replicas, env["LOOP_PARTITIONS"].Value)
				}
			case "dispatcher":
				if env["LOOP_SESSION_ENV"].Value != "A_KEY,B_KEY" || env["B_KEY"].ValueFrom == nil || env["B_KEY"].ValueFrom.SecretKeyRef.Key != "b" {
					t.Errorf("dispatcher: LOOP_SESSION_ENV %q, B_KEY %+v", env["LOOP_SESSION_ENV"].Value, env["B_KEY"])
				}
				if m := d.Spec.Template.Spec.Containers[0].Resources.Limits.Memory().String(); m != "2Gi" {
					t.Errorf("dispatcher: memory limit %s", m)
				}
			}
		case "StatefulSet":
			var s appsv1.StatefulSet
			if err := json.Unmarshal(b, &s); err != nil {
				t.Fatal(err)
			}
			podSpecs = append(podSpecs, s.Spec.Template.Spec)
			if *s.Spec.Replicas != 1 || len(s.Spec.Template.Spec.Containers) != 1 {
				t.Errorf("nats: %d replicas, %d containers", *s.Spec.Replicas, len(s.Spec.Template.Spec.Containers))
			}
		case "Job":
			var j batchv1.Job
			if err := json.Unmarshal(b, &j); err != nil {
				t.Fatal(err)
			}
			podSpecs = append(podSpecs, j.Spec.Template.Spec)
			if len(j.Annotations) != 0 {
				t.Errorf("the Job is annotated %v without helmHook", j.Annotations)
			}
		case "ConfigMap":
			var cm corev1.ConfigMap
			if err := json.Unmarshal(b, &cm); err != nil {
				t.Fatal(err)
			}
			if c, ok := cm.Data["the-loop.yaml"]; ok && c != "version: \"0.7.0\"\n" {
				t.Errorf("the-loop-config holds %q, not config.contents", c)
			}
			if c, ok := cm.Data["nats.conf"]; ok && (strings.Contains(c, "cluster {") || !strings.Contains(c, "include ./auth/auth.conf")) {
				t.Errorf("one server's nats.conf:\n%s", c)
			}
		}
	}
	if len(podSpecs) != 7 {
		t.Errorf("%d pod templates, want 7 (five services, NATS, the Job)", len(podSpecs))
	}
	for _, p := range podSpecs {
		if len(p.ImagePullSecrets) != 1 || p.ImagePullSecrets[0].Name != "pull" {
			t.Errorf("pod template without the pull secret: %+v", p.ImagePullSecrets)
		}
	}
	// A changed config rolls the pods that mount it.
	defaults, _ := chartRender(t, "loop", []string{"values.yaml"}, nil)
	checksum := func(o objects, kind, name, cm string) string {
		a, _, _ := unstructured.NestedString(o[key{kind, name}].Object, "spec", "template", "metadata", "annotations", "checksum/"+cm)
		return a
	}
	if a, b := checksum(defaults, "Deployment", "ledger-writer", "the-loop-config"), checksum(chart, "Deployment", "ledger-writer", "the-loop-config"); a == "" || a == b {
		t.Errorf("the-loop-config's checksum %q, with another config %q", a, b)
	}
	if a, b := checksum(defaults, "StatefulSet", "nats", "nats-config"), checksum(chart, "StatefulSet", "nats", "nats-config"); a == "" || a == b {
		t.Errorf("nats-config's checksum %q, with one server %q", a, b)
	}
	if !regexp.MustCompile(`(?m)^  auth  `).MatchString(notes) {
		t.Errorf("NOTES.txt does not name the Secret auth:\n%s", notes)
	}
}

// TestChartLint runs `helm lint` (Helm's own linter) on the chart, for each
// values file: every message above INFO fails.
func TestChartLint(t *testing.T) {
	for _, files := range [][]string{{"values.yaml"}, {"values.yaml", "values-dev.yaml"}, {"values.yaml", "values-production.yaml"}} {
		vals := map[string]any{}
		for _, f := range files {
			v, err := chartutil.ReadValuesFile(filepath.Join(chartDir, f))
			if err != nil {
				t.Fatal(err)
			}
			vals = mergeValues(vals, v)
		}
		linter := lint.All(chartDir, vals, "the-loop", false)
		for _, m := range linter.Messages {
			if m.Severity > support.InfoSev {
				t.Errorf("helm lint %v: %s", files, m)
			} else {
				t.Logf("helm lint %v: %s", files, m)
			}
		}
	}
}

// TestChartRefusesMoreStreamReplicasThanServers: streamReplicas above
// nats.replicas fails the render, naming both.
func TestChartRefusesMoreStreamReplicasThanServers(t *testing.T) {
	_, err := helmTemplate(t, "default", []string{"values.yaml", "values-dev.yaml"}, map[string]any{"streamReplicas": 3})
	if err == nil || !strings.Contains(err.Error(), "streamReplicas 3") || !strings.Contains(err.Error(), "the 1 NATS server") {
		t.Errorf("streamReplicas 3 with one NATS server rendered: %v", err)
	}
}
