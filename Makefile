# the-loop bus. `make verify test e2e compose-e2e` is the README's test command and what CI runs.
GO        ?= go
# The modules of the workspace (go.work), as directories: the product (.) and
# the modules of what only the tests and the build need — the deploy
# validation (deploy, and the Helm chart's in deploy/helm), the end-to-end and
# in-process suites (test), the status page's browser test and the
# dashboard's (test/observability), the pinned tools
# (docs/decisions/104-one-workspace-lean-product-module.md). `./...` stops at
# a nested module, so every package pattern names them all.
# The workspace whatever GOWORK the shell has: with GOWORK=off the list
# below would shrink to the product, and the other modules' tests would
# silently not run.
export GOWORK := $(CURDIR)/go.work
MODULES   := $(shell GOWORK=$(GOWORK) $(GO) list -m -f '{{.Dir}}' | sed 's|^$(CURDIR)|.|')
# Their packages; tools/ holds none (its tools are built by `make tools`).
PKGS      := $(addsuffix /...,$(filter-out ./tools,$(MODULES)))
# The pinned tools (buf, protoc-gen-go, staticcheck; goreleaser, which only
# release-check builds) are built from their own module in tools/ with
# GOWORK=off, from its go.mod alone.
TOOLS     := bin/tools
FUZZTIME  ?= 10s
# VERSION is stamped into every binary and image this Makefile builds
# (main.version); `the-loop version` prints it. A build without it (go build,
# go run) names its commit from the toolchain's build info instead.
VERSION   ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
# Evaluated once, not at every use.
VERSION   := $(VERSION)
LDFLAGS   := -X main.version=$(VERSION)
BENCHTIME ?= 2s

.PHONY: all build images release-check tools test test-app test-race test-short lint fmt generate verify-generate proto-lint proto-breaking \
        fuzz bench e2e compose-e2e harness tidy verify-tidy check-deps verify up clean

all: build

build:
	$(GO) build -ldflags '$(LDFLAGS)' -o bin/the-loop ./cmd/the-loop

## images: the two images (deploy/Dockerfile), stamped with VERSION, tagged
## $(IMAGE):$(VERSION) and $(IMAGE)-session:$(VERSION) (docs/deploy.md says how
## to push them to your registry).
IMAGE ?= the-loop
images:
	docker build -f deploy/Dockerfile --target service --build-arg VERSION=$(VERSION) -t $(IMAGE):$(VERSION) .
	docker build -f deploy/Dockerfile --target session --build-arg VERSION=$(VERSION) -t $(IMAGE)-session:$(VERSION) .

## release-check: the release configuration (.goreleaser.yaml) checked, and its
## binaries built for linux/amd64 and arm64 as a snapshot into dist/, with
## nothing pulled or pushed; prints its duration (CI runs it). goreleaser is
## the pinned one of tools/, built into bin/tools.
release-check:
	@start=$$(date +%s); \
	( cd tools && GOWORK=off $(GO) build -o ../$(TOOLS)/ github.com/goreleaser/goreleaser/v2 ) && \
	$(TOOLS)/goreleaser check && \
	THE_LOOP_VERSION=$(VERSION) $(TOOLS)/goreleaser build --snapshot --clean && \
	THE_LOOP_VERSION=$(VERSION) ./scripts/release-check.sh dist; rc=$$?; \
	echo "stage release-check: $$(( $$(date +%s) - start ))s (exit $$rc)"; exit $$rc

## tools: build the pinned tools from tools/go.mod into bin/tools.
tools:
	cd tools && GOWORK=off $(GO) build -o ../$(TOOLS)/ github.com/bufbuild/buf/cmd/buf google.golang.org/protobuf/cmd/protoc-gen-go honnef.co/go/tools/cmd/staticcheck

## test: the whole suite, real in-process JetStream servers included; prints its duration.
## Then the ledger-writer's and ingress-github's suites again as a GitHub App (test-app).
test:
	@start=$$(date +%s); mkdir -p $(CURDIR)/test-output; $(GO) test -count=1 -shuffle=on -timeout=20m -artifacts -outputdir=$(CURDIR)/test-output $(PKGS); rc=$$?; \
	echo "stage test: $$(( $$(date +%s) - start ))s (exit $$rc; the browser tests' screenshots are under test-output/_artifacts)"; exit $$rc
	@$(MAKE) --no-print-directory test-app

## test-app: the suites that write and read GitHub, authenticated as a GitHub App against the fake.
test-app:
	@start=$$(date +%s); LOOP_TEST_GITHUB_APP=1 $(GO) test -count=1 -timeout=10m ./services/ledger-writer/ ./services/ingress-github/...; rc=$$?; \
	echo "stage test-app: $$(( $$(date +%s) - start ))s (exit $$rc)"; exit $$rc

