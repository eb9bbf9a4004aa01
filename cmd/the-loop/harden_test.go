package main

import (
	"bufio"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/the-loop/bus/pkg/config"
	"github.com/the-loop/bus/pkg/redact"
)

// TestHardenWithholdsSecrets: once a loop process has read its settings,
// its secrets are gone from its environment (a tmux server it starts, or a
// same-user session reading /proc/<pid>/environ, finds none), it is not
// dumpable, and its scrubber still masks the secrets' values.
func TestHardenWithholdsSecrets(t *testing.T) {
	const token = "ghp_hardenTestToken0123456789abcdefABCD"
	t.Setenv("LOOP_GITHUB_TOKEN", token)
	t.Setenv("LOOP_SESSION_TOKEN", "lst1.kept-for-the-agent's-verbs")
	env := config.OSEnv()
	harden()
	if _, ok := os.LookupEnv("LOOP_GITHUB_TOKEN"); ok {
		t.Error("LOOP_GITHUB_TOKEN is still in the process's environment")
	}
	if env["LOOP_GITHUB_TOKEN"] != token {
		t.Error("the settings read before lost the token")
	}
	if os.Getenv("LOOP_SESSION_TOKEN") == "" {
		t.Error("an agent's own session token was withheld from its verbs")
	}
	if d, err := unix.PrctlRetInt(unix.PR_GET_DUMPABLE, 0, 0, 0, 0); err != nil || d != 0 {
		t.Errorf("dumpable = %d (%v), want 0", d, err)
	}
	if got := redact.FromOS().Scrub("the token is " + token); strings.Contains(got, token) {
		t.Errorf("the scrubber no longer masks a withheld secret: %q", got)
	}
}

// TestEverySecretSettingIsWithheld: every setting of type config.Secret
// but the agent's own session token is in secretSettings.
func TestEverySecretSettingIsWithheld(t *testing.T) {
	var found, missing []string
	secretType := reflect.TypeOf(config.Secret{})
	for _, spec := range (&settings{}).specs() {
		walkSecrets(reflect.TypeOf(spec).Elem(), "", secretType, func(name string) {
			found = append(found, name)
			if name != "LOOP_SESSION_TOKEN" && !slices.Contains(secretSettings, name) {
				missing = append(missing, name)
			}
		})
	}
	// The walk itself must see the secrets it is to check.
	for _, want := range []string{"LOOP_GITHUB_TOKEN", "LOOP_SLACK_APP_TOKEN", "LOOP_GITHUB_WEBHOOK_SECRET", "LOOP_SESSION_TOKEN"} {
		if !slices.Contains(found, want) {
			t.Errorf("the walk over the settings did not find %s (found %v)", want, found)
		}
	}
	if len(missing) > 0 {
		t.Errorf("secret settings not withheld: %v", missing)
	}
}

// walkSecrets calls found with the LOOP_ name of every field of type
// secret in t, nested structs included (envconfig's naming: the tag, else
// the field's name, prefixed by the enclosing struct's tag when it has one).
func walkSecrets(t reflect.Type, prefix string, secret reflect.Type, found func(string)) {
	if t.Kind() != reflect.Struct {
		return
	}
	for i := range t.NumField() {
		f := t.Field(i)
		tag := f.Tag.Get("envconfig")
		switch {
		case f.Type == secret:
			found(config.Prefix + "_" + prefix + tag)
		case f.Type.Kind() == reflect.Struct:
			p := prefix
			if tag != "" && !f.Anonymous {
				p += tag + "_"
			}
			walkSecrets(f.Type, p, secret, found)
		}
	}
}

// envHardenChild makes this test binary a hardened loop process that waits
// for its standard input to close (TestMain).
const envHardenChild = "THE_LOOP_TEST_HARDEN_CHILD"

// hardenedChild reads its settings and hardens itself as main does, says so,
// and waits.
func hardenedChild() {
	_ = config.OSEnv()
	harden()
	os.Stdout.WriteString("hardened\n")
	_, _ = bufio.NewReader(os.Stdin).ReadString('\n')
	os.Exit(0)
}
