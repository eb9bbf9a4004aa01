// Package webhook bounds what an HTTP intake that verifies a signature over
// the body — ingress-github's webhook, ingress-slack's Events API and
// interactions — spends on a request before the request has proven it is
// signed (SECURITY.md, boundary 9; decision 037).
//
// Anyone who can reach such an endpoint can send it requests, so nothing a
// request costs may depend on what it claims about itself:
//
//   - Slots caps the requests handled at once; one more is refused at once
//     rather than queued.
//   - A Budget holds the bodies being read and checked. A request takes room
//     for its bytes as they arrive, one Chunk at a time, never for the size
//     it announces: a request that announces 25 MiB and sends a trickle holds
//     one chunk, not 25 MiB. When the budget has no room for the next chunk
//     the request is refused (ErrBusy) and its chunks go back.
//   - A Pace bounds how long a body may take: a short floor plus time in
//     proportion to the bytes received, enforced as the connection's read
//     deadline. A sender that stalls or trickles is cut off (ErrSlow), so
//     what an unproven request holds it holds only for as long as its own
//     bytes pay for.
//   - Refusals counts refusals by reason and writes at most one
//     webhook.rejected record per reason per interval, so refused requests
//     cannot write to the event log at will.
//
// The package knows no signature scheme: the caller's Check is written
// every byte of the body as it arrives and says at the end whether they are
// the signed ones; the body is handed out only then.
package webhook
