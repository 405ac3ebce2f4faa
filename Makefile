# saltbush: the two commands are `make run` and `make test`. Both build the
# pinned tools (tools/go.mod) themselves; nothing needs installing first.

GO        ?= go
# `make` alone builds (the stamp rule below would otherwise be the first).
.DEFAULT_GOAL := all
# The project builds with the toolchain go.mod's `toolchain` line names
# (go1.27.3), which the go command fetches through the Go module proxy on
# first use: the machines' own Go (go1.26.8) is older and lacks security
# fixes of the standard library that govulncheck finds reachable.
export GOTOOLCHAIN := $(shell awk '$$1 == "toolchain" { print $$2 }' go.mod)
$(if $(GOTOOLCHAIN),,$(error go.mod has no toolchain line))
# The pinned binaries below (Kubernetes, eksctl, the node's programs) are
# built again when the toolchain changes, not only when their go.mod does.
# A binary says which commit it was built from (`saltbush version`, package
# release): the go command stamps it from the repository unless GOFLAGS
# says -buildvcs=false, as this machine's environment does. auto stamps
# inside a git work tree and builds without elsewhere (a source archive).
export GOFLAGS := $(strip $(filter-out -buildvcs=%,$(GOFLAGS)) -buildvcs=auto)
TOOLCHAIN_STAMP := bin/.toolchain-$(GOTOOLCHAIN)
$(TOOLCHAIN_STAMP):
	mkdir -p bin && rm -f bin/.toolchain-* && touch $@
BUF       := $(GO) tool -modfile=tools/go.mod buf
# golangci-lint and govulncheck share tools/go.mod with buf and the protoc
# plugins: adding them left the build list of those tools unchanged, so api/
# and buf's checks are what they were.
GOLANGCI_LINT := $(GO) tool -modfile=tools/go.mod golangci-lint
GOVULNCHECK   := $(GO) tool -modfile=tools/go.mod govulncheck
# govulncheck reads a local database built from this version of the module
# golang.org/x/vulndb (through the Go module proxy; tools/vulndb), not
# vuln.go.dev. The hash pins its content; a newer version is a new pair.
VULNDB_VERSION := v0.0.0-20261105234957-e22db6528018
VULNDB_SUM     := h1:mfngRv0Yoh0VApsXKEN82CjD99kl7mtparN3bs3JnqI=
VULNDB         := $(CURDIR)/bin/vulndb/$(VULNDB_VERSION)
# buf run from api/proto/ (module root) so --path and the baseline image agree.
BUF_PROTO := $(GO) tool -modfile=../../tools/go.mod buf
GOTEST    ?= $(GO) test
# Every test runs under the race detector.
TESTFLAGS ?= -count=1 -race -timeout=20m
# The tests (and the race-built agent they run) are linked by the Go linker
# alone. The agent's dependencies (fluxcd/pkg/ssa, through k8s.io/cli-runtime
# and kustomize) import package plugin, whose cgo otherwise makes the go
# command hand the link to the host linker, for a plugin nothing loads:
# linked internally, tests/agent, access, ops and podcreds took 40 CPU-seconds
# to link instead of 54. -s -w as go test links a binary it does not keep
# (unit keeps them, below): without, each link took a third longer.
TEST_LDFLAGS := -ldflags='-linkmode=internal -s -w'

.PHONY: all build run test checks generate check-generated lint vulndb vulndb-selftest breaking baseline contract-selftest unit fuzz-short fuzz bench kube eksctl node images-verify examples-verify demo

all: build

build:
	$(GO) build -o bin/saltbush ./cmd/saltbush

## run: serve with embedded etcd in ./data (façade on 127.0.0.1:8080, gRPC on 127.0.0.1:9090).
run: build
	./bin/saltbush serve

