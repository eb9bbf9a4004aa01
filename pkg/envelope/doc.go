// Package envelope is how a catalog event looks outside a Go value: on NATS
// and on the ledger.
//
// On NATS an event is a CloudEvents binary-mode message: ce-* headers, a
// lowercase traceparent, Nats-Msg-Id equal to ce-id, and the protojson of
// loopv1.Event as the body (decision 009). ToMessage and FromMessage convert, and
// FromMessage refuses a message whose headers and body disagree.
//
// On the ledger an event's record carries a hidden HTML comment, the ledger
// envelope, with a JSON object signed by HMAC-SHA256 under LOOP_ENVELOPE_KEY
// (docs/architecture.md, "The ledger"). The signature binds the envelope to its record: the
// repository, the issue number and the record's visible text (VisibleText).
// SealLedger writes a record body with its envelope and ParseLedger reads one
// back against the record it was found in; an envelope whose signature does
// not verify there is ErrForged, never an envelope. A button answer's
// envelope also carries the gate visit it was given for, signed with the rest
// (docs/decisions/030-gate-visits.md). The
// self-authored marker helpers live here too, so every writer and reader of
// GitHub bodies agrees on them.
//
// envelope is pure: no I/O, no NATS import. It depends only on pkg/catalog and
// the generated schema.
package envelope
