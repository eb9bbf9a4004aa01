package repoinfo

import (
	"fmt"
	"strings"

	"gopkg.in/yaml.v3"
)

// MaxTestArgs bounds the repository's test command.
const MaxTestArgs = 64

// TestCommand is the repository's test command, testing.command in
// ConfigPath of the checkout at root: a list of arguments, or a string split
// on blank space (no shell reads it). nil with a nil error when the
// repository names none; an error when it names one that cannot be used, so
// that the verify-tests hook says why instead of passing.
func TestCommand(root string) ([]string, error) {
	r, err := openRoot(root)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	cfg, _ := readConfig(r)
	v := cfg.get("testing", "command")
	if v == nil {
		return nil, nil
	}
	var argv []string
	switch v.Kind {
	case yaml.ScalarNode:
		argv = strings.Fields(v.Value)
	case yaml.SequenceNode:
		for _, it := range v.Content {
			if it = deref(it); it == nil || it.Kind != yaml.ScalarNode {
				return nil, fmt.Errorf("%s testing.command: each argument is a string", ConfigPath)
			}
			argv = append(argv, it.Value)
		}
	default:
		return nil, fmt.Errorf("%s testing.command: want a string or a list of arguments", ConfigPath)
	}
	switch {
	case len(argv) == 0:
		return nil, nil
	case len(argv) > MaxTestArgs:
		return nil, fmt.Errorf("%s testing.command: more than %d arguments", ConfigPath, MaxTestArgs)
	}
	for _, a := range argv {
		if strings.ContainsRune(a, 0) {
			return nil, fmt.Errorf("%s testing.command: an argument holds a NUL byte", ConfigPath)
		}
	}
	return argv, nil
}