## test: generated-code check, lint, breaking-change check, their self-test, all tests (race detector on).
## check-generated runs first: it rewrites api/, which everything else
## builds. Then three chains run side by side: unit, fuzz-short, and the
## other checks one after another. unit is the longest and mostly waits on
## real processes (etcd, kube-apiserver, the node's pods, timeouts the
## tests wait out): its user+sys time is a fraction of its wall time, and
## the CPU-bound checks and fuzzing use the cores it leaves idle.
test: check-generated
	$(MAKE) --no-print-directory -j3 unit fuzz-short checks

## checks: every check of `make test` beside check-generated and the tests,
## one after another.
checks:
	$(MAKE) --no-print-directory lint
	$(MAKE) --no-print-directory breaking
	$(MAKE) --no-print-directory contract-selftest
	$(MAKE) --no-print-directory vulndb-selftest
	$(MAKE) --no-print-directory images-verify
	$(MAKE) --no-print-directory examples-verify

## generate: regenerate the contracts module's code, api/saltbush and
## api/openapi (Go, gRPC, gateway, OpenAPI), from api/proto/.
generate:
	rm -rf api/saltbush api/openapi/*.json
	$(BUF) generate

## check-generated: fail if api/ differs from what api/proto/ generates, or the
## validation table from what the EKS model on this machine generates.
check-generated: generate model-table
	git add -N api
	git diff --exit-code --stat -- api || { echo "api/ is stale: run 'make generate' and commit the result" >&2; exit 1; }
	git diff --exit-code --stat -- $(MODEL_TABLE) || { echo "$(MODEL_TABLE) is stale: run 'make model-table' and commit the result" >&2; exit 1; }

## model-table: regenerate server/validation's table of input constraints
## from AWS's EKS model, the newest this machine has: botocore's
## service-2.json merged with the EKS module of the AWS SDK for Go v2 that
## go.mod requires (docs/contracts.md, "Input validation"). EKS_MODEL
## overrides botocore's path.
EKS_MODEL  ?=
MODEL_TABLE := server/validation/model_gen.go
.PHONY: model-table
model-table:
	$(GO) run ./server/validation/genmodel -out $(MODEL_TABLE) $(if $(EKS_MODEL),-model $(EKS_MODEL))

## lint: buf lint and format, gofmt, go vet, the import rules, golangci-lint
## (.golangci.yml), and govulncheck on the local database: it fails on a
## reachable vulnerability that tools/vulndb/accepted.txt does not accept.
## golangci-lint waits for another run on this machine (another checkout) to
## finish instead of failing: its cache is shared.
lint: vulndb
	$(BUF) lint
	$(BUF) format --diff --exit-code
	@files=$$(gofmt -l $$(git ls-files -co --exclude-standard '*.go')); \
	if [ -n "$$files" ]; then echo "gofmt needed:" $$files >&2; exit 1; fi
	$(GO) vet ./...
	cd api && $(GO) vet ./...
	$(GO) test -count=1 ./tests/imports/
	$(GOLANGCI_LINT) run --allow-serial-runners ./...
	cd api && $(GO) tool -modfile=$(CURDIR)/tools/go.mod golangci-lint run --allow-serial-runners ./...
	cd tools && $(GO) tool golangci-lint run --allow-serial-runners ./vulndb/
	$(GOVULNCHECK) -db file://$(VULNDB) -format json ./... > bin/govulncheck.json
	cd tools && $(GO) run ./vulndb check -accept vulndb/accepted.txt $(CURDIR)/bin/govulncheck.json

## vulndb: the local vulnerability database govulncheck reads, built once per
## VULNDB_VERSION into bin/vulndb/ (index/db.json is written last).
vulndb: $(VULNDB)/index/db.json
$(VULNDB)/index/db.json:
	cd tools && $(GO) run ./vulndb build -version $(VULNDB_VERSION) -sum $(VULNDB_SUM) -out $(VULNDB)

## vulndb-selftest: prove the database holds a known vulnerability and that
## the check fails on a module calling a vulnerable symbol (and passes once
## it is fixed).
vulndb-selftest: vulndb
	GO=$(GO) bash scripts/vulndb-selftest.sh $(VULNDB)

## breaking: compare api/proto/ with the committed baseline image of the last
## released contract, with the rule set each package promises (docs/contracts.md).
breaking:
	cd api/proto && $(BUF_PROTO) breaking . --against baseline.binpb --path saltbush/eks \
		--config '{"version":"v1","breaking":{"use":["WIRE_JSON"]}}'
	cd api/proto && $(BUF_PROTO) breaking . --against baseline.binpb --path saltbush/storage \
		--config '{"version":"v1","breaking":{"use":["WIRE"]}}'
	cd api/proto && $(BUF_PROTO) breaking . --against baseline.binpb --path saltbush/control \
		--config '{"version":"v1","breaking":{"use":["FILE"]}}'
	@if [ -d api/proto/saltbush/delivery ]; then cd api/proto && $(BUF_PROTO) breaking . --against baseline.binpb \
		--path saltbush/delivery --config '{"version":"v1","breaking":{"use":["WIRE"]}}'; fi

## baseline: refresh api/proto/baseline.binpb. A deliberate act: it needs an ADR
## in docs/adr/ (see docs/adr/0001-additive-contract-evolution.md).
baseline:
	$(BUF) build api/proto --exclude-source-info -o api/proto/baseline.binpb

## contract-selftest: prove check-generated and breaking fail when they should.
contract-selftest:
	bash scripts/contract-selftest.sh

## images-verify: check the guest agent's VM image files (images/systemd,
## images/openrc, images/k3s, images/agent.yaml.example) against the built
## agent: systemd-analyze verify and security, the preset, the OpenRC script,
## the YAML. Needs systemd-analyze (Debian package systemd; not running).
images-verify:
	$(GO) build -o bin/saltbush-agent ./cmd/saltbush-agent
	GO=$(GO) bash scripts/verify-images.sh bin/saltbush-agent

## examples-verify: check what docs/operations.md tells operators to
## install, docs/examples: the systemd units with systemd-analyze verify and
## security, the Prometheus alert rules with promtool (Debian packages
## systemd and prometheus; neither need be running). tests/ops checks the
## same files against running processes.
examples-verify:
	$(GO) build -o bin/saltbush ./cmd/saltbush
	GO=$(GO) bash scripts/verify-examples.sh bin/saltbush

## demo: add-on delivery and cluster access end to end on one machine
## (saltbush, a real kube-apiserver using the agent's webhooks, controller
## manager and scheduler, the kubelet double, the real agent; the AWS CLI
## drives an add-on through its lifecycle, then an access entry decides what
## the real kubectl may do). DEMO_KEEP=1 keeps it running until Ctrl-C.
demo:
	bash scripts/demo.sh

## kube: the real Kubernetes control plane the guest tests run against
## (kube-apiserver, kube-controller-manager, kube-scheduler) and the real
## kubectl the access tests drive, built from k8s.io/kubernetes through
## the Go module proxy (tools/kube/go.mod pins it). About 12 minutes cold
## on 2 cores; the Go build cache keeps it.
KUBE_BIN := $(CURDIR)/bin/kube
KUBE_CMDS := kube-apiserver kube-controller-manager kube-scheduler kubectl kubelet kube-proxy
# Built from the module, the binaries would report v0.0.0-master+$$Format:%H$$;
# stamp the pinned version so that nodes and `kubectl version` say it.
KUBE_VERSION := $(shell awk '$$1 == "k8s.io/kubernetes" { print $$2 }' tools/kube/go.mod)
KUBE_LDFLAGS := -X k8s.io/component-base/version.gitVersion=$(KUBE_VERSION) \
	-X k8s.io/component-base/version.gitMajor=$(word 1,$(subst ., ,$(patsubst v%,%,$(KUBE_VERSION)))) \
	-X k8s.io/component-base/version.gitMinor=$(word 2,$(subst ., ,$(KUBE_VERSION))) \
	-X k8s.io/component-base/version.gitTreeState=clean
kube: $(KUBE_BIN)/.built
$(KUBE_BIN)/.built: tools/kube/go.mod tools/kube/go.sum $(TOOLCHAIN_STAMP)
	cd tools/kube && $(GO) build -ldflags '$(KUBE_LDFLAGS)' -o $(KUBE_BIN)/ $(addprefix k8s.io/kubernetes/cmd/,$(KUBE_CMDS))
	@for c in $(KUBE_CMDS); do test -x $(KUBE_BIN)/$$c || { echo "$$c was not built" >&2; exit 1; }; done
	touch $@

## eksctl: the real eksctl that tests/eksctl drives against saltbush, built
## from github.com/weaveworks/eksctl through the Go module proxy
## (tools/eksctl/go.mod pins it) into bin/eksctl/VERSION/, with the empty
## pre-release id its release builds carry (`eksctl version` says VERSION).
## Cold it takes about 12 CPU-minutes (some 1,400 packages); the Go build
## cache keeps them, and a warm build only links (about 40 s). See
## docs/clients.md.
EKSCTL_VERSION := $(shell awk '$$1 == "github.com/weaveworks/eksctl" { print $$2 }' tools/eksctl/go.mod)
EKSCTL := $(CURDIR)/bin/eksctl/$(EKSCTL_VERSION)/eksctl
eksctl: $(EKSCTL)
$(EKSCTL): tools/eksctl/go.mod tools/eksctl/go.sum $(TOOLCHAIN_STAMP)
	cd tools/eksctl && $(GO) build -trimpath -o $@ \
		-ldflags '-s -w -X github.com/weaveworks/eksctl/pkg/version.PreReleaseID=' github.com/weaveworks/eksctl/cmd/eksctl

## node: the programs of the add-on images a real test node serves
## (tests/nodetest): coredns at the catalogue's two versions and
## metrics-server, each built from its own module through the Go module
## proxy (tools/node/NAME-VERSION/go.mod pins it) into
## bin/node/NAME-VERSION/. The kubelet and kube-proxy come from `make
## kube`. Cold about 8 CPU-minutes; the Go build cache keeps them.
NODE_BIN := $(CURDIR)/bin/node
NODE_TOOLS := $(notdir $(wildcard tools/node/*))
node: $(NODE_BIN)/.built
$(NODE_BIN)/.built: $(wildcard tools/node/*/go.mod tools/node/*/go.sum) $(TOOLCHAIN_STAMP)
	@set -e; for d in $(NODE_TOOLS); do \
		pkg=$$(awk '$$1 == "tool" { print $$2 }' tools/node/$$d/go.mod); \
		echo "build $$pkg ($$d)"; \
		(cd tools/node/$$d && CGO_ENABLED=0 $(GO) build -trimpath -ldflags="-s -w" -o $(NODE_BIN)/$$d/ $$pkg); \
	done
	touch $@

## unit: every test of both modules. go test starts packages in the order
## it is given them, -p at a time: those taking more than about 15 seconds
## are named first, longest first, so that none starts last and sets the
## run's length alone (the last minute is then seconds-long packages,
## three at a time). UNIT_P is how many run (or link) at once: 3 by
## default, which keeps both cores busy (the long packages mostly wait on
## real processes); at 2 the cores were idle a quarter of the time and make
## test took 20 minutes instead of 17.
SLOW_PACKAGES := ./tests/faults ./tests/addons ./tests/agent ./tests/podcreds ./tests/access \
	./tests/nodetest ./tests/conformance ./tests/clients ./tests/load ./tests/compat ./tests/eksctl ./server/delivery \
	./tests/ops ./tests/backup ./tests/kubetest ./guest/apply ./server/addon ./tests/sts ./store
UNIT_P ?= 3
# The test packages that run the real agent (tests/agent, access, addons,
# eksctl, podcreds) share one race build of it (agentproc.RaceBinaryEnv),
# and those that run the real saltbush (tests/faults, ops, conformance,
# sts) one build of that (saltbushbin.Env), instead of linking one each.
AGENT_RACE_BIN := $(CURDIR)/bin/race/saltbush-agent
SALTBUSH_TEST_BIN := $(CURDIR)/bin/test/saltbush
# go test keeps the test binaries in bin/test/ (-o), where the go command
# relinks only those whose inputs changed instead of every one each run (a
# race-built test binary takes about 3 CPU-seconds to link). A directory
# holds one binary per package name, so the packages named like one under
# tests/ keep theirs apart, and run first (they are quick). A new such pair
# fails with "cannot write test binary NAME.test for multiple packages":
# add the one outside tests/ to TESTS_APART.
TEST_BIN := $(CURDIR)/bin/test
TESTS_APART := $(addprefix github.com/saltbush/saltbush/,catalog/addons guest/agent guest/podidentity server/access server/sts)
# Lists the packages that have tests (go test -o counts the others too).
LIST_TESTED = $(GO) list -f '{{if or .TestGoFiles .XTestGoFiles}}{{.ImportPath}}{{end}}' ./...
# HISTORY_SCHEDULES is how many randomized schedules tests/faults'
# TestDeliveryHistory runs (seeds 1 to it): the short form here, its
# largest test at about a CPU-second per schedule; .ci/run runs the long
# form, 256.
HISTORY_SCHEDULES ?= 96
# The compatibility suite (tests/compat) keeps the binaries of earlier
# releases it builds from the repository's history in COMPAT_BIN.
COMPAT_BIN := $(CURDIR)/bin/compat
UNIT_ENV := SALTBUSH_AGENT_RACE_BIN=$(AGENT_RACE_BIN) SALTBUSH_BIN=$(SALTBUSH_TEST_BIN) SALTBUSH_KUBE_BIN=$(KUBE_BIN) \
	SALTBUSH_COMPAT_BIN=$(COMPAT_BIN) \
	SALTBUSH_EKSCTL=$(EKSCTL) SALTBUSH_NODE_BIN=$(NODE_BIN) SALTBUSH_HISTORY_SCHEDULES=$(HISTORY_SCHEDULES)
unit: kube eksctl node
	$(GO) build -race $(TEST_LDFLAGS) -o $(AGENT_RACE_BIN) ./cmd/saltbush-agent
	$(GO) build -o $(SALTBUSH_TEST_BIN) ./cmd/saltbush
	status=0; \
	$(UNIT_ENV) $(GOTEST) $(TESTFLAGS) $(TEST_LDFLAGS) -p $(UNIT_P) -o $(TEST_BIN)/apart/ $(TESTS_APART) || status=1; \
	$(UNIT_ENV) $(GOTEST) $(TESTFLAGS) $(TEST_LDFLAGS) -p $(UNIT_P) -o $(TEST_BIN)/main/ \
		$(SLOW_PACKAGES) $$($(LIST_TESTED) | grep -vxF $(addprefix -e ,$(TESTS_APART))) || status=1; \
	cd api && $(GOTEST) $(TESTFLAGS) $(TEST_LDFLAGS) -o $(TEST_BIN)/api/ $$($(LIST_TESTED)) || status=1; \
	exit $$status

.PHONY: compat-all
## compat-all: the compatibility suite's long form (tests/compat and
## tests/load's rolling upgrade, -compat.all): every release in the
## upgrade window, not only the oldest that make test runs
## (docs/contracts.md, "Upgrades").
compat-all: kube
	$(GO) build -race $(TEST_LDFLAGS) -o $(AGENT_RACE_BIN) ./cmd/saltbush-agent
	$(GO) build -o $(SALTBUSH_TEST_BIN) ./cmd/saltbush
	$(UNIT_ENV) $(GOTEST) $(TESTFLAGS) $(TEST_LDFLAGS) -o $(TEST_BIN)/main/ ./tests/compat/ -args -compat.all
	$(UNIT_ENV) $(GOTEST) $(TESTFLAGS) $(TEST_LDFLAGS) -o $(TEST_BIN)/main/ -run TestRollingUpgrade ./tests/load/ -args -compat.all

## fuzz-short: explore briefly every parser that takes outside bytes, one
## target after another (package:target): SigV4 requests, policy documents,
## get-token bearer tokens, add-on configuration values, list continuation
## tokens, STS AssumeRole parameters, every EKS operation of the façade
## (path labels, query strings, bodies) and STS/IAM query-protocol requests
## against a real saltbush, the agent's configuration file, the host
## messages and desired sets (bundles included) the agent receives, and the
## review bodies its webhooks take. `make fuzz FUZZTIME=10m` explores each
## longer by hand, with the two narrower façade body targets besides. The
## fuzzing binaries are kept in bin/test/fuzz/, as unit keeps the tests'.
FUZZTIME         ?= 4s
FUZZMINIMIZETIME ?= 1s
FUZZ_SHORT := ./gateway/sigv4:FuzzVerify ./server/policy:FuzzParse ./server/token:FuzzVerify \
	./server/catalog:FuzzParseConfiguration ./store:FuzzListToken ./server/sts:FuzzParseAssumeRole \
	./tests/conformance:FuzzFacadeOperations ./tests/conformance:FuzzQueryProtocol \
	./guest/config:FuzzConfigFile ./guest/agent:FuzzDesiredSet ./guest/webhook:FuzzReviews \
	./server/oidc:FuzzVerify ./server/oidc:FuzzParseKeySet
FUZZ_ALL := $(FUZZ_SHORT) ./tests/conformance:FuzzCreateClusterBody ./tests/conformance:FuzzAccessEntryBodies
fuzz-short:
	@set -e; for t in $(FUZZ_SHORT); do \
		echo "fuzz $${t#*:} ($${t%%:*}) for $(FUZZTIME)"; \
		$(GOTEST) $(TEST_LDFLAGS) -o $(TEST_BIN)/fuzz/$${t%%:*}/ -run '^$$' -fuzz "^$${t#*:}\$$" -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMINIMIZETIME) $${t%%:*}/; \
	done

fuzz:
	$(MAKE) fuzz-short FUZZ_SHORT="$(FUZZ_ALL)" FUZZTIME=$(FUZZTIME) FUZZMINIMIZETIME=10s

## bench: every benchmark family of tests/bench, each at the op count its
## section of tests/bench/README.md gives (a create costs microseconds, an
## agent failover seconds, so one -benchtime cannot fit them all), each
## printing its table (`make bench | tee bench.out` keeps them). About 28
## minutes on 2 cores, 17 of them the real node's (it needs root; without,
## those two benchmarks skip, saying why); `make bench BENCHCOUNT=3`
## repeats each for benchstat.
BENCHCOUNT ?= 1
BENCH = SALTBUSH_KUBE_BIN=$(KUBE_BIN) SALTBUSH_NODE_BIN=$(NODE_BIN) $(GOTEST) -run '^$$' -count $(BENCHCOUNT) -timeout 60m ./tests/bench/ -bench
bench: kube node
	$(BENCH) '^BenchmarkCreate$$|DescribeClusterAuth' -benchtime 5000x && \
	$(BENCH) '^BenchmarkAddon' -benchtime 2000x && \
	$(BENCH) AccessReview -benchtime 3000x && \
	$(BENCH) DeliveryConvergence -benchtime 1000x && \
	$(BENCH) DeliveryReportIngestion -benchtime 5000x && \
	$(BENCH) DeliveryStreams -benchtime 3x && \
	$(BENCH) 'AgentToActive|AgentIdle' -benchtime 30x && \
	$(BENCH) AgentStartupRSS -benchtime 5x && \
	$(BENCH) AgentFailover -benchtime 3x && \
	$(BENCH) AccessWebhooks -benchtime 500x && \
	$(BENCH) PodCredentials -benchtime 1000x && \
	$(BENCH) ServerProcess -benchtime 2000x && \
	$(BENCH) NodeStart -benchtime 3x && \
	$(BENCH) NodeAddons -benchtime 20x
