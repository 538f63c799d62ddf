// Package bench owns herald bench, a bounded load generator: it opens N subscriber
// connections to a node, produces M events at a rate (rows committed through Postgres, or
// publications through the HTTP API), and reports deliveries per second, send-to-receipt
// latency, resyncs, and the node's CPU time and memory per connection. Idle measures the other
// end: what connections that stay subscribed with nothing flowing cost the node, in CPU time,
// memory and goroutines per connection. Over several nodes sharing a Redis, Run spreads the
// subscribers over them in turn, publishes through each in turn or through the first, sums the
// nodes' CPU time, and reads the Redis's INFO counters and the nodes' counters of items sent
// between them, for the cost per event. Floor measures the machine instead of a node: the same
// shape of load served by FloorServe, a plain TCP server that only writes each message to each
// subscriber, so a node's figures can be read against what the machine allows any server.
//
// # Concurrency
//
// Each subscriber is one connection read by one goroutine, which counts each frame without
// decoding it (a prefix says its type; a byte search finds the send time) into a shared tally
// of atomic counters and a lock-free histogram, so the client keeps up with the server. The
// sender runs in its own goroutines (several publish workers, or one Postgres connection), and
// Run's goroutine prints progress and decides when the run is over.
//
// # Lifecycle
//
// Run connects every subscriber before the first event, stops when every expected delivery
// has arrived, when deliveries stop coming after the last event (Config.Drain), or at
// Config.Duration, whichever is first, and returns only once every goroutine it started has
// ended and every connection is closed. Floor likewise; FloorServe returns once it has sent every
// message and its writers have ended, closing its connections. Idle connects, waits for the connections to settle,
// measures over a fixed window, and likewise closes everything before it returns. StartNode starts the node to measure as a child
// process (herald serve, and a private PostgreSQL for table mode); Node.Stop ends both.
// StartNodes starts several sharing a Redis, the first one's PostgreSQL shared, and StopNodes
// ends them, the first last.
package bench
