package control

import "strings"

// Command is one control command, named as in the config
// (routing.control.keywords.<command>).
type Command string

// The ten commands, in the fixed order Parse searches for them. The first
// eight are the original's; adopt and end settle a leftover tmux session the
// loop found where a work item's session goes
// (docs/decisions/100-a-tmux-server-per-session.md).
const (
	Start      Command = "start"
	Stop       Command = "stop"
	Pause      Command = "pause"
	Resume     Command = "resume"
	Execute    Command = "execute"
	Contribute Command = "contribute"
	Cleanup    Command = "cleanup"
	Do         Command = "do"
	Adopt      Command = "adopt"
	End        Command = "end"
)

// Class is a set of command classes (docs/requirements.md K8). A command may be
// in several: start arms and may spawn, cleanup disarms and tears down.
type Class uint8

// The command classes.
const (
	// Arming commands mean "this work item should be running"; a recorded
	// arming command is what start_requested reports.
	Arming Class = 1 << iota
	// Spawning commands may create a session where none exists. Resume arms
	// but cannot spawn: it only wakes what was paused.
	Spawning
	// Disarming commands mean "this work item should not be running"; they are
	// recorded even when they have no effect.
	Disarming
	// Graph commands answer the graph (the phase-selection gate) rather than
	// the session registry.
	Graph
	// Teardown commands destroy local state.
	Teardown
)

var classNames = [...]string{"arming", "spawning", "disarming", "graph", "teardown"}

// String lists the classes in c, joined by "|".
func (c Class) String() string {
	var parts []string
	for i, name := range classNames {
		if c&(1<<i) != 0 {
			parts = append(parts, name)
		}
	}
	return strings.Join(parts, "|")
}

// spec is the vocabulary as data: order, default keyword, classes.
var spec = [...]struct {
	command Command
	keyword string
	classes Class
}{
	{Start, "the-loop start", Arming | Spawning},
	{Stop, "the-loop stop", Disarming},
	{Pause, "the-loop pause", Disarming},
	{Resume, "the-loop resume", Arming},
	{Execute, "the-loop execute", Graph},
	{Contribute, "the-loop contribute", Arming | Spawning},
	{Cleanup, "the-loop cleanup", Disarming | Teardown},
	{Do, "the-loop do", Arming | Spawning},
	// adopt takes the leftover as the work item's session; end kills it,
	// and the loop spawns its own.
	{Adopt, "the-loop adopt", Arming},
	{End, "the-loop end", Arming | Spawning | Teardown},
}

const numCommands = len(spec)

// Commands returns the ten commands in the fixed search order.
func Commands() []Command {
	out := make([]Command, numCommands)
	for i, s := range spec {
		out[i] = s.command
	}
	return out
}

// index is c's position in the fixed order, or -1.
func (c Command) index() int {
	for i, s := range spec {
		if s.command == c {
			return i
		}
	}
	return -1
}

// Valid reports whether c is one of the ten commands.
func (c Command) Valid() bool { return c.index() >= 0 }

// Classes returns the classes c belongs to; zero for an invalid command.
func (c Command) Classes() Class {
	if i := c.index(); i >= 0 {
		return spec[i].classes
	}
	return 0
}

// Is reports whether c belongs to every class in cl.
func (c Command) Is(cl Class) bool { return cl != 0 && c.Classes()&cl == cl }

// DefaultKeyword returns c's shipped keyword ("the-loop start", …), or "" for
// an invalid command.
func (c Command) DefaultKeyword() string {
	if i := c.index(); i >= 0 {
		return spec[i].keyword
	}
	return ""
}

// String returns the command's config name.
func (c Command) String() string { return string(c) }
