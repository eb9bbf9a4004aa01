package main

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/the-loop/bus/pkg/bus"
	"github.com/the-loop/bus/pkg/config"
)

// cmdPartitions shows how each consuming service's live replicas share its
// partitions, and how many of its messages are pending: what to look at
// before changing LOOP_PARTITIONS (README, Operations) and after scaling.
func cmdPartitions(ctx context.Context, args []string, env config.Env, stdout, stderr io.Writer) error {
	fs := newFlags("partitions", stderr)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	s, err := loadSettings(env)
	if err != nil {
		return err
	}
	conn, err := cliConnect(ctx, env, "the-loop-partitions", read)
	if err != nil {
		return err
	}
	defer conn.Close()
	topo := bus.DefaultTopology()
	topo.Partitions = s.Common.Partitions
	status, err := conn.PartitionStatus(ctx, topo)
	if err != nil {
		return fmt.Errorf("partitions: %w", err)
	}
	return writePartitions(stdout, status)
}

func writePartitions(w io.Writer, status []bus.ServicePartitions) error {
	for i, sp := range status {
		if i > 0 {
			fmt.Fprintln(w)
		}
		fmt.Fprintf(w, "%s on %s: %d partitions, %d message(s) pending, %d replica(s)\n",
			sp.Service, sp.Stream, sp.Partitions, sp.Pending, len(sp.Members))
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "  REPLICA\tNAME\tSINCE\tCONCURRENCY\tSHARE\tPARTITIONS")
		workers := make([]int, sp.Partitions)
		for _, m := range sp.Members {
			conc := "-"
			if m.Concurrency > 0 {
				conc = strconv.Itoa(m.Concurrency)
			}
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%d/%d\t%s\n", m.ID, m.Name, m.Since.UTC().Format(time.RFC3339), conc,
				len(m.Working), sp.Partitions, ranges(m.Working))
			for _, p := range m.Working {
				if p >= 0 && p < len(workers) {
					workers[p]++
				}
			}
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		var idle, shared []int
		for p, n := range workers {
			switch {
			case n == 0:
				idle = append(idle, p)
			case n > 1:
				shared = append(shared, p)
			}
		}
		if len(sp.Members) > 0 && len(idle) > 0 {
			fmt.Fprintf(w, "  worked by no replica (being handed over, or its replica died less than a lease ago): %s\n", ranges(idle))
		}
		if len(shared) > 0 {
			fmt.Fprintf(w, "  worked by two replicas (being handed over): %s\n", ranges(shared))
		}
	}
	return nil
}

// ranges writes ascending partitions compactly: "0-3 7 9-10".
func ranges(ps []int) string {
	if len(ps) == 0 {
		return "-"
	}
	var parts []string
	for i := 0; i < len(ps); {
		j := i
		for j+1 < len(ps) && ps[j+1] == ps[j]+1 {
			j++
		}
		if j > i {
			parts = append(parts, fmt.Sprintf("%d-%d", ps[i], ps[j]))
		} else {
			parts = append(parts, strconv.Itoa(ps[i]))
		}
		i = j + 1
	}
	return strings.Join(parts, " ")
}
