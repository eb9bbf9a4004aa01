package main

import (
	"runtime/debug"
	"strings"
)

// versionOf is the version a build without a stamped one reports (`go build`,
// `go run`, `go install`), from what the Go toolchain records in the binary:
// the module's version when it was installed at one (`go install …@v1.2.3`),
// else the commit it was built from, as `devel <revision> (<time>[, modified])`,
// which names the source as exactly as `git describe` would; "dev" only when
// neither is recorded (a build with -buildvcs=false outside a module proxy).
// Releases and images stamp main.version from `git describe` instead
// (Makefile, deploy/Dockerfile, .goreleaser.yaml).
func versionOf(bi *debug.BuildInfo, ok bool) string {
	if !ok || bi == nil {
		return "dev"
	}
	if v := bi.Main.Version; v != "" && v != "(devel)" {
		return v
	}
	var rev, at string
	modified := false
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.time":
			at = s.Value
		case "vcs.modified":
			modified = s.Value == "true"
		}
	}
	if rev == "" {
		return "dev"
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	var notes []string
	if at != "" {
		notes = append(notes, at)
	}
	if modified {
		notes = append(notes, "modified")
	}
	v := "devel " + rev
	if len(notes) > 0 {
		v += " (" + strings.Join(notes, ", ") + ")"
	}
	return v
}
