// Package storetest is the conformance suite every implementation of a store runs, memory and
// Redis alike: RunInterest for interest.Store, RunBroker for channel.Broker. It checks the
// contracts in those packages' documentation, with real time and short TTLs, polling with
// deadlines rather than sleeping for a fixed guess.
package storetest
