// Package config is where the-loop's settings come from, and the only place
// that knows their names and defaults (README.md#configuration):
//
//   - process settings from the environment (LOOP_*): one struct per concern
//     (Common, GitHub, Slack, Up) that a service composes into its own Config
//     and fills with Process; Usage prints them for `the-loop serve X --help`
//     and the docs;
//   - the operator YAML named by LOOP_CONFIG (version 0.7.0): Parse and
//     LoadFile validate it strictly, Watcher reloads it on change without a
//     restart, and Migrate rewrites an older file into the current shape for
//     `the-loop migrate-config`. A file written for the original the-loop
//     loads too: each of its keys is read (original.go), the ones that are
//     process settings here into Config.Settings, which EnvWithConfig
//     applies to a process's environment at start.
//
// Secrets (tokens, signing secrets, the envelope key) are held as Secret, which
// never prints its value; errors from this package never carry one.
//
// config reads files and the environment it is handed, but never os.Environ
// on its own (OSEnv is the one door), so tests run on fake environments. It
// imports pkg/catalog, pkg/identity and pkg/graph (graphs.files are
// validated at load, with the graph package's own checks) and nothing else
// of this module.
package config
