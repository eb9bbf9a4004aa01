package main

import (
	"bytes"
	"context"
	"flag"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/the-loop/bus/pkg/config"
)

// helpCalls are every verb and sub-verb of the usage text asked for help,
// as `VERB [SUB] --help` and `help VERB [SUB]`.
func helpCalls(t *testing.T) [][]string {
	t.Helper()
	var calls [][]string
	seen := map[string]bool{}
	for _, l := range strings.Split(usageText, "\n") {
		rest, ok := strings.CutPrefix(l, "  the-loop ")
		if !ok {
			continue
		}
		v, _, _ := strings.Cut(rest, " ")
		if seen[v] {
			continue
		}
		seen[v] = true
		calls = append(calls, []string{v, "--help"}, []string{"help", v})
		subs := subVerbs[v]
		if v == "serve" {
			subs = serviceNames()
		}
		for _, s := range subs {
			calls = append(calls, []string{v, s, "--help"}, []string{"help", v, s})
		}
	}
	if len(seen) < 20 {
		t.Fatalf("found only %d verbs in the usage text", len(seen))
	}
	for v := range verbs {
		if !seen[v] {
			t.Errorf("verb %s is not in the usage text", v)
		}
	}
	return calls
}

// TestHelpListsEveryFlag runs every verb and sub-verb with --help and
// checks its help against the flag sets the verb really parses: each flag
// is listed on a line of its own with what it does, each positional
// argument of its usage line is explained, and each setting it names is
// one the binary reads.
func TestHelpListsEveryFlag(t *testing.T) {
	var made []*flag.FlagSet
	flagSetsMu.Lock()
	flagSetsMade = func(fs *flag.FlagSet) { made = append(made, fs) }
	flagSetsMu.Unlock()
	t.Cleanup(func() {
		flagSetsMu.Lock()
		flagSetsMade = nil
		flagSetsMu.Unlock()
	})
	var doc bytes.Buffer
	if err := writeConfigurationDoc(&doc); err != nil {
		t.Fatal(err)
	}
	setting := regexp.MustCompile(`\bLOOP_[A-Z0-9_]+\b`)
	for _, args := range helpCalls(t) {
		made = nil
		code, out, stderr := runVerb(t, config.Env{}, args...)
		if code != 0 || stderr != "" {
			t.Errorf("%q: exit %d, want 0, nothing on stderr\n%s", args, code, stderr)
			continue
		}
		if !strings.Contains(out, "Usage:") {
			t.Errorf("%q: no usage:\n%s", args, out)
		}
		if len(made) == 0 && !slices.Contains(args, "help") || slices.Equal(args, []string{"help", "help"}) && len(made) != 0 {
			t.Errorf("%q: answered without the verb's flag set", args)
		}
		for _, fs := range made {
			fs.VisitAll(func(f *flag.Flag) {
				if strings.TrimSpace(f.Usage) == "" {
					t.Errorf("%q: flag --%s has no help text", args, f.Name)
				}
				if !regexp.MustCompile(`(?m)^  --` + regexp.QuoteMeta(f.Name) + `( \S+)?   +\S`).MatchString(out) {
					t.Errorf("%q: flag --%s of %q is not listed on a line of its own:\n%s", args, f.Name, fs.Name(), out)
				}
			})
			if fs.Name() == "serve" && len(args) == 3 {
				continue // a service's help lists its settings; its name is the argument
			}
			for _, a := range positionalArgs(usageLinesOf(fs.Name())) {
				if !strings.Contains(out, "\n  "+a+" ") {
					t.Errorf("%q: argument %s of %q is not explained:\n%s", args, a, fs.Name(), out)
				}
			}
		}
		for _, s := range setting.FindAllString(out, -1) {
			if !strings.Contains(doc.String(), s+" ") && !slices.Contains([]string{"LOOP_SESSION_URL", "LOOP_SESSION_TOKEN", "LOOP_STOP_MAX_ATTEMPTS"}, s) {
				t.Errorf("%q: names %s, which is no setting of docs/configuration.md", args, s)
			}
		}
	}
}

// positionalArgs are the arguments a usage line names that are not a
// flag's value: DIR, [FILE], <seq>, COMMAND [ARGS...].
func positionalArgs(lines []string) []string {
	var out []string
	for _, l := range lines {
		rest, ok := strings.CutPrefix(l, "  the-loop ")
		if !ok {
			continue
		}
		synopsis, _, _ := strings.Cut(rest, "   ")
		words := strings.Fields(synopsis)
		for i, w := range words {
			if i == 0 || i > 0 && strings.Contains(words[i-1], "--") && words[i-1] != "--" {
				continue
			}
			a := strings.TrimSuffix(strings.Trim(w, "[]"), "...")
			a = strings.TrimSuffix(strings.Trim(a, "[]"), "...")
			if strings.HasPrefix(a, "<") || a != "" && a == strings.ToUpper(a) && !strings.HasPrefix(a, "-") {
				out = append(out, a)
			}
		}
	}
	return out
}

// TestHelpNamesTheSubVerbAndUpsSettings: `dlq replay --help` is about
// replay alone, and `up --help` names the settings a first run changes.
func TestHelpNamesTheSubVerbAndUpsSettings(t *testing.T) {
	var out, errb bytes.Buffer
	if err := dispatch(context.Background(), []string{"dlq", "replay", "7", "--help"}, config.Env{}, &out, &errb); err != nil && err != flag.ErrHelp {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "dlq replay <seq>") || strings.Contains(out.String(), "dlq list") {
		t.Errorf("dlq replay --help:\n%s", out.String())
	}
	out.Reset()
	if err := dispatch(context.Background(), []string{"help", "up"}, config.Env{}, &out, &errb); err != nil && err != flag.ErrHelp {
		t.Fatal(err)
	}
	for _, want := range []string{"the-loop up", "LOOP_STORE_DIR", "LOOP_NATS_LISTEN", "LOOP_ADMIN_ADDR", "LOOP_WORKSPACE_ROOT", "the-loop init"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("help up does not name %s:\n%s", want, out.String())
		}
	}
}
