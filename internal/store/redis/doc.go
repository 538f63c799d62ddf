// Package redis holds the multi-node implementations of Herald's stores on Redis or a Redis
// Cluster, and is the only package that imports the Redis client. Not wired into the server
// yet: `herald serve` uses the memory implementations.
//
// # Keys
//
// Every key starts with Config.Prefix and carries its owner's hash tag, so every script runs on
// one Cluster slot:
//
//	<prefix>:w:{o:<owner>}            SET    watched tokens                     (Interest)
//	<prefix>:t:{o:<owner>}:<token>    HASH   <socket>\0<sub> -> row             (Interest)
//	<prefix>:s:{o:<owner>}:<socket>   HASH   <sub> -> <token>\0<identity>       (Interest)
//	<prefix>:n:{o:<owner>}            HASH   identity -> rows held              (Interest)
//	<prefix>:l:{o:<owner>}            ZSET   socket -> deadline, ms             (Interest)
//	<prefix>:g:{o:<owner>}            STRING generation                         (Interest)
//	<prefix>:c:{c:<channel>}          HASH   e -> epoch, o -> last offset       (Broker)
//	<prefix>:h:{c:<channel>}          SET    nodes holding the channel          (Broker)
//
// A row is <identity>\0<node>\0<data>. The tag's "o:" or "c:" keeps it non-empty whatever the
// owner is (an empty tag would hash the whole key); an owner holding "}" ends its tag early,
// which is the same for all of its keys, so they still share a slot.
//
// # Atomicity
//
// Every write is one Lua script over one owner's keys, so the invariants of interest.Store hold
// under concurrent writers on many nodes, not only in the order one writer sends commands.
// Scripts read the time from Redis (TIME), so deadlines do not depend on the nodes' clocks.
// The dispatch hot path, Interest.Watched, is one SMISMEMBER.
//
// # Concurrency and lifecycle
//
// A Client is safe for concurrent use; Dial connects, Close releases its connections. The
// stores built on it start no goroutine of their own (the client's connection goroutines are
// the client's) and every call is bounded by its context or Config.Timeout.
package redis
