// Package memory holds the single-node implementations of Herald's stores: the state lives in
// this process and dies with it. Each type is safe for concurrent use, starts no goroutine and
// needs no closing; expired entries are collected by the operations that meet them.
//
// Presence implements presence.Store: the node's presence, wired into the server; in tests, the
// store several nodes in one process share.
//
// Durable implements durable.Store: the node's durable subscriptions when it is alone, and in
// tests the store several nodes in one process share. Its rules are durable.Queue's.
//
// History implements history.Store: for tests of the table history nodes share, which the
// server keeps on Redis (one node alone keeps its history in the router).
//
// Interest implements interest.Store, for the conformance suite and the cluster node's tests:
// a node alone needs no interest index (its subscriptions live in the router's and the channel
// hub's own indexes), and nodes that share one use the Redis store.
package memory
