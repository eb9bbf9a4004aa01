package dispatcher

import "context"

// wire gives each of the service's parts what it needs of the service's
// dependencies and settings, once New has chosen the terminal.
func (s *Service) wire() {
	d, set := s.deps, s.set
	s.records = recorder{events: d.Events, m: s.m}
	s.marks = &marker{conn: d.Conn, config: d.Config, log: d.Log, tmux: set.Runner == RunnerTmux}
	s.gates = &gates{conn: d.Conn, config: d.Config, log: d.Log, events: d.Events, gateWait: s.m.gateWait,
		workdir: set.Workdir, sessions: &s.store, tests: s.runTests}
	s.gates.runCtx, s.stopRuns = context.WithCancel(context.Background())
	s.endpoint = &sessionEndpoint{host: set.Host, addr: set.SessionAddr, urlHost: set.SessionEndpointHost, sessions: &s.store, gates: s.gates,
		conn: d.Conn, log: d.Log, events: d.Events, refused: s.m.sessionRefused, scrubber: set.Scrub,
		critic: &criticRunner{s: s, running: map[string]string{}}}
	s.leases = &leases{host: set.Host, period: set.Lease, log: d.Log, events: d.Events, elsewhere: s.m.elsewhere}
	s.panes = &panes{term: s.tmux, host: set.Host, probe: set.ResumeProbe, log: d.Log}
	s.control = &controller{records: s.records, leases: s.leases, panes: s.panes, events: d.Events, log: d.Log,
		unmatched: s.unmatched, spawn: s.spawn, removeWorkspace: s.removeWorkspace, adopt: s.adopt}
}
