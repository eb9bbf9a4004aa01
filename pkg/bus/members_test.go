package bus

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// members returns n members of service with fixed ids, each a second older
// than the next.
func testMembers(prefix string, n int) []Member {
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	ms := make([]Member, n)
	for i := range ms {
		ms[i] = Member{ID: fmt.Sprintf("%s-%d", prefix, i), Since: base.Add(time.Duration(i) * time.Second)}
	}
	return ms
}

func TestAssignGivesEveryPartitionOneOwnerEvenly(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, n := range []int{1, 2, 8, 16, 64} {
		for k := 1; k <= 6; k++ {
			ms := testMembers(fmt.Sprintf("p%dk%d", n, k), k)
			got := assign("ledger-writer", n, ms)
			owners := make([]int, n)
			for i, m := range ms {
				ps := got[m.ID]
				want := n / k
				if i < n%k {
					want++ // the longest-standing get the remainder
				}
				if len(ps) != want {
					t.Errorf("n=%d k=%d: member %d (oldest first) owns %d partitions, want %d", n, k, i, len(ps), want)
				}
				if !slices.IsSorted(ps) {
					t.Errorf("n=%d k=%d: %v not ascending", n, k, ps)
				}
				for _, p := range ps {
					owners[p]++
				}
			}
			for p, c := range owners {
				if c != 1 {
					t.Fatalf("n=%d k=%d: partition %d has %d owners", n, k, p, c)
				}
			}
			// Every replica computes the same answer from the same
			// records, whatever order it read them in.
			shuffled := slices.Clone(ms)
			rng.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
			again := assign("ledger-writer", n, shuffled)
			for _, m := range ms {
				if !slices.Equal(got[m.ID], again[m.ID]) {
					t.Fatalf("n=%d k=%d: the order of the records changed %s's partitions: %v, then %v", n, k, m.ID, got[m.ID], again[m.ID])
				}
			}
		}
	}
	if got := assign("x", 4, nil); len(got) != 0 {
		t.Errorf("no members: %v", got)
	}
}

// TestAssignMovesFewPartitions: a replica joining takes about its share
// from the others and the rest stay where they were, so that a work item's
// session does not move between dispatcher hosts at every join.
func TestAssignMovesFewPartitions(t *testing.T) {
	for _, n := range []int{16, 64} {
		for k := 1; k <= 6; k++ {
			ideal := (n + k) / (k + 1) // ⌈n/(k+1)⌉
			total := 0
			const trials = 100
			for trial := range trials {
				ms := testMembers(fmt.Sprintf("t%d", trial), k+1)
				before := assign("dispatcher", n, ms[:k])
				after := assign("dispatcher", n, ms)
				owner := map[int]string{}
				for id, ps := range before {
					for _, p := range ps {
						owner[p] = id
					}
				}
				moved := 0
				for id, ps := range after {
					for _, p := range ps {
						if owner[p] != id {
							moved++
						}
					}
				}
				if moved > 3*ideal {
					t.Errorf("n=%d, %d→%d replicas (trial %d): %d partitions moved, the joiner's share is %d", n, k, k+1, trial, moved, ideal)
				}
				total += moved
			}
			if mean := float64(total) / trials; mean > 1.5*float64(ideal)+1 {
				t.Errorf("n=%d, %d→%d replicas: %.1f partitions moved on average, the joiner's share is %d", n, k, k+1, mean, ideal)
			}
		}
	}
}

func TestAssignKeepsASinglePartitionWithTheOldest(t *testing.T) {
	ms := testMembers("solo", 3)
	got := assign("slack-renderer", 1, []Member{ms[2], ms[0], ms[1]})
	if !slices.Equal(got[ms[0].ID], []int{0}) || len(got[ms[1].ID]) != 0 || len(got[ms[2].ID]) != 0 {
		t.Fatalf("one partition, three replicas: %v; want it with the oldest, the others standing by", got)
	}
}

func TestTransformPartitions(t *testing.T) {
	for _, n := range []int{1, 16, 1024} {
		if got := transformPartitions(partitionTransform("loop.in", n)); got != n {
			t.Errorf("transformPartitions(partitionTransform(%d)) = %d", n, got)
		}
	}
	if got := transformPartitions(nil); got != 0 {
		t.Errorf("no transform: %d", got)
	}
}

func TestMemberIDs(t *testing.T) {
	a, b := newMemberID("svc-ids", "pod/a.b c"), newMemberID("svc-ids", "pod/a.b c")
	if a == b {
		t.Fatalf("two runners of one service in one process share the id %q", a)
	}
	for _, id := range []string{a, b, newMemberID("svc-ids", "")} {
		if memberUnsafe.MatchString(id) {
			t.Errorf("member id %q holds a character a KV key token may not", id)
		}
	}
}
