# kpsim: scale-test the production kube-proxy proxiers.
#
#   sudo make scale-test   the 2000 Services x 10 endpoints mode comparison
#   make test              unit tests; as root also the privileged tests
#
# Everything a fresh Debian machine lacks (Debian packages, Go modules) is
# installed by `make deps`, which `test` and `scale-test` call when root.

SHELL := /bin/bash
GO ?= go
BIN := bin/kpsim
# The program timer kube-proxy runs nft through (cmd/kpsim-exectimer): C,
# linked statically, beside kpsim, where the node looks for it.
EXECTIMER := bin/kpsim-exectimer
CC ?= cc
# The kube-proxy release under test; `make pin` rewrites go.mod for it.
# `make variant KUBE_VERSION=...` builds bin/kpsim-<release> beside it instead.
KUBE_VERSION ?= v1.37.1
# Debian packages the privileged tests and runs need.
# qemu-system-x86 and busybox-static run nodes in a VM (IPVS: the host kernel
# may lack it); the VM boots a Debian kernel package fetched with apt-get
# download, never installed.
# chromium renders report.html in the HTML test (skipped without it).
# libc6-dev links the program timer statically.
DEB_PACKAGES := iptables nftables ipset conntrack iproute2 qemu-system-x86 busybox-static chromium libc6-dev
FUZZTIME ?= 2m
RUN_FLAGS ?=

IS_ROOT := $(shell [ "$$(id -u)" = 0 ] && echo yes)

.PHONY: all build test test-unit test-privileged test-faults test-under-load scale-test smoke soak report readme-excerpt clean deps go-deps lint fuzz pin variant test-variants

all: build

build: go-deps $(EXECTIMER)
	$(GO) build -o $(BIN) ./cmd/kpsim

$(EXECTIMER): cmd/kpsim-exectimer/exectimer.c
	@mkdir -p $(@D)
	$(CC) -O2 -Wall -Wextra -static -o $@ $<

# make test: the whole suite. Privileged tests (files *_privileged_test.go,
# tests named TestPrivileged*) skip with a reason unless run as root.
test: deps $(EXECTIMER)
	$(GO) vet ./...
	$(GO) test -count=1 -timeout 25m ./...
	$(GO) build -o $(BIN) ./cmd/kpsim
	./$(BIN) validate scenarios/*.yaml scenarios/ci/*.yaml
	@if [ "$(IS_ROOT)" = yes ]; then \
		for f in scenarios/ci/*.yaml; do \
			echo "kpsim run $$f (real kernel; modes the host kernel lacks run in a VM)"; \
			./$(BIN) run $$f --out results/test-$$(basename $$f .yaml) || exit $$?; \
		done; \
	else \
		echo "skipping kpsim run scenarios/ci/*.yaml: needs root to create network namespaces"; \
	fi

test-unit: go-deps
	$(GO) test -count=1 -short ./...

test-privileged: deps
	@[ "$(IS_ROOT)" = yes ] || { echo "test-privileged needs root: sudo make test-privileged"; exit 3; }
	$(GO) test -count=1 -timeout 25m -run Privileged -v ./...

# test-faults: only the fault tests, verbose (root): node processes killed
# at fixed phases, kpsim run's orchestrator or node killed with SIGKILL or
# SIGINT at random times, and kube-proxy killed in the middle of 20 syncs
# (10 runs, iptables-legacy and nftables), each of which must end with the
# oracle's dataplane. Each random test logs its seed with the command that
# replays it.
test-faults: deps
	@[ "$(IS_ROOT)" = yes ] || { echo "test-faults needs root: sudo make test-faults"; exit 3; }
	$(GO) test -count=1 -timeout 10m -run '^TestPrivilegedKill' -v ./netns
	$(GO) test -count=1 -timeout 40m -run '^TestPrivilegedKill' -v ./cmd/kpsim -args -kill-sync-runs 10

# test-under-load: scenarios/policies.yaml with iptables and nftables RUNS
# times in a row (default 20) while a busy loop keeps one core busy, the
# load under which kube-proxy's first sync can come before it has the
# node's topology labels. Every run must pass (root).
RUNS ?= 20
test-under-load: deps build
	@[ "$(IS_ROOT)" = yes ] || { echo "test-under-load needs root: sudo make test-under-load"; exit 3; }
	@mkdir -p results; bash -c 'while :; do :; done' & hog=$$!; trap "kill $$hog" EXIT; \
	failed=0; for i in $$(seq 1 $(RUNS)); do \
		if ./$(BIN) run scenarios/policies.yaml --modes iptables,nftables --out results/under-load-$$i > results/under-load-$$i.log 2>&1; \
		then echo "run $$i of $(RUNS): passed"; \
		else echo "run $$i of $(RUNS): FAILED (results/under-load-$$i.log)"; failed=$$((failed + 1)); fi; \
	done; \
	echo "$$(( $(RUNS) - failed )) passed, $$failed failed"; [ $$failed = 0 ]

scale-test: deps build
	./$(BIN) run scenarios/2000x10.yaml $(RUN_FLAGS)

smoke: deps build
	./$(BIN) run scenarios/smoke.yaml $(RUN_FLAGS)

# soak: 10,000 mutations a minute for 10 minutes per host mode (about 25
# minutes in all); not part of test.
soak: deps build
	./$(BIN) run scenarios/soak.yaml $(RUN_FLAGS)

report: build
	./$(BIN) report results/*/

