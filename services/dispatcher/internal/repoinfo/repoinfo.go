// Package repoinfo answers what an agent session may ask about its own
// repository checkout: the instruction documents the repository registers
// for the current step (sessionapi.PathInstructions) and the Gherkin-style
// scenarios its tests declare (sessionapi.PathScenarios), and the names of
// the critics it declares, which are never run (RepoCritics).
//
// The checkout is the session's workspace, a directory the agent itself
// writes, so every byte read here is treated as hostile. Everything is read
// through an os.Root opened on the checkout (os.OpenRoot): no name, symlink
// or ".." leads out of it. Only regular files are read, opened without
// blocking (a named pipe cannot stall the dispatcher), and every read, the
// walk and the answers are bounded. A missing or unparsable harness
// configuration never fails a request: Instructions says so in its notes,
// Scenarios falls back to its default globs. A glob the repository names is
// held to the same rules as the agent's.
//
// The package only reads. It imports no bus package, and of the dispatcher
// only the sessionapi shapes it fills.
package repoinfo

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"

	"gopkg.in/yaml.v3"
)

// Where a repository keeps what this package reads, relative to its root.
const (
	// ConfigPath is the repository's harness configuration: its
	// customInstructions and testing.integrationTestGlobs.
	ConfigPath = ".the-loop/harness-config.yaml"
	// StepDir holds the steps' own documents, <node>.md or <phase>.md.
	StepDir = ".the-loop/instructions"
)

// MaxConfigBytes bounds the harness configuration: a larger one is not read.
const MaxConfigBytes = 256 << 10

// binarySniffBytes is how much of a file is searched for a NUL byte, the
// sign of a binary file.
const binarySniffBytes = 8 << 10

// ErrNoWorkspace: the checkout cannot be opened (no workspace is known, or
// its directory is gone). It is the dispatcher's problem, not the agent's.
var ErrNoWorkspace = errors.New("no workspace checkout")

// errNotRegular: the name is there but is not a regular file.
var errNotRegular = errors.New("not a regular file")

// errBinary: the file has a NUL byte near its start.
var errBinary = errors.New("binary content")

// openRoot opens the checkout at dir.
func openRoot(dir string) (*os.Root, error) {
	if dir == "" {
		return nil, fmt.Errorf("%w: none is known", ErrNoWorkspace)
	}
	r, err := os.OpenRoot(dir)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNoWorkspace, err)
	}
	return r, nil
}

// readCapped reads the regular file name (slash-separated, relative) inside
// r: at most max bytes of it, and whether there was more. size is the file's
// size when it was opened. A name that is not a regular file gives an error
// wrapping errNotRegular; one that starts with binary content, errBinary.
func readCapped(r *os.Root, name string, max int64) (b []byte, size int64, more bool, err error) {
	// nonBlocking: opening a named pipe must not wait for a writer; for a
	// regular file the flag changes nothing.
	f, err := r.OpenFile(filepath.FromSlash(name), os.O_RDONLY|nonBlocking, 0)
	if err != nil {
		return nil, 0, false, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, 0, false, err
	}
	if !fi.Mode().IsRegular() {
		return nil, 0, false, fmt.Errorf("%w: %s", errNotRegular, kind(fi.Mode()))
	}
	b, err = io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, fi.Size(), false, err
	}
	if int64(len(b)) > max {
		b, more = b[:max], true
	}
	if isBinary(b) {
		return nil, fi.Size(), more, errBinary
	}
	return b, fi.Size(), more, nil
}

// isBinary reports a NUL byte in b's first binarySniffBytes.
func isBinary(b []byte) bool {
	if len(b) > binarySniffBytes {
		b = b[:binarySniffBytes]
	}
	for _, c := range b {
		if c == 0 {
			return true
		}
	}
	return false
}

// kind names what a non-regular file is.
func kind(m fs.FileMode) string {
	switch {
	case m.IsDir():
		return "a directory"
	case m&fs.ModeSymlink != 0:
		return "a symbolic link"
	case m&fs.ModeNamedPipe != 0:
		return "a named pipe"
	case m&fs.ModeSocket != 0:
		return "a socket"
	case m&fs.ModeDevice != 0:
		return "a device"
	default:
		return "not a regular file"
	}
}

