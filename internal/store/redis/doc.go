// Package redis holds the multi-node implementations of Herald's stores on Redis or a Redis
// Cluster, and is the only package that imports the Redis client: Interest (interest.Store),
// Broker (channel.Broker and channel.History), Presence (presence.Store), Durable
// (durable.Store: durable subscriptions' queues, leases and bound connections), History
// (history.Store: the tables' recent transactions, one stream per table), Transport (payloads
// from node to node, one stream per node), Nodes (the registry of live nodes and their URLs) and
// Beacon. `herald serve` uses them when redis.url is set, and the memory implementations when
// the node is alone.
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
//	<prefix>:m:{o:<owner>}            STRING mark: 16 hex digits, raised only   (Interest)
//	<prefix>:y:{o:t:<table>}          STREAM <lsn>-0 -> l p t b s d             (History)
//	<prefix>:c:{c:<channel>}          HASH   e -> epoch, o -> last offset       (Broker)
//	<prefix>:h:{c:<channel>}          SET    nodes holding the channel          (Broker)
//	<prefix>:e:{c:<channel>}          STREAM the channel's history: <offset>-0   (Broker)
//	                                         -> t (ms), c (cost), v (event), d (data)
//	<prefix>:i:{p:<shard>}            ZSET   channel -> earliest deadline, ms    (Presence)
//	<prefix>:d:{p:<shard>}:<channel>  ZSET   member id -> deadline, ms           (Presence)
//	<prefix>:m:{p:<shard>}:<channel>  HASH   member id -> member                 (Presence)
//	<prefix>:a:{p:<shard>}:<channel>  HASH   the channel's sweep lease           (Presence)
//	<prefix>:x:{n:<node>}             STREAM what other nodes send the node      (Transport)
//	<prefix>:b:{b:<name>}             STRING a beacon: a value with a TTL         (Beacon)
//	<prefix>:v:{r:nodes}              ZSET   node -> deadline, ms                (Nodes)
//	<prefix>:u:{r:nodes}              HASH   node -> <incarnation> <url>         (Nodes)
//	<prefix>:jh:{j:<holder>}          HASH   name -> def                         (Durable)
//	<prefix>:js:{j:<holder>}:<name>   HASH   def start tail seq items bytes ...  (Durable)
//	<prefix>:jc:{j:<holder>}:<name>   HASH   conn -> order|node|inflight|deadline (Durable)
//	<prefix>:jq:{j:<holder>}:<name>   ZSET   entry ids in queue order            (Durable)
//	<prefix>:je:{j:<holder>}:<name>   HASH   id -> entry                         (Durable)
//	<prefix>:jl:{j:<holder>}:<name>   HASH   id -> lease|deadline|attempts|last|tried (Durable)
//	<prefix>:jp:{j:<holder>}:<name>   HASH   pos -> id                           (Durable)
//	<prefix>:jk:{j:<holder>}:<name>   HASH   settled pos -> conn                 (Durable)
//	<prefix>:jr:{j:<holder>}:<name>   LIST   settled positions, newest first     (Durable)
//	<prefix>:jo:{j:<holder>}:<name>   STRING the owner's node, with its claim's TTL (Durable)
//
// A row is <identity>\0<node>\0<data>. The tag's "o:" or "c:" keeps it non-empty whatever the
// owner is (an empty tag would hash the whole key); an owner holding "}" ends its tag early,
// which is the same for all of its keys, so they still share a slot.
//
// A durable holder is <len(subject)>:<subject><app>: every key of a holder's subscriptions, and
// its index that counts them, share its slot, so one script steps a subscription and checks
// the holder's limit. An entry is m\n<pos>\n<size>\n<channel>\n<event>\n<data> or
// g\n<first>\n<last>\n<lost>\n<reason>. Every step renews the subscription's keys' TTL
// (durable.idle_ttl plus the connections' TTL, Redis's clock), the backstop that collects one
// whose every node died.
//
// `herald doctor` reads, and only reads, what a deployment needs of Redis through the Client:
// Inspect (each server's version, Cluster mode and state, maxmemory-policy) and CheckLayout
// (on a Cluster, that each group of keys above hashes to one slot, as CLUSTER KEYSLOT counts).
//
// Presence keys carry the tag of the channel's shard (FNV-1a of the channel, modulo
// PresenceShards), not of the channel: the shard's index, which Expire reads to find the channels
// with a member due, then sits in the channel's slot, and one script changes both. A member is
// <len(subject)>:<subject><meta>. A channel's keys are deleted with its last member, and expire
// by TTL (twice the members' TTL, renewed by tracks and heartbeats) if nobody writes or sweeps
// them any more. A lease holds n:<node> -> the node's claim deadline (ms) for each claimant, w
// -> the node that wrote the roster and r -> the roster, <len(id)>:<id><len(subject)>:<subject>
// per member. It lives while some node claims it (each claim renews its TTL, twice the members'),
// whether the channel has members or not, and is deleted with its last claim, or by Expire with
// the last member of a channel nobody claims.
//
// # Atomicity
//
// Every write is one Lua script over one owner's keys, so the invariants of interest.Store hold
// under concurrent writers on many nodes, not only in the order one writer sends commands.
// Scripts read the time from Redis (TIME), so deadlines do not depend on the nodes' clocks.
// Presence is the exception: presence.Store takes the caller's now, so its members' deadlines
// and its claims' are the nodes' clocks, which must agree to well within presence.ttl; its keys'
// TTLs are Redis's. Each of its writes is one script over one shard's keys, and Track counts the
// live members in the script that adds one, so concurrent tracks from many nodes never pass the
// cap. Sweep claims, elects (node ids compared byte by byte, whatever the server's locale),
// expires and writes the leader's roster in one script, so two claims at one instant never both
// lead, and each expired member is returned to one node.
// A channel's history is appended in the script that takes the publication's offset (Append),
// so the history's order is offset order whichever node published, and trimmed there, exactly,
// by count, bytes and age (Redis's clock); it expires whole a TTL after its last append. Forget
// by the last node holding the channel lets the position hash expire with the history rather
// than deleting it, so the epoch outlives its holders exactly as long as the history does.
// The routing hot path is one script per owner per batch, Interest.Probe (or Stamp): the
// owner's generation and which tokens are watched; the rows of watched tokens (one script) are
// read only when the generation moved.
//
// # Concurrency and lifecycle
//
// A Client is safe for concurrent use; Dial connects, Close releases its connections. Interest,
// Broker, Presence, Nodes and Beacon start no goroutine of their own (the client's connection
// goroutines are the client's) and every call is bounded by its context or Config.Timeout. A
// Client's Run owns one goroutine, which pings every node each Config.PingInterval so that
// Healthy answers at once (for a readiness probe) without asking Redis. A Transport's Run owns
// its reader and one sender per destination node, and returns when they have ended; neither
// Run ends on a Redis outage, both retry with backoff until their context ends. Nodes' Run is a
// loop on its caller's goroutine: it renews the node's entry every TTL/3 and removes it when
// its context ends.
//
// # Nodes
//
// The registry is one pair of keys per prefix, in one slot: each node's deadline (Redis's clock,
// TTL past its last registration) and its entry, its URL behind the incarnation that registered
// it. A registration reaps entries past their deadline and is refused while another live
// incarnation holds the id; a lookup answers only for a node before its deadline. A cluster has
// tens of nodes, each renewing every few seconds, so one slot carries the registry easily, and
// URL's cache keeps SSE commands handed between nodes from asking it each time.
//
// # History
//
// A table's history is one stream under its interest owner's tag ("t:<table>"), so it shares
// the slot of the table's mark. An entry's ID is the transaction's commit LSN, "<lsn>-0", and
// its fields are l, its LSN, and p, its Prev (history.Entry), each 16 hex digits so a script
// compares them as strings; t, when it was appended (ms, Redis's clock); b, the payload bytes
// appended to the stream before it, and s, its own, so a script knows the bytes from any entry
// to the newest without reading them; d, the payload. Append is one script per table (a
// transaction's tables in one pipeline of EVALSHA): it drops an entry not above the stream's
// last, raises the entry's Prev to the last's LSN, appends it, lets go of at most 16 of the
// oldest entries past the bounds (never the one appended), and sets the stream's TTL to the
// age bound, so an idle table's history goes. Read is one script: the oldest entry's Prev,
// then the range, in batches of 64, up to the caller's limit.
//
// # Transport
//
// Each node reads one stream, which its reader creates and keeps alive by TTL; producers append
// with NOMKSTREAM, so a dead node's stream is not brought back. Each entry names its producer,
// the producer's incarnation and a sequence number per (incarnation, destination). The reader
// hands payloads over in stream order, skips a number it has seen (a batch sent again after an
// error), and reports as a gap:
//
//   - a jump in a producer's numbers (its queue overflowed, its append found no stream, or the
//     stream was trimmed before it was read): GapLost;
//   - a tick naming a number it has not read: GapLost. A sender appends a tick, carrying the
//     last number it spent, when its queue dropped its last payloads, and every Heartbeat while
//     idle for StreamTTL after its last Send, so a producer that falls silent after losing
//     entries is still found out;
//   - its last-read entry trimmed away, found by a check after each full read (a trim keeps at
//     least MaxLen entries, and MaxLen is at least MinMaxLen, at least any Batch, so only a full
//     read can follow one): GapLost for every producer it knows, before the entries read;
//   - a new incarnation: GapRestart;
//   - its stream gone (Redis restarted without its data, or lost it; found on renewing the TTL
//     after a read that found nothing or failed): GapStreamGone for every producer it knows,
//     once, when it has made the stream again.
//
// A producer whose every entry was trimmed unread, and which died before its next tick, goes
// unreported: the reader never knew of it. While Redis is unreachable, senders retry their batch
// (their queues fill, then drop, each drop a spent number) and the reader retries its read; an
// outage logs a line as it starts and one as it ends, per goroutine. Transport.Stats counts
// payloads and bytes sent and received, drops by DropReason, gaps by GapReason, and the Redis
// commands and round trips spent. Bounds: each destination's queue by payloads and bytes, each
// stream by MaxLen entries.
package redis
