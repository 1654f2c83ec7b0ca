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
# adapter), OpenTelemetry (the tracing tests), nats.go and franz-go (the outbox's
# JetStream and Kafka publishers), chromedp (the console's browser test) nor DBOS (the
# benchmark's peer). make test runs the nested modules' tests; the benchmark module
# is vetted and linted, and run by make bench.
NESTED := downstream/stripe tracing outbox/natsjs outbox/kafka console/browsertest
TOOLS := bench

# Compiles internal/failpoint's failpoints in; the fault tests build their worker with it.
FAILPOINTS_TAG := tempotent_failpoints

# N is how many orders, sagas or histories a target runs; each target has its own default.
N ?=
CHAOS_TIMEOUT ?= 60m

demo: bin/temporal ## Run the payment saga end to end: dev server, fakepay, worker, N orders (N=50), summary.
	$(GO) run ./samples/payment/cmd/demo -orders $(or $(N),50)

test: vet bin/temporal ## Vet, then every test with the race detector: real Postgres (TEST_DATABASE_URL), real dev server, real Chromium; activity's again on partitioned receipts.
	@[ -n "$$CHROMIUM" ] || command -v chromium >/dev/null || command -v chromium-browser >/dev/null || command -v google-chrome >/dev/null || { echo "make test: the console's browser test drives Chromium: apt-get install chromium (Debian's package), or set CHROMIUM to a browser's binary"; exit 1; }
	$(GO) test -race -count=1 ./...
	TEMPOTENT_TEST_PARTITIONED=1 $(GO) test -race -count=1 ./activity/ ./internal/engine/ ./operator/
	$(GO) test -race -count=1 -tags $(FAILPOINTS_TAG) ./internal/failpoint/
	for m in $(NESTED); do (cd $$m && $(GO) test -race -count=1 ./...) || exit 1; done

vet: ## go vet, every module.
	$(GO) vet ./...
	$(GO) vet -tags $(FAILPOINTS_TAG) ./internal/failpoint/
	for m in $(NESTED) $(TOOLS); do (cd $$m && $(GO) vet ./...) || exit 1; done

lint: vet crossbuild $(STATICCHECK) ## gofmt, go vet, crossbuild and staticcheck (installed into bin/ at a pinned version), every module; promtool checks and tests the alerting rules.
	@unformatted=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$unformatted" ]; then echo "gofmt would change (run gofmt -w on them):"; echo "$$unformatted"; exit 1; fi
	$(STATICCHECK) ./...
	for m in $(NESTED) $(TOOLS); do (cd $$m && $(CURDIR)/$(STATICCHECK) ./...) || exit 1; done
	@command -v promtool >/dev/null || { echo "promtool is not installed: apt-get install prometheus (Debian's package has it)"; exit 1; }
	promtool check rules deploy/prometheus/tempotent-rules.yml
	promtool test rules deploy/prometheus/tempotent-rules.test.yml

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

# make test runs each explorer bounded: 300 histories of the receipt state machine on each table
# layout, 4 of the dispatchers, 24 sagas, 300 key-API programs (2 of them on the dev server).
# make explore runs them long from SEED: N receipt histories (PARTITIONED=1 on the partitioned
# table), DISPATCH_N dispatcher histories, SAGAS_N sagas and KEYS_N key-API programs (KEYS_N/100
# on the dev server); EXPLORERS picks some. A failing history prints the seed and the command
# that replays it (for example EXPLORERS=dispatchers DISPATCH_N=1 SEED=<its seed>).
SEED ?= 1
EXPLORERS ?= receipts dispatchers compensations keys
DISPATCH_N ?= 40
SAGAS_N ?= 300
KEYS_N ?= 3000
explore: ## Explore from SEED: receipts (N=3000, ~2 min; PARTITIONED=1 ~15), dispatchers (DISPATCH_N=40, ~4 min), compensations (SAGAS_N=300), key API (KEYS_N=3000); EXPLORERS= picks.
	@for e in $(EXPLORERS); do echo "== explore $$e from seed $(SEED)"; case $$e in \
	receipts) TEMPOTENT_TEST_PARTITIONED=$(PARTITIONED) TEMPOTENT_EXPLORE_N=$(or $(N),3000) TEMPOTENT_EXPLORE_SEED=$(SEED) \
		$(GO) test -count=1 -run '^TestExploreReceipts$$' -timeout 60m ./internal/engine/ ;; \
	dispatchers) TEMPOTENT_EXPLORE_OUTBOX_N=$(DISPATCH_N) TEMPOTENT_EXPLORE_SEED=$(SEED) \
		$(GO) test -count=1 -run '^TestExploreDispatchers$$' -timeout 60m ./outbox/ ;; \
	compensations) TEMPOTENT_EXPLORE_SAGAS_N=$(SAGAS_N) TEMPOTENT_EXPLORE_SEED=$(SEED) \
		$(GO) test -count=1 -run '^TestExploreCompensations$$' -timeout 60m ./saga/ ;; \
	keys) TEMPOTENT_EXPLORE_KEYS_N=$(KEYS_N) TEMPOTENT_EXPLORE_SEED=$(SEED) \
		$(GO) test -count=1 -run '^TestKeyModel' -timeout 60m ./keys/ ;; \
	*) echo "unknown explorer $$e (receipts, dispatchers, compensations, keys)"; exit 2 ;; \
	esac || exit 1; done