// isMissing: nothing is at the name (a dangling symlink included, and a
// name under something that is not a directory).
func isMissing(err error) bool {
	return errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR)
}

// why says in a few words why a read failed, without the checkout's own
// location (an agent needs the repository-relative name only).
func why(err error) string {
	var pe *fs.PathError
	switch {
	case errors.Is(err, errBinary):
		return "binary content (a NUL byte in its first 8 KiB)"
	case errors.Is(err, errNotRegular):
		return err.Error()
	case errors.Is(err, fs.ErrPermission):
		return "permission denied"
	case errors.Is(err, syscall.ELOOP):
		return "too many levels of symbolic links"
	case errors.As(err, &pe):
		// os.Root's refusal of a link out of the checkout lands here:
		// "path escapes from parent".
		return pe.Err.Error()
	default:
		return err.Error()
	}
}

// config is the part of the harness configuration this package reads, as a
// YAML tree: a hostile file of the wrong shape in one place must not hide
// the rest.
type config struct {
	root *yaml.Node // the top-level mapping
}

// readConfig reads ConfigPath in r. A missing or broken file gives a nil
// config and a sentence saying why.
func readConfig(r *os.Root) (cfg *config, note string) {
	b, _, more, err := readCapped(r, ConfigPath, MaxConfigBytes)
	switch {
	case isMissing(err):
		return nil, "there is no " + ConfigPath
	case err != nil:
		return nil, ConfigPath + " cannot be read: " + why(err)
	case more:
		return nil, fmt.Sprintf("%s is larger than %d KiB and was not read", ConfigPath, MaxConfigBytes>>10)
	}
	doc, err := parseYAML(b)
	if err != nil {
		return nil, ConfigPath + " is not valid YAML: " + err.Error()
	}
	if doc == nil {
		return nil, ConfigPath + " is empty"
	}
	if doc.Kind != yaml.MappingNode {
		return nil, ConfigPath + " is not a mapping at its top level"
	}
	return &config{root: doc}, ""
}

// parseYAML parses b's first document into a tree, nil when it has none.
// The parser is given hostile bytes: a panic in it is an error here.
func parseYAML(b []byte) (doc *yaml.Node, err error) {
	defer func() {
		if p := recover(); p != nil {
			doc, err = nil, fmt.Errorf("the parser gave up: %v", p)
		}
	}()
	var n yaml.Node
	if err := yaml.Unmarshal(b, &n); err != nil {
		return nil, err
	}
	if n.Kind != yaml.DocumentNode || len(n.Content) == 0 {
		return nil, nil
	}
	return deref(n.Content[0]), nil
}

// get is the value under the keys, one mapping into the next, nil when a
// key is absent or a value on the way is not a mapping.
func (c *config) get(keys ...string) *yaml.Node {
	if c == nil {
		return nil
	}
	n := c.root
	for _, k := range keys {
		n = lookup(n, k)
		if n == nil {
			return nil
		}
	}
	return n
}

// lookup is the value of key in the mapping m, nil when m is not a mapping
// or has no such key.
func lookup(m *yaml.Node, key string) *yaml.Node {
	m = deref(m)
	if m == nil || m.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(m.Content); i += 2 {
		if k := deref(m.Content[i]); k != nil && k.Kind == yaml.ScalarNode && k.Value == key {
			return deref(m.Content[i+1])
		}
	}
	return nil
}

// deref follows aliases to the node they name (a bounded number of hops:
// the tree is hostile).
func deref(n *yaml.Node) *yaml.Node {
	for range 16 {
		if n == nil || n.Kind != yaml.AliasNode {
			return n
		}
		n = n.Alias
	}
	return nil
}

// scalar is n's text when n is a scalar (a string, a number...).
func scalar(n *yaml.Node) (string, bool) {
	n = deref(n)
	if n == nil || n.Kind != yaml.ScalarNode {
		return "", false
	}
	return n.Value, true
}
