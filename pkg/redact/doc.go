// Package redact masks personal and machine data in free text before the-loop
// posts it somewhere public, and quotes text the way the GitHub mirror comment
// does (docs/requirements.md K19).
//
// Scrub applies the original's seven rules in their order, each replacing what
// it finds with a visible placeholder so that a reader sees that something was
// removed and what kind of thing it was. Rules that need Python's lookbehind or
// its Unicode \w and \s are written out by hand; see scrub.go.
//
// redact is pure given its inputs: a Scrubber is built from explicit Options,
// and only FromOS reads the process environment, home directory, user and
// host. It imports only the standard library and must not import any other
// package of this module; control keywords are defanged by pkg/control.
package redact