test-short:
	$(GO) test -short -count=1 -shuffle=on -timeout=10m $(PKGS)

test-race:
	$(GO) test -race -count=1 -shuffle=on -timeout=30m $(PKGS)

lint: tools
	@out="$$(gofmt -l $$(git ls-files '*.go'))"; if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet $(PKGS)
	$(TOOLS)/staticcheck $(PKGS)

fmt:
	gofmt -w $$(git ls-files '*.go')

## generate: protobuf Go code and the generated docs.
generate: tools
	PATH="$(CURDIR)/$(TOOLS):$$PATH" $(TOOLS)/buf generate
	$(GO) generate $(PKGS)

## verify-generate: fails when generated files differ from what is committed.
verify-generate: generate
	@out="$$(git status --porcelain -- proto docs)"; if [ -n "$$out" ]; then echo "$$out"; echo "generated files drifted: run 'make generate' and commit"; exit 1; fi

proto-lint: tools
	$(TOOLS)/buf lint

proto-breaking: tools
	$(TOOLS)/buf breaking --against '.git#branch=main'

## fuzz: every Fuzz target for FUZZTIME each.
fuzz:
	FUZZTIME=$(FUZZTIME) ./scripts/fuzz.sh

## bench: every benchmark, the multi-process end-to-end ones included (the webhook intake of `the-loop up`
## among them; need tmux; BENCHTAGS= skips them, E2E_BENCHTIME=50x sizes the end-to-end one); figures are
## also printed as ratios to a baseline measured in the same run. The footprint (start to ready, each
## process's memory, a soak's growth) runs its soak for SOAK (default 30m: make bench SOAK=3m is quicker).
bench:
	BENCHTIME=$(BENCHTIME) ./scripts/bench.sh

## e2e: multi-process end-to-end suite (built binary, real nats-server process with authorization;
## the chaos run and the attack suite); -v so the chaos counts and the attacks' refusals print.
e2e:
	@start=$$(date +%s); $(GO) test -count=1 -v -timeout=30m -tags=e2e ./test/e2e/...; rc=$$?; \
	echo "stage e2e: $$(( $$(date +%s) - start ))s (exit $$rc)"; exit $$rc

## compose-e2e: the real docker-compose.yml on this machine's Docker engine, used as it is
## (scripts/docker-env.sh; without one the stage is skipped with one line, unless
## LOOP_TEST_REQUIRE_DOCKER=1, as in CI, has it installed and started): the gate story through the
## containers, a SIGKILL of one container of each service and NATS, the ledger-writer scaled, the
## three-node cluster profile with its stream leader SIGKILLed; prints its counts and duration.
## A Compose the machine lacks is built into bin/tools, never over the user's.
compose-e2e:
	@start=$$(date +%s); ./scripts/docker-env.sh; rc=$$?; \
	if [ $$rc -eq 0 ]; then \
		. bin/tools/compose.env; export LOOP_TEST_COMPOSE; \
		$(GO) test -count=1 -v -timeout=45m -tags='e2e compose' -run '^TestCompose$$' ./test/e2e/; rc=$$?; \
	elif [ $$rc -eq 3 ]; then rc=0; fi; \
	echo "stage compose-e2e: $$(( $$(date +%s) - start ))s (exit $$rc)"; exit $$rc

## harness: copy this machine's Claude Code (the `claude` on PATH, or CLAUDE=path) to
## bin/harness/claude, for the session image's HARNESS=prebuilt (docs/deploy.md).
harness:
	./scripts/harness.sh bin/harness/claude

## tidy: each module's go.mod and go.sum, on its own (GOWORK=off), the product first.
tidy:
	@set -e; for m in $(MODULES); do echo "go mod tidy: $$m"; (cd $$m && GOWORK=off $(GO) mod tidy); done

## verify-tidy: every module of the repository is in go.work, tidy, complete and matches its checksums;
## the product's `go list -m all` names none of the test-only modules and one go-github major; the
## workspace builds the product with its own go.mod's versions (scripts/check-modules.sh).
verify-tidy:
	./scripts/check-modules.sh

## check-deps: pkg never imports services, no service imports another, only pkg/bus (and the
## test-support tree) imports NATS, test imports included; the product binary does not link testing.
check-deps:
	./scripts/check-deps.sh

## verify: formatting, vet, staticcheck, generated files, tidy modules, dependency rules, proto lint;
## prints its duration (CI runs it before the tests).
verify:
	@start=$$(date +%s); $(MAKE) --no-print-directory lint verify-generate verify-tidy check-deps proto-lint; rc=$$?; \
	echo "stage verify: $$(( $$(date +%s) - start ))s (exit $$rc)"; exit $$rc

up:
	$(GO) run ./cmd/the-loop up

clean:
	rm -rf bin
