// Package config is where the-loop's settings come from (README.md#configuration):
//
//   - settings from the environment (LOOP_*): the process's own (Common, Up,
//     Session) and the pieces two services share (GitHub, Slack,
//     AutoExecute) are declared here; each service declares the rest in its
//     own Config (services/<name>/config.go), embedding the shared pieces
//     (docs/decisions/089-each-service-owns-its-settings.md). Process fills
//     the structs the host hands it, CheckEnv refuses a LOOP_* variable none
//     of them reads, and Usage prints them for `the-loop serve X --help` and
//     the docs;
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
