# tempotent — make help lists the targets.

SHELL := /bin/bash
.SHELLFLAGS := -o pipefail -ec
GO ?= go
BIN := bin
STATICCHECK_VERSION := v0.8.2
STATICCHECK := $(BIN)/staticcheck-$(STATICCHECK_VERSION)
GREMLINS_VERSION := v0.6.0
GREMLINS := $(BIN)/gremlins-$(GREMLINS_VERSION)
export TEST_DATABASE_URL ?= postgres://postgres@127.0.0.1:5432/postgres

TEMPORAL_CLI_VERSION := v1.5.1

.PHONY: help demo test vet lint crossbuild bench bench-scale fuzz histories fakepay chaos explore mutate

help: ## List the targets.
	@grep -hE '^[$$()A-Za-z/-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-13s %s\n", $$1, $$2}'

# Modules of their own, so that the toolkit's go.mod carries neither stripe-go (the Stripe
# adapter), OpenTelemetry (the tracing tests) nor DBOS (the benchmark's peer). make test runs
# the nested modules' tests; the benchmark module is vetted and linted, and run by make bench.
NESTED := downstream/stripe tracing
TOOLS := bench

# Compiles internal/failpoint's failpoints in; the fault tests build their worker with it.
FAILPOINTS_TAG := tempotent_failpoints

# N is how many orders, sagas or histories a target runs; each target has its own default.
N ?=
CHAOS_TIMEOUT ?= 60m

demo: bin/temporal ## Run the payment saga end to end: dev server, fakepay, worker, N orders (N=50), summary.
	$(GO) run ./samples/payment/cmd/demo -orders $(or $(N),50)

test: vet bin/temporal ## Vet, then every test with the race detector: real Postgres (TEST_DATABASE_URL), real dev server; activity's again on partitioned receipts.
	$(GO) test -race -count=1 ./...
	TEMPOTENT_TEST_PARTITIONED=1 $(GO) test -race -count=1 ./activity/
	$(GO) test -race -count=1 -tags $(FAILPOINTS_TAG) ./internal/failpoint/
	for m in $(NESTED); do (cd $$m && $(GO) test -race -count=1 ./...) || exit 1; done

vet: ## go vet, every module.
	$(GO) vet ./...
	$(GO) vet -tags $(FAILPOINTS_TAG) ./internal/failpoint/
	for m in $(NESTED) $(TOOLS); do (cd $$m && $(GO) vet ./...) || exit 1; done

lint: vet crossbuild $(STATICCHECK) ## gofmt, go vet, crossbuild and staticcheck (installed into bin/ at a pinned version), every module.
	@unformatted=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$unformatted" ]; then echo "gofmt would change (run gofmt -w on them):"; echo "$$unformatted"; exit 1; fi
	$(STATICCHECK) ./...
	for m in $(NESTED) $(TOOLS); do (cd $$m && $(CURDIR)/$(STATICCHECK) ./...) || exit 1; done

# The library is for Linux, macOS and Windows workers alike; vet on Windows also type-checks the
# tests (the fault tests are unix-only by their //go:build line: they send SIGSTOP).
crossbuild: ## Build the toolkit's module for linux, darwin and windows (amd64), and vet it for windows.
	for os in linux darwin windows; do GOOS=$$os GOARCH=amd64 $(GO) build ./... || exit 1; done
	GOOS=windows GOARCH=amd64 $(GO) vet ./...

$(STATICCHECK):
	@mkdir -p $(BIN)
	GOBIN=$(CURDIR)/$(BIN) $(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)
	mv $(BIN)/staticcheck $@

bench: bin/temporal ## One table, about 2 minutes: cost per step as ratios to the bare operation and to DBOS, targets marked.
	cd bench && $(GO) run . -temporal-cli $(CURDIR)/$(BIN)/temporal

