// Package storetest is the conformance suite every implementation of a store runs, memory and
// Redis alike: RunInterest for interest.Store, RunBroker for channel.Broker, RunChannelHistory
// for channel.History, RunHistory for history.Store, RunPresence for presence.Store, and
// RunPresenceNodes for presence.Presence on two nodes over one shared store, RunDurable for
// durable.Store (whose rules it holds each store to by running the same random steps on the
// store and on durable.Queue and comparing every answer). It checks the
// contracts in those packages' documentation, with real time and short TTLs, polling with
// deadlines rather than sleeping for a fixed guess, except where a channel's history must
// expire (the store's clock decides, so RunChannelHistory sleeps past a short TTL); the
// presence suites pass their own clock instead, as presence.Store takes the caller's now.
package storetest
