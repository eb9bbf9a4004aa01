// Command the-loop is the one binary of the-loop bus: `the-loop up` runs the
// whole system on an embedded JetStream server, `the-loop serve <service>` runs
// one service (what each container runs), and the other verbs operate it.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/the-loop/bus/pkg/config"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	env := config.OSEnv()
	harden()
	code := run(ctx, os.Args[1:], env, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
