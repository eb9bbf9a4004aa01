package main

import (
	"runtime/debug"
	"testing"
)

// TestVersionOfABuildWithoutAStamp: a build that no -X stamped names the
// module version it was installed at, else the commit it was built from,
// and says "dev" only when the toolchain recorded neither.
func TestVersionOfABuildWithoutAStamp(t *testing.T) {
	vcs := func(kv ...string) []debug.BuildSetting {
		var out []debug.BuildSetting
		for i := 0; i+1 < len(kv); i += 2 {
			out = append(out, debug.BuildSetting{Key: kv[i], Value: kv[i+1]})
		}
		return out
	}
	cases := []struct {
		name string
		bi   *debug.BuildInfo
		ok   bool
		want string
	}{
		{"no build info", nil, false, "dev"},
		{"go install at a version", &debug.BuildInfo{Main: debug.Module{Version: "v0.2.0"}}, true, "v0.2.0"},
		{"a clean checkout", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"},
			Settings: vcs("vcs", "git", "vcs.revision", "21ae1fb0c2a7d4e5f60718293a4b5c6d7e8f9012", "vcs.time", "2026-12-02T12:51:43Z", "vcs.modified", "false")},
			true, "devel 21ae1fb0c2a7 (2026-12-02T12:51:43Z)"},
		{"edited files", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"},
			Settings: vcs("vcs.revision", "21ae1fb0c2a7d4e5f60718293a4b5c6d7e8f9012", "vcs.modified", "true")},
			true, "devel 21ae1fb0c2a7 (modified)"},
		{"-buildvcs=false", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}}, true, "dev"},
	}
	for _, c := range cases {
		if got := versionOf(c.bi, c.ok); got != c.want {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
	}
}
