package deploy

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

// TestReleaseConfig: .goreleaser.yaml builds the-loop for linux/amd64 and
// arm64 with the version stamped as the Makefile and the Dockerfile stamp it,
// and both images from deploy/Dockerfile's targets, each with the binary
// goreleaser built (BINARY=release, a stage that copies
// $TARGETPLATFORM/the-loop) for both platforms, named from the environment
// rather than a registry written here. `make release-check` runs goreleaser's
// own check and a snapshot build; this test holds the parts it cannot see.
func TestReleaseConfig(t *testing.T) {
	raw, err := os.ReadFile("../.goreleaser.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var cfg struct {
		Version int `yaml:"version"`
		Builds  []struct {
			ID      string   `yaml:"id"`
			Main    string   `yaml:"main"`
			Env     []string `yaml:"env"`
			Ldflags []string `yaml:"ldflags"`
			Goos    []string `yaml:"goos"`
			Goarch  []string `yaml:"goarch"`
		} `yaml:"builds"`
		Dockers []struct {
			ID         string            `yaml:"id"`
			IDs        []string          `yaml:"ids"`
			Dockerfile string            `yaml:"dockerfile"`
			Images     []string          `yaml:"images"`
			Platforms  []string          `yaml:"platforms"`
			BuildArgs  map[string]string `yaml:"build_args"`
			Flags      []string          `yaml:"flags"`
		} `yaml:"dockers_v2"`
	}
	if err := yaml.Unmarshal(raw, &cfg); err != nil {
		t.Fatal(err)
	}
	if cfg.Version != 2 || len(cfg.Builds) != 1 {
		t.Fatalf("version %d, %d builds: want goreleaser's version 2 and one build", cfg.Version, len(cfg.Builds))
	}
	b := cfg.Builds[0]
	if b.Main != "./cmd/the-loop" || !slices.Contains(b.Env, "CGO_ENABLED=0") {
		t.Errorf("the build is %s with %v, want ./cmd/the-loop, static", b.Main, b.Env)
	}
	if !slices.Equal(b.Goos, []string{"linux"}) || !slices.Equal(b.Goarch, []string{"amd64", "arm64"}) {
		t.Errorf("the build is for %v/%v, want linux/amd64 and arm64", b.Goos, b.Goarch)
	}
	if !strings.Contains(strings.Join(b.Ldflags, " "), "-X main.version=") {
		t.Errorf("ldflags %v do not stamp main.version", b.Ldflags)
	}
	df, err := os.ReadFile("Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`(?m)^FROM scratch AS release\nARG TARGETPLATFORM\nCOPY \$\{TARGETPLATFORM\}/the-loop /out/the-loop$`).Match(df) {
		t.Error("deploy/Dockerfile has no release stage copying goreleaser's $TARGETPLATFORM/the-loop")
	}
	mk, err := os.ReadFile("../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(mk), "git describe") || !strings.Contains(string(mk), "-X main.version=$(VERSION)") {
		t.Error("the Makefile does not stamp main.version from git describe")
	}
	targets := map[string]bool{}
	for _, d := range cfg.Dockers {
		if d.Dockerfile != "deploy/Dockerfile" || d.BuildArgs["BINARY"] != "release" || !slices.Equal(d.IDs, []string{b.ID}) {
			t.Errorf("image %s: %s with %v from builds %v, want deploy/Dockerfile with BINARY=release from %s", d.ID, d.Dockerfile, d.BuildArgs, d.IDs, b.ID)
		}
		if !slices.Equal(d.Platforms, []string{"linux/amd64", "linux/arm64"}) {
			t.Errorf("image %s is for %v, want linux/amd64 and linux/arm64", d.ID, d.Platforms)
		}
		for _, img := range d.Images {
			if !strings.Contains(img, `.Env`) && !strings.Contains(img, `envOrDefault`) {
				t.Errorf("image %s is named %q: the registry comes from the environment (THE_LOOP_IMAGE)", d.ID, img)
			}
		}
		for _, f := range d.Flags {
			if target, ok := strings.CutPrefix(f, "--target="); ok {
				targets[target] = true
				if !strings.Contains(string(df), "AS "+target+"\n") {
					t.Errorf("image %s builds target %s, which deploy/Dockerfile lacks", d.ID, target)
				}
			}
		}
	}
	if !targets["service"] || !targets["session"] {
		t.Errorf("the release builds targets %v, want both images (service, session)", targets)
	}
}

// TestComposeStampsTheVersion: both images compose builds take VERSION from
// THE_LOOP_VERSION, so `the-loop version` in them names the source.
func TestComposeStampsTheVersion(t *testing.T) {
	project := loadCompose(t)
	for _, name := range []string{"ingress-github", "dispatcher", "sessions", "provision"} {
		b := project.Services[name].Build
		if b == nil || b.Args["VERSION"] == nil || *b.Args["VERSION"] != "dev" {
			t.Errorf("%s builds with args %v, want VERSION from THE_LOOP_VERSION (dev when unset)", name, b)
		}
	}
}
