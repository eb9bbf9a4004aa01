// Package control is the control-keyword grammar: the commands an
// authorized person types on a work item ("the-loop start", "the-loop stop",
// …), the classes each belongs to, and the parser that finds them in a comment
// body (docs/requirements.md K7).
//
// It also owns the other side of the same contract: Defang visibly breaks every
// keyword in text the-loop mirrors to a ticket, so that a relayed reply can
// never be read back as a command (docs/requirements.md K19), and Keywords
// lists what a ledger envelope must refuse to carry.
//
// The grammar is the original's to the character: a case-insensitive literal
// match with hand-made token boundaries (the character before and after must
// not be a word character, '-' or ':'), where word characters and case folding
// are those of Python's re module, not RE2's ASCII \w. See match.go.
//
// control is pure: no I/O, no clock, no environment. It imports only the
// standard library and must not import any other package of this module;
// config loading, authorization and the effect of a command live with their
// callers.
package control
