# Developer commands. Each target is one line of the README's Development
# section; the scripts under .ci/ are what CI runs.

# Packages for test and race, e.g. make race PKG=./store/
PKG ?= ./...
# Runs of each test in make race.
RACE_COUNT ?= 3
# make bench: a short run (about 30 s); BENCH_FLAGS= for the full one (about 70 s).
BENCH_FLAGS ?= -duration 8s -half 5s -bare-duration 4s -warmup 1s

.PHONY: test race fuzz lint bench ci

# The whole suite under the race detector (the README's test command).
test:
	go test -race -count=1 $(PKG)

# The suite RACE_COUNT times in a shuffled order under the race detector:
# order dependence and rare races.
race:
	go test -race -count=$(RACE_COUNT) -shuffle=on $(PKG)

# Every fuzz target for FUZZTIME inputs or time (default 200000x) each.
fuzz:
	bash .ci/fuzz

# golangci-lint at the pinned version (.golangci.yml), installed if missing.
lint:
	bash .ci/lint

# The end-to-end benchmark (cmd/bench): the gateway built and run as a child
# process under load; prints a markdown table.
bench:
	go run ./cmd/bench $(BENCH_FLAGS)

# What CI runs: .ci/run (lint, the fuzz targets, the suite; LINT=0 skips lint).
ci:
	bash .ci/run
