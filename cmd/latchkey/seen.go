package main

import (
	"fmt"
	"time"
)

// seen is what inspect --watch has seen of one name over its reads: the holders (a lock's
// owners, a permit semaphore's permits) that came and went, how long the holds it saw end
// lasted, and the most waiters at once. Read every --interval, it is a lower bound: a hold
// that began and ended between two reads is not seen, and a hold's length is known to an
// interval.
type seen struct {
	Reads      int   `json:"reads"`
	ReadsHeld  int   `json:"reads_held"`             // reads that found a holder
	Acquired   int   `json:"acquisitions_seen"`      // holders seen appear (after the first read)
	Released   int   `json:"releases_seen"`          // holders seen go
	HoldMeanMs int64 `json:"hold_mean_ms,omitempty"` // of the holds seen end: from the first to the last read that saw each
	HoldMaxMs  int64 `json:"hold_max_ms,omitempty"`
	WaitingMax int64 `json:"waiting_max"` // fair queue, writer claims and waiting Clients, at once

	since     map[string]time.Time // the holders of the last read: when first seen
	last      time.Time            // the last read
	holdTotal time.Duration
}

// observe takes in the state read at at.
func (s *seen) observe(st state, at time.Time) {
	now := holdersOf(st)
	if len(now) > 0 {
		s.ReadsHeld++
	}
	if s.since != nil {
		for h := range now {
			if _, ok := s.since[h]; !ok {
				s.Acquired++
			}
		}
		for h, first := range s.since {
			if _, ok := now[h]; !ok {
				s.Released++
				held := s.last.Sub(first)
				s.holdTotal += held
				s.HoldMeanMs = s.holdTotal.Milliseconds() / int64(s.Released)
				s.HoldMaxMs = max(s.HoldMaxMs, held.Milliseconds())
			}
		}
	}
	next := make(map[string]time.Time, len(now))
	for h := range now {
		if first, ok := s.since[h]; ok {
			next[h] = first
		} else {
			next[h] = at
		}
	}
	s.since, s.last = next, at
	s.Reads++
	s.WaitingMax = max(s.WaitingMax, int64(len(st.Queue)+len(st.Writers))+st.Clients)
}

// holdersOf are the holders in st: a lock's owners, a permit semaphore's permits.
func holdersOf(st state) map[string]struct{} {
	hs := make(map[string]struct{}, len(st.Holders)+len(st.Acquired))
	for _, h := range st.Holders {
		hs[h.Owner] = struct{}{}
	}
	for _, p := range st.Acquired {
		hs[p.ID] = struct{}{}
	}
	return hs
}

// String is the line inspect --watch prints under its table.
func (s *seen) String() string {
	line := fmt.Sprintf("%d reads, %d of them held; %s seen, %s", s.Reads, s.ReadsHeld,
		plural(int64(s.Acquired), "acquisition"), plural(int64(s.Released), "release"))
	if s.Released > 0 {
		line += fmt.Sprintf("; holds %s mean, %s max", msText(s.HoldMeanMs), msText(s.HoldMaxMs))
	}
	return line + fmt.Sprintf("; up to %d waiting", s.WaitingMax)
}