# Row 11: SCALE_ROWS receipts (10 million: about 6 GB on disk twice over, and ten to fifteen
# minutes on 2 cores), lookup and insert latency against an empty table, and the purge of one
# expired day by DELETE against a partition drop. CI runs it on 200,000.
SCALE_ROWS ?= 10000000
bench-scale: ## Receipts at scale (SCALE_ROWS=10000000, ~12 min): latency against an empty table and partitioned, purge by DELETE against a retired day, Store.Partition online.
	cd bench && $(GO) run . -rows 11 -scale-rows $(SCALE_ROWS) -temporal-cli $(CURDIR)/$(BIN)/temporal

# make test explores 300 histories (the test's default) on each table layout; this runs N of
# them from SEED, or replays one failing history with N=1 SEED=<its seed>; PARTITIONED=1
# explores the partitioned table.
SEED ?= 1
explore: ## Explore N histories of the receipt state machine from SEED (N=3000: about two minutes; PARTITIONED=1: about fifteen).
	TEMPOTENT_TEST_PARTITIONED=$(PARTITIONED) TEMPOTENT_EXPLORE_N=$(or $(N),3000) TEMPOTENT_EXPLORE_SEED=$(SEED) $(GO) test -count=1 -run '^TestExploreReceipts$$' -timeout 60m ./activity/

# Mutation testing with gremlins, installed into bin/ at a pinned version (a tool, not a
# dependency of the module). Each mutant runs its package's tests against the real Postgres;
# the exploration runs 100 histories per mutant to keep the whole run near an hour on 2 cores.
# MUTATION.md lists the mutants that survive and why they cannot change behaviour.
MUTATE_PKGS ?= keys saga activity
mutate: $(GREMLINS) ## Mutation-test keys/, saga/ and activity/ with their unit tests (about an hour); prints each score.
	for p in $(MUTATE_PKGS); do \
		echo "== gremlins: $$p"; \
		GOFLAGS=-count=1 TEMPOTENT_EXPLORE_N=100 $(GREMLINS) unleash --workers 1 --timeout-coefficient 5 \
			--output-statuses lt ./$$p || exit 1; \
	done

$(GREMLINS):
	@mkdir -p $(BIN)
	GOBIN=$(CURDIR)/$(BIN) $(GO) install github.com/go-gremlins/gremlins/cmd/gremlins@$(GREMLINS_VERSION)
	mv $(BIN)/gremlins $@

fuzz: ## Fuzz the canonical JSON form for a minute.
	$(GO) test -run '^$$' -fuzz FuzzCanonicalize -fuzztime 60s ./keys/

bin/temporal: ## The Temporal CLI and dev server, pinned (about 5 minutes to build the first time).
	@mkdir -p $(BIN)
	GOBIN=$(CURDIR)/$(BIN) $(GO) install github.com/temporalio/cli/cmd/temporal@$(TEMPORAL_CLI_VERSION)

chaos: bin/temporal ## FAULTS.md rows 1-7, 10-13, 18-21 and 23-26 at random over N sagas (N=50), ending with FAULTS.md's table (unresolved receipts included); PARTITION=1 partitions the receipts while they run.
	TEMPOTENT_CHAOS_N=$(or $(N),50) TEMPOTENT_CHAOS_PARTITION=$(PARTITION) $(GO) test -count=1 -v -run '^TestChaos$$' -timeout $(CHAOS_TIMEOUT) ./faults/ | grep -vE '^(=== |\s+--- |--- PASS)'

fakepay: ## Run the fake payment provider on 127.0.0.1:8420, its ledger kept in .tmp/fakepay.json.
	@mkdir -p .tmp
	$(GO) run ./downstream/fakepay/cmd/fakepay -addr 127.0.0.1:8420 -state .tmp/fakepay.json

histories: bin/temporal ## Re-record the saga histories that the replay test checks, on the dev server.
	TEMPOTENT_RECORD_HISTORIES=1 $(GO) test -count=1 -run TestRecordHistories ./saga/
