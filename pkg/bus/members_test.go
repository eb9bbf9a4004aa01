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

// TestAssignGivesARestartedReplicaItsPartitionsBack: a replica restarted
// under the same name (a new process id, so a new member id) owns the same
// partitions as before once its previous record has expired, and while
// that record lives it is the restarted one that is ranked by the name.
func TestAssignGivesARestartedReplicaItsPartitionsBack(t *testing.T) {
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	member := func(name string, pid int, at time.Duration) Member {
		return Member{ID: fmt.Sprintf("%s-%d-1", name, pid), Name: name, Since: base.Add(at)}
	}
	a, b, c := member("host-a", 10, 0), member("host-b", 20, time.Second), member("host-c", 30, 2*time.Second)
	before := assign("dispatcher", 16, []Member{a, b, c})
	b2 := member("host-b", 99, time.Minute)
	after := assign("dispatcher", 16, []Member{a, c, b2})
	for _, pair := range [][2]Member{{a, a}, {b, b2}, {c, c}} {
		if !slices.Equal(before[pair[0].ID], after[pair[1].ID]) {
			t.Errorf("%s: %v before the restart, %v after", pair[0].Name, before[pair[0].ID], after[pair[1].ID])
		}
	}
	// While the dead process's record lives, both are members: the
	// restarted one keeps most of its partitions (ranked by the name), the
	// old record takes what the ids give it.
	during := assign("dispatcher", 16, []Member{a, b, c, b2})
	kept := 0
	for _, p := range during[b2.ID] {
		if slices.Contains(before[b.ID], p) {
			kept++
		}
	}
	if kept < len(during[b2.ID])/2 {
		t.Errorf("during the old record's lease the restarted replica owns %v, of which %d were its own %v", during[b2.ID], kept, before[b.ID])
	}
	if got := rankKeys([]Member{b, b2}); got[0] != "id:"+b.ID || got[1] != "name:host-b" {
		t.Errorf("rank keys of two records named host-b, oldest first: %v", got)
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
