# Herald's two commands are `make run` and `make test`; the rest are their parts.
GO       ?= go
FUZZTIME ?= 3s
export PATH := $(PATH):/usr/local/go/bin

.PHONY: run test build test-go fuzz-short bench bench-changefeed bench-delivery bench-nodes demo-tail clean

## run: herald dev: a node with a throwaway Postgres and a demo table that changes every few seconds
run: build
	bin/herald dev

## demo-tail: the changefeed alone: a private Postgres whose demo table is streamed by herald tail
demo-tail: build
	scripts/demo

## test: every test, against a private Postgres and Redis (and under CI=true a Redis Cluster) that scripts/testenv starts and stops
test:
	scripts/testenv run -- $(MAKE) --no-print-directory test-go

build:
	$(GO) build -o bin/herald ./cmd/herald

test-go:
	$(GO) vet ./...
	$(GO) test -race -count=1 -timeout 10m ./...
	FUZZTIME=$(FUZZTIME) scripts/fuzz

## fuzz-short: each fuzz target for $(FUZZTIME)
fuzz-short:
	FUZZTIME=$(FUZZTIME) scripts/fuzz

## bench: the Go benchmarks
bench:
	$(GO) test -run '^$$' -bench . -benchmem ./...

## bench-changefeed: pg_recvlogical and Herald draining the same load, side by side
bench-changefeed: build
	scripts/testenv run -- scripts/bench-changefeed

## bench-delivery: the build before the delivery path v2 against this tree, alternating: CPU per
## delivery, latency, idle memory, changefeed ratio (docs/BENCHMARKS.md; BENCH_WRITE=1 writes it there)
bench-delivery:
	scripts/testenv run -- scripts/bench-delivery

## bench-nodes: one node against three sharing a private Redis, alternating: deliveries/s, latency,
## CPU per delivery over all nodes, Redis commands and bytes per publication and per change
## (docs/BENCHMARKS.md; BENCH_WRITE=1 writes it there)
bench-nodes:
	scripts/bench-nodes

clean:
	rm -rf bin
