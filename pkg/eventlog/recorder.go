package eventlog

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
)

// Recorder keeps event-log records in memory, in arrival order: a Publisher
// for tests that assert what a service logged, and where `the-loop demo`
// reads the bus's log into. Next, when set, receives every record too (so a
// test can keep the records and still send them to loop.log).
type Recorder struct {
	Next Publisher

	mu   sync.Mutex
	recs []Record
}

// PublishLog decodes and keeps one record, then hands it to Next.
func (r *Recorder) PublishLog(ctx context.Context, subject string, data []byte) error {
	var rec Record
	err := json.Unmarshal(data, &rec)
	if err == nil {
		r.Add(rec)
	}
	if r.Next != nil {
		if nerr := r.Next.PublishLog(ctx, subject, data); nerr != nil {
			return nerr
		}
	}
	return err
}

// Add keeps rec.
func (r *Recorder) Add(rec Record) {
	r.mu.Lock()
	r.recs = append(r.recs, rec)
	r.mu.Unlock()
}

// Len is how many records were kept.
func (r *Recorder) Len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.recs)
}

// Since returns the records kept after the first i.
func (r *Recorder) Since(i int) []Record {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.recs[min(i, len(r.recs)):])
}

// Find returns the records called name whose fields hold every pair of
// match (compared as printed, so 7 matches int64(7) and "7").
func (r *Recorder) Find(name string, match map[string]any) []Record {
	var out []Record
next:
	for _, x := range r.Since(0) {
		if x.Event != name {
			continue
		}
		for k, v := range match {
			if fmt.Sprint(x.Fields[k]) != fmt.Sprint(v) {
				continue next
			}
		}
		out = append(out, x)
	}
	return out
}
