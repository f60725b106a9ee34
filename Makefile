# termgate: the two commands.
#   make run    runs the gateway on its embedded default (dev mode: prints a URL with a token)
#   make test   runs every check and test, as CI does
#
# Both install what is missing when run as root on Debian, and build with the
# patched toolchain while go.mod stays at go 1.26.

export GOTOOLCHAIN := go1.27.3
GO ?= go
STATICCHECK := $(GO) run -modfile=.ci/tools/go.mod honnef.co/go/tools/cmd/staticcheck

# The binary is linked statically when the C compiler has a static libc
# (Debian's libc6-dev, which gcc brings): every sandbox's init is an exec of
# this binary, and a static one skips the dynamic loader, 0.1-0.15 ms of each
# start. netgo and osusergo keep the C library's name services, which a static
# binary cannot load, out of it. Without one, the binary is dynamic.
ifneq ($(filter /%,$(shell $(shell $(GO) env CC) -print-file-name=libc.a 2>/dev/null)),)
BUILDFLAGS := -tags netgo,osusergo -ldflags '-linkmode=external -extldflags=-static'
endif

.PHONY: run test deps test-deps web build check cross unit bench bench-agents

run: deps web
	$(GO) run $(BUILDFLAGS) ./cmd/termgate serve --dev

test: test-deps web check cross unit

build:
	$(GO) build $(BUILDFLAGS) -o bin/termgate ./cmd/termgate

# deps installs the system packages termgate needs, or says what to install.
deps:
	@.ci/deps

test-deps:
	@.ci/deps test

# web builds the browser terminal into web/dist, which the binary embeds,
# from the exact versions in web/package-lock.json.
web:
	cd web && npm ci --no-audit --no-fund --loglevel=error && npm run build && npm test

check:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	  if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(STATICCHECK) ./...
	$(GO) build $(BUILDFLAGS) -o /dev/null ./cmd/termgate # as make build links it

# cross builds the client side for the systems users attach from: the
# command line (whose sandbox commands say there that they need Linux) and
# the Go client package; vet type-checks their tests there too.
CROSS := darwin/amd64 darwin/arm64 windows/amd64
cross:
	@for t in $(CROSS); do \
	  echo "build and vet $$t"; \
	  GOOS=$${t%/*} GOARCH=$${t#*/} $(GO) build -o /dev/null ./cmd/termgate ./gateway/client || exit 1; \
	  GOOS=$${t%/*} GOARCH=$${t#*/} $(GO) vet ./cmd/termgate ./gateway/client || exit 1; \
	done

unit:
	$(GO) test -race -count=1 -timeout 15m ./...

# bench links the test binaries as make build links termgate: the sandbox's
# benchmarks run the test binary as the init.
bench:
	$(GO) test $(BUILDFLAGS) -run '^$$' -bench . -benchmem -count 3 ./...

# bench-agents is issue 47's table in one command (docs/performance.md,
# "Agent workloads"): short commands against the bare plan, the CLI's
# start, a retained execution's memory, and the doors' own benchmarks.
bench-agents:
	$(GO) test $(BUILDFLAGS) -run '^$$' -bench 'AgentExec' -benchtime 1000x ./gateway
	$(GO) test $(BUILDFLAGS) -run '^$$' -bench 'CLIStart' -benchtime 60x -count 2 ./cmd/termgate
	$(GO) test $(BUILDFLAGS) -run '^$$' -bench 'RetainedExecutions|Forward|Files' -benchtime 1x ./gateway
	$(GO) test $(BUILDFLAGS) -run '^$$' -bench 'Clients' -benchtime 1x ./cmd/termgate
	$(GO) test $(BUILDFLAGS) -run '^$$' -bench . -benchtime 1x ./sandbox/netpolicy/...
