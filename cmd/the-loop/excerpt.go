package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/the-loop/bus/pkg/config"
	"github.com/the-loop/bus/pkg/excerpt"
)

// maxPayload is GitHub's webhook payload cap; a larger file is not a delivery.
const maxPayload = 25 << 20

// cmdExcerpt prints the excerpt of a GitHub payload: what an agent session
// would be shown of it.
func cmdExcerpt(_ context.Context, args []string, _ config.Env, stdout, stderr io.Writer) error {
	fs := newFlags("excerpt", stderr)
	event := fs.String("event", "", "the X-GitHub-Event name of the payload (issue_comment, pull_request, ...)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 1 {
		return fmt.Errorf("%w: excerpt --event NAME [FILE|-]", errUsage)
	}
	var in io.Reader = os.Stdin
	if name := fs.Arg(0); name != "" && name != "-" {
		f, err := os.Open(name)
		if err != nil {
			return fmt.Errorf("excerpt: %w", err)
		}
		defer f.Close()
		in = f
	}
	payload, err := io.ReadAll(io.LimitReader(in, maxPayload+1))
	if err != nil {
		return fmt.Errorf("excerpt: read payload: %w", err)
	}
	if len(payload) > maxPayload {
		return fmt.Errorf("excerpt: payload larger than GitHub's %d MB limit", maxPayload>>20)
	}
	out, err := excerpt.Excerpt(*event, payload)
	if err != nil && !errors.Is(err, excerpt.ErrMalformed) {
		return fmt.Errorf("excerpt: %w", err)
	}
	fmt.Fprintln(stdout, out)
	if err != nil {
		return fmt.Errorf("excerpt: the payload is not valid JSON: %w", err)
	}
	return nil
}
