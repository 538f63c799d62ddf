// Package stream defines what a subscription's stream carries, whatever protocol delivers it:
// positions, the view of one change that a group of subscribers needs, one channel message,
// and a gap. Producers (the router, the channel hub) hand these on as shared Items; each
// connection's protocol codec encodes an Item once and every connection with the same codec
// reuses the bytes. The package is pure: no I/O, no goroutines, no protocol.
package stream
