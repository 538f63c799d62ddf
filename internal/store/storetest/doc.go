// Package storetest is the conformance suite every implementation of a store runs, memory and
// Redis alike: RunInterest for interest.Store, RunBroker for channel.Broker, RunPresence for
// presence.Store, RunHistory for history.Store, and RunPresenceNodes for presence.Presence on
// two nodes over one shared store. It checks the contracts in those packages' documentation, with real time and short
// TTLs, polling with deadlines rather than sleeping for a fixed guess; the presence suites pass
// their own clock instead, as presence.Store takes the caller's now.
package storetest
