# The two commands a newcomer runs are `make demo` and `make test`.
GO      ?= go
BIN     := bin/stamp
DEMO    := out/demo
# A count, not a duration: go1.26's fuzz coordinator can report a spurious
# "context deadline exceeded" when a -fuzztime duration ends (go.dev/issue/75804).
# A smoke run in CI, whose `make test` must stay under 40 minutes on 2 cores:
# the slowest targets (FuzzExtract, FuzzReadOCI) run some 500 inputs a second.
FUZZTIME ?= 30000x
# FuzzScript interprets each input against a fresh tree (some 50 a second
# on 2 cores), so it gets fewer.
SCRIPT_FUZZTIME ?= 3000x
# Each input that finds new coverage is minimized, by default for up to 60 s;
# with an empty fuzz cache (a fresh machine) nearly every early input does,
# and FuzzExtract made 23 runs in four and a half minutes. A count bounds it.
FUZZMINIMIZE ?= 100x

.PHONY: all build deps demo test unit fuzz bench lint clean k8s-inputs e2e-node e2e-cluster e2e-boot

all: build

build:
	$(GO) build -trimpath -o $(BIN) ./cmd/stamp

# Debian packages the demo and the tests use (idempotent; needs root the
# first time on a fresh machine).
deps:
	@sh test/scripts/deps.sh

# Builds a small base from real Debian packages, then the example recipe.
demo: deps build
	$(GO) run ./test/cmd/mkbase -o recipes/examples/base.tar.zst
	$(BIN) build recipes/examples/demo.yaml -o $(DEMO)
	@echo; echo "outputs in $(DEMO):"; ls -l $(DEMO)
	@echo; cd $(DEMO) && sha256sum --quiet -c SHA256SUMS && echo "SHA256SUMS: every output checks"
	@echo; $(BIN) inspect $(DEMO)/demo.raw | head -12

test: deps lint unit fuzz

# deploy/ is a module of its own, so that only its test needs Kubernetes'
# API types. The tests of what runs at once (a pipeline's stages) run again
# under the race detector.
unit:
	$(GO) test -count=1 -timeout 45m ./...
	$(GO) test -race -count=1 -run '^TestPipelineStagesKeepTheirDirectories$$' ./packages/scripts
	cd deploy && $(GO) test -count=1 ./...

# Every fuzz target runs briefly so a regression in a decoder shows in CI.
fuzz:
	$(GO) test -run '^$$' -fuzz '^FuzzParse$$' -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMINIMIZE) ./recipes
	$(GO) test -run '^$$' -fuzz '^FuzzReadTar$$' -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMINIMIZE) ./formats
	$(GO) test -run '^$$' -fuzz '^FuzzExtract$$' -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMINIMIZE) ./rootfs
	$(GO) test -run '^$$' -fuzz '^FuzzReadOCI$$' -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMINIMIZE) ./formats
	$(GO) test -run '^$$' -fuzz '^FuzzOpen$$' -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMINIMIZE) ./disk/fat
	$(GO) test -run '^$$' -fuzz '^FuzzOpen$$' -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMINIMIZE) ./disk/qcow2
	$(GO) test -run '^$$' -fuzz '^FuzzOpen$$' -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMINIMIZE) ./disk/vmdk
	$(GO) test -run '^$$' -fuzz '^FuzzRead$$' -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMINIMIZE) ./disk/erofs
	$(GO) test -run '^$$' -fuzz '^FuzzOpen$$' -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMINIMIZE) ./disk/iso9660
	$(GO) test -run '^$$' -fuzz '^FuzzScript$$' -fuzztime $(SCRIPT_FUZZTIME) -fuzzminimizetime $(FUZZMINIMIZE) ./packages/scripts
	$(GO) test -run '^$$' -fuzz '^FuzzModule$$' -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMINIMIZE) ./packages/kmod

# Kubernetes test inputs built from the Go module proxy, packaged and made into
# images by stamp; cached per machine (the first run compiles Kubernetes).
k8s-inputs: build
	$(GO) run ./test/cmd/k8sinputs -stamp $(BIN)
	$(GO) test -tags k8s -count=1 -timeout 30m -run '^TestK8sInputs$$' ./test/harness

# The default node recipe built as uid 65534 against local repositories and
# a local registry, checked on the image, verified (a root build, compared),
# and booted under qemu with a NoCloud seed that checks it from inside; and
# images written into containerd's state handed to upstream containerd (the
# version image-builder pins, built from the module proxy once per machine).
# Leaves the outputs in out/e2e-node/ for the cluster test. Also the node's
# whole package set through the debs layer against apt-get and dpkg in a
# chroot (TestDebsNodePackages, about 5 minutes: too long for make test).
e2e-node: deps k8s-inputs
	STAMP_E2E_NODE_OUT=$(CURDIR)/out/e2e-node $(GO) test -tags node -count=1 -timeout 90m -v -run '^(TestNodeImage|TestImagesInto(Upstream|Tree)Containerd|TestDebsNodePackages)$$' ./test/e2e

# Boots out/e2e-node's raw image as Cluster API boots its first control-plane
# machine (a kubeadm init seed) and waits, under TCG, for a Ready one-node
# cluster; then boots two machines, the second joining as a worker; then the
# node's live output with no disk, through iPXE, running from RAM; then
# builds the node with disk=sealed and boots it under Secure Boot with its
# own keys, a verified /usr and a software TPM. Makes out/e2e-node first
# when it is missing; after changing the node recipe, run make e2e-node again.
e2e-cluster: deps k8s-inputs
	@test -f out/e2e-node/k8s-node.raw || $(MAKE) e2e-node
	STAMP_E2E_CLUSTER_OUT=$(CURDIR)/out/e2e-cluster $(GO) test -tags node -count=1 -timeout 120m -v -run '^TestCluster(Join|Diskless|Sealed)?$$' ./test/e2e

# The qemu boots make test leaves out: Debian's kernel mounting EROFS images
# and listing every entry, the live bundle's initramfs fetching its image
# from stamp.root=URL, the iso as a USB stick under OVMF and a disk under
# SeaBIOS, and an arm64 system bootstrapped from arm64 .debs booted under
# AAVMF. make test boots the live bundle through iPXE, has a damaged image
# refused and boots the iso as a CD under OVMF and SeaBIOS (TestLiveBoot),
# and boots the arm64 disk (TestARM64Boots).
e2e-boot: deps
	$(GO) test -tags boot -count=1 -timeout 60m -v -run '^(TestErofsKernelMount|TestLiveBootVariants|TestARM64BaseDebsBoots)$$' ./test/e2e

bench: deps build
	bash test/scripts/bench.sh $(BENCH)

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	cd deploy && $(GO) vet ./...
	@GO=$(GO) sh test/scripts/tools.sh
	.tools/staticcheck ./...
	cd deploy && ../.tools/staticcheck ./...

clean:
	rm -rf bin out