# Mutation testing with gremlins, installed into bin/ at a pinned version (a tool, not a
# dependency of the module). Each mutant runs its package's tests against the real Postgres;
# the exploration runs 100 histories per mutant to keep the whole run near an hour on 2 cores.
# MUTATION.md lists the mutants that survive and why they cannot change behaviour. MUTATE_DIFF=REV
# mutates only the lines changed since REV (what CI runs on a day's changes).
MUTATE_PKGS ?= keys saga internal/engine activity operator migrate outbox inbox webhook downstream activitytest
MUTATE_DIFF ?=
# gremlins v0.6.0 runs from inside the package with git's diffs relative to it and without context
# lines: from the module's root its --diff matches no file (git names them from the root, gremlins
# from the package) and takes a hunk's context lines as changed.
# gremlins kills a timed-out mutant's `go test`, not the test binary it started, which would run
# on (and hold its dev servers) until its own -timeout: each package's run is a process group of
# its own (setsid), killed whole when gremlins is done.
# MUTATE_THRESHOLD=90 fails the run when a package's efficacy (killed over killed and lived) is lower
# (checked here: gremlins v0.6.0's own --threshold-efficacy exits 0 whatever the score).
MUTATE_THRESHOLD ?=
mutate: $(GREMLINS) ## Mutation-test every package the promise rests on (MUTATE_PKGS; hours in all, activity about one); prints each score.
	@mkdir -p .tmp
	for p in $(MUTATE_PKGS); do \
		echo "== gremlins: $$p"; \
		(cd $$p && GIT_CONFIG_COUNT=2 GIT_CONFIG_KEY_0=diff.relative GIT_CONFIG_VALUE_0=true \
			GIT_CONFIG_KEY_1=diff.context GIT_CONFIG_VALUE_1=0 \
			GOFLAGS=-count=1 TEMPOTENT_EXPLORE_N=100 TEMPOTENT_EXPLORE_OUTBOX_N=2 TEMPOTENT_EXPLORE_SAGAS_N=8 \
			setsid --wait sh -c 'echo $$$$ > $(CURDIR)/.tmp/gremlins.pgid; exec "$$@"' gremlins \
			$(CURDIR)/$(GREMLINS) unleash --workers 1 --timeout-coefficient 5 $(if $(MUTATE_DIFF),--diff $(MUTATE_DIFF)) \
			--output-statuses lt $(CURDIR)/$$p) | tee .tmp/gremlins-$$p.txt && status=0 || status=$$?; \
		kill -KILL -- -$$(cat .tmp/gremlins.pgid) 2>/dev/null || true; [ $$status -eq 0 ] || exit 1; \
		$(if $(MUTATE_THRESHOLD),awk -v min=$(MUTATE_THRESHOLD) -v pkg=$$p '/^Test efficacy:/ { seen = 1; e = $$3 + 0; if (e < min) { print "mutate: " pkg " efficacy " e "% is below " min "%"; exit 1 } } END { if (!seen) { print "mutate: gremlins printed no efficacy for " pkg; exit 1 } }' .tmp/gremlins-$$p.txt || exit 1;) \
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