# readme-excerpt puts the run facts and the Syncs and traffic tables of
# RUN's report.md into README.md, between its scale-test excerpt markers:
# the README shows a generated excerpt, never typed figures.
#   make readme-excerpt RUN=results/<run-id>
readme-excerpt:
	@[ -f "$(RUN)/report.md" ] || { echo "usage: make readme-excerpt RUN=results/<run-id> (a directory with report.md)"; exit 2; }
	@awk 'FNR == NR { \
		if ($$0 ~ /^## /) keep = ($$0 ~ /^## (Syncs|Network programming)/); \
		if ($$0 ~ /^- \*\*(run|scenario|kernel|cpus|kube-proxy|started|shared machine)\*\*/) ex = ex $$0 "\n"; \
		else if (keep) { if (sub(/^## /, "#### ")) ex = ex "\n"; ex = ex $$0 "\n" } \
		next } \
	/<!-- scale-test excerpt: begin/ { print; printf "\n%s\n", ex; skip = 1; next } \
	/<!-- scale-test excerpt: end/ { skip = 0 } \
	!skip { print }' "$(RUN)/report.md" README.md > README.md.new && mv README.md.new README.md
	@echo "README.md: excerpt of $(RUN)/report.md"

# deps installs missing Debian packages when run as root (idempotent: it
# asks dpkg first and installs only what is missing), and Go modules.
deps: go-deps
	@missing=""; for p in $(DEB_PACKAGES); do \
		dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q "ok installed" || missing="$$missing $$p"; \
	done; \
	if [ -z "$$missing" ]; then exit 0; fi; \
	if [ "$(IS_ROOT)" = yes ]; then \
		echo "installing Debian packages:$$missing"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing; \
	else \
		echo "note: missing Debian packages:$$missing (privileged tests will skip; sudo make deps installs them)"; \
	fi

go-deps:
	$(GO) mod download

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); [ -z "$$out" ] || { echo "gofmt needed:"; echo "$$out"; exit 1; }
	$(GO) vet ./...

# fuzz runs every fuzz target for FUZZTIME each.
fuzz: go-deps
	@set -e; for pkg in $$($(GO) list ./...); do \
		for t in $$($(GO) test -list '^Fuzz' $$pkg | grep '^Fuzz' || true); do \
			echo "fuzzing $$pkg $$t for $(FUZZTIME)"; \
			$(GO) test $$pkg -run '^$$' -fuzz "^$$t$$" -fuzztime $(FUZZTIME); \
		done; \
	done

# pin points kpsim at another kube-proxy release: KUBE_VERSION=v1.38.0 make pin.
# k8s.io/kubernetes requires its staging modules at v0.0.0; each is
# replaced by the published v0.X.Y of the same release.
pin:
	@set -e; staging=v0.$${KUBE_VERSION#v1.}; \
	$(GO) mod edit -require=k8s.io/kubernetes@$(KUBE_VERSION); \
	modfile=$$($(GO) mod download -json k8s.io/kubernetes@$(KUBE_VERSION) | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p'); \
	for m in $$(grep -E '^\s+k8s.io/\S+ v0\.0\.0$$' $$modfile | awk '{print $$1}'); do \
		$(GO) mod edit -replace=$$m=$$m@$$staging; \
	done; \
	$(GO) mod tidy; \
	echo "pinned k8s.io/kubernetes $(KUBE_VERSION), staging modules $$staging"

# variant builds kpsim against another kube-proxy into bin/kpsim-<name>,
# leaving go.mod, go.sum and bin/kpsim as they are (cmd/kpsim-variant):
#   make variant KUBE_VERSION=v1.36.3        a release: bin/kpsim-v1.36.3
#   make variant KUBE_SRC=../kubernetes      a checkout: bin/kpsim-<dir>-<commit>[-dirty]
# VARIANT=name names it. Its module file is build/variants/<name>/go.mod.
# Each is a cold build of the proxiers (about 5 minutes): one at a time.
variant: go-deps $(EXECTIMER)
	@[ -n "$(KUBE_SRC)" ] || [ "$(origin KUBE_VERSION)" != file ] || { echo "usage: make variant KUBE_VERSION=v1.36.3 | KUBE_SRC=../kubernetes [VARIANT=name]"; exit 2; }
	$(GO) run ./cmd/kpsim-variant $(if $(KUBE_SRC),-kube-src=$(KUBE_SRC),-kube-version=$(KUBE_VERSION)) $(if $(VARIANT),-name=$(VARIANT))

# test-variants builds the releases kpsim's adapters must build against,
# one after the other (about 10 minutes cold), and asks each its version;
# not part of test.
VARIANT_RELEASES ?= v1.36.3 v1.37.1 v1.37.2
test-variants: $(EXECTIMER)
	@set -e; for v in $(VARIANT_RELEASES); do \
		$(MAKE) --no-print-directory variant KUBE_VERSION=$$v VARIANT=; \
		got=$$(./bin/kpsim-$$v version); echo "bin/kpsim-$$v version: $$got"; \
		[ "$$got" = "kube-proxy (k8s.io/kubernetes) $$v (variant $$v)" ] || { echo "bin/kpsim-$$v: wrong version"; exit 1; }; \
	done; echo "variants built: $(VARIANT_RELEASES)"

clean:
	rm -rf bin build
	@echo "results/ kept; remove it by hand if you want"
