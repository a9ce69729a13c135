# One entry point for setup, the simulated cluster, tests, lint and benchmarks.
# Every target sets up what it needs and skips work that is already done.
SHELL := /bin/bash
.DEFAULT_GOAL := help

VENV        := .venv
PY          := $(VENV)/bin/python
BIN         := $(abspath $(VENV)/bin)
COLLECTIONS := $(abspath .cache/collections)
# A venv's site-packages as its own interpreter names it (the path carries the Python version), for recipes: a
# shell command substitution, so it also works for a venv that an earlier recipe of the same run created.
site_packages = $$($(abspath $(1))/bin/python -c 'import sysconfig; print(sysconfig.get_path("purelib"))')
# The same for the environment of every recipe, computed once; empty while .venv does not exist yet (ansible-core
# also searches its own interpreter's sys.path for collections, so a first run finds kubernetes.core all the same).
VENV_SITE   := $(shell $(PY) -c 'import sysconfig; print(sysconfig.get_path("purelib"))' 2>/dev/null)
export ANSIBLE_COLLECTIONS_PATH := $(COLLECTIONS):$(VENV_SITE)
# kubectl of the simulated control plane's version (make binaries links it here): the tests and benchmarks run it.
KUBECTL_BIN := $(abspath .cache/bin)
export PATH := $(BIN):$(KUBECTL_BIN):$(PATH)
# The interpreter each venv is created with (a venv keeps it; delete the venv to change it). By default the first
# of the versions that runs (tools/find-python.sh); PYTHON=/path/to/python and the like choose another.
# .venv: ansible-core 2.19 runs on 3.11 to 3.13; 3.11 first, as the tools image (python:3.11-slim-bookworm).
PYTHON         ?= $$(tools/find-python.sh 3.11 3.12 3.13)
# ansible-core 2.16 runs on 3.10 to 3.12, 2.21 on 3.12 to 3.14: each end of the matrix on the Python it is tested on.
PYTHON_LOWEST  ?= $$(tools/find-python.sh 3.11)
PYTHON_HIGHEST ?= $$(tools/find-python.sh 3.13 3.12)
# The commit bench-store measures the store against: the last one before it.
BENCH_STORE_BEFORE ?= a48e988
# skopeo, umoci, mmdebstrap, gcc: the tools and pause images (tools/images); the CNI plugins, iptables and
# nftables: the simulated cluster's real nodes (tools/sim-cluster/real_nodes.py); libseccomp-dev and pkg-config:
# building their runc (tools/containerd/build.sh builds containerd 2.x and runc from the Go module proxy).
DEBIAN_PACKAGES := docker-registry skopeo umoci mmdebstrap gcc libc6-dev containernetworking-plugins \
                   iptables nftables libseccomp-dev pkg-config
# Where `make images` pushes the tools and pause images (host:port).
REGISTRY    ?=
SIM         := $(PY) tools/sim-cluster/sim.py
PYTEST      := $(PY) -m pytest
# The version matrix: the lowest declared ansible-core and kubernetes client (requirements/lowest.txt) and the
# newest releases (requirements/highest.txt); .venv holds the pins everything else runs on (requirements/dev.txt).
VENV_LOWEST  := .venv-lowest
VENV_HIGHEST := .venv-highest
# The environment a matrix venv's tests run in: its commands first on PATH, its collections searched.
matrix_env = PATH=$(abspath $(1))/bin:$$PATH ANSIBLE_COLLECTIONS_PATH=$(COLLECTIONS):$(call site_packages,$(1))
# With JUNIT_DIR set (the lanes of `make test` set it), a pytest target writes its JUnit report there, named after
# the target and an optional part: $(call junit,-unit) in test-lowest -> $(JUNIT_DIR)/test-lowest-unit.xml.
junit = $(if $(JUNIT_DIR),--junitxml=$(JUNIT_DIR)/$@$(1).xml)

.PHONY: help setup sim-setup venv debian-packages binaries containerd cli-tools collection-link sim-up sim-down sim-status demo \
        kyverno venv-triton venv-triton-previous test pytest test-lowest test-highest lint ruff ansible-lint changelog-lint sanity venv-lowest venv-highest unit integration molecule build \
        bench-extract bench-distribute bench-scale bench-controller bench-store bench-webhook bench-steering bench-deploy bench-real-nodes bench-operator bench-modes bench-warm-start images image-tools image-controller image-pause image-workload

help: ## List the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-18s %s\n", $$1, $$2}'

setup: sim-setup cli-tools kyverno ## Everything the tests and benchmarks need

# The oras and cosign CLIs take about ten minutes to build and only tests and benchmarks use them: the demo and
# the simulated cluster stop here.
sim-setup: venv debian-packages binaries containerd collection-link venv-triton ## What the simulated cluster and the demo need

venv: $(VENV)/.installed ## Python virtualenv with the pinned requirements
$(VENV)/.installed: requirements/runtime.txt requirements/dev.txt requirements/constraints.txt
	test -x $(PY) || { python=$(PYTHON) && "$$python" -m venv $(VENV); }
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -r requirements/dev.txt -c requirements/constraints.txt
	touch $@

# A matrix venv: $(1) its directory, $(2) the interpreter (a shell word), $(3) its requirements file.
# Galaxy is unreachable and the `ansible` package would pull in its own ansible-core: link .venv's
# kubernetes.core (the modules' client set-up) and ansible.posix (the tests' json stdout callback), so
# Python imports and ansible-core's collection search both find them there.
define matrix_venv
	test -x $(1)/bin/python || { python=$(2) && "$$python" -m venv $(1); }
	$(1)/bin/python -m pip install -q --upgrade pip
	$(1)/bin/python -m pip install -q -r $(3)
	site=$(call site_packages,$(1)) && from=$(call site_packages,$(VENV)) && \
	for c in kubernetes/core ansible/posix; do mkdir -p $$site/ansible_collections/$${c%/*} && \
	  ln -sfn $$from/ansible_collections/$$c $$site/ansible_collections/$$c; done
	touch $(1)/.installed
endef

# The unit tests, the `matrix` integration subset and sanity, in matrix venv $(1).
define matrix_tests
	$(call matrix_env,$(1)) $(1)/bin/python -m pytest tests/unit -q $(call junit,-unit)
	$(call matrix_env,$(1)) $(1)/bin/python -m pytest tests/integration -q -m matrix $(call junit,-matrix)
	SANITY_VENV=$(1) tools/ci/sanity.sh
endef

venv-lowest: venv $(VENV_LOWEST)/.installed ## Virtualenv with the lowest declared ansible-core and kubernetes client
$(VENV_LOWEST)/.installed: requirements/lowest.txt
	$(call matrix_venv,$(VENV_LOWEST),$(PYTHON_LOWEST),requirements/lowest.txt)

venv-highest: venv $(VENV_HIGHEST)/.installed ## Virtualenv with the newest ansible-core and kubernetes client releases
$(VENV_HIGHEST)/.installed: requirements/highest.txt
	$(call matrix_venv,$(VENV_HIGHEST),$(PYTHON_HIGHEST),requirements/highest.txt)

# Triton (requirements/triton.txt) in a venv of its own, shared by every checkout of the machine: tools/triton-venv.sh
# builds it under ~/.cache/gkm-cluster (keyed by the pin, the script and the interpreter) and .venv-triton links it.
# The compiled kernel caches (tools/triton_kernels/store.py) run its python; GKM_TRITON_PY names another one.
venv-triton: ## Build or reuse the pinned Triton venv (real kernel caches; about 1 GB, cached under ~/.cache/gkm-cluster)
	@ln -sfn "$$(PYTHON=$(PYTHON) tools/triton-venv.sh)" .venv-triton

# The release before the pin (requirements/triton-previous.txt), the same way: the caches another Triton compiled.
venv-triton-previous: ## Build or reuse the previous Triton release's venv (the version-mismatch test's cache)
	@ln -sfn "$$(PYTHON=$(PYTHON) tools/triton-venv.sh requirements/triton-previous.txt)" .venv-triton-previous

debian-packages: ## Install missing Debian packages (root only; otherwise says what to install)
	@missing=$$(for p in $(DEBIAN_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || echo $$p; done); \
	if [ -z "$$missing" ]; then exit 0; fi; \
	if [ "$$(id -u)" = 0 ]; then \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -q $$missing >/dev/null || \
	  { apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q $$missing >/dev/null; }; \
	else echo "missing Debian packages: $$missing (install them as root)"; exit 1; fi

binaries: ## Build or reuse etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubelet, kubectl and kwok
	@bin=$$(tools/sim-cluster/build.sh) && mkdir -p $(KUBECTL_BIN) && ln -sfn $$bin/kubectl $(KUBECTL_BIN)/kubectl

containerd: debian-packages ## Build or reuse the real nodes' containerd 2.x, its shim, ctr and runc (tools/containerd)
	@tools/containerd/build.sh >/dev/null

cli-tools: ## Build or reuse the oras and cosign CLIs (benchmarks, signature tests)
	@tools/bench-tools.sh

# Kyverno's build script hashes itself into its cache key, so it leaves the Go check (its tools/kyverno/go.mod is
# what it reads) to this target: a check inside would rebuild the cache once for nothing.
# Only the tests use Kyverno (sim.py kyverno-up starts it), so the demo's sim-setup does not build it.
kyverno: ## Build or reuse Kyverno's admission controller and CRDs (tools/kyverno, cached under ~/.cache/gkm-cluster)
	@tools/check-go.sh && tools/kyverno/build.sh >/dev/null

collection-link: ## Make the checkout importable as ansible_collections.gkm.cluster
	@mkdir -p $(COLLECTIONS)/ansible_collections/gkm
	@ln -sfn ../../../.. $(COLLECTIONS)/ansible_collections/gkm/cluster

sim-up: sim-setup ## Start the simulated GPU cluster and registry (idempotent; GKM_SIM_REAL_NODES=2 adds real nodes, as root)
	$(SIM) up

sim-down: venv ## Stop the simulated cluster and registry and remove their state
	$(SIM) down

sim-status: venv ## Show the simulated cluster's processes, ports and nodes
	$(SIM) status

# The demo's cluster has two real nodes (one AMD, one NVIDIA) beside the kwok ones.
demo: export GKM_SIM_REAL_NODES ?= 2
demo: sim-up ## Simulated GPU cluster with real nodes, sample caches, deploy.yml, the cache table, a pod reading a kernel, a cold and a warm start
	$(SIM) nodes
	$(SIM) tools-image
	$(SIM) workload-image
	$(PY) tools/sample_caches.py
	$(VENV)/bin/ansible-playbook -i inventories/sim playbooks/deploy.yml
	$(PY) tools/demo_read_kernel.py
	$(PY) tools/demo_warm_start.py

# Lanes side by side, each on a cluster of its own (tools/ci/lanes.py, tools/ci/lanes.yml); builds only what a lane
# needs, before that lane starts. Logs and the summary go to .cache/lanes/<time>/.
test: venv collection-link debian-packages ## Run every test in lanes (static: lint, sanity, unit, the lowest versions; integration; molecule)
	$(PY) tools/ci/lanes.py $(LANES_ARGS)

pytest: setup ## Unit and integration tests in one run (starts and stops the simulated cluster if needed)
	$(PYTEST) tests

# The `matrix` subset needs the simulated cluster's binaries only (the lanes of `make test` run it without real nodes).
test-lowest: venv-lowest collection-link binaries ## On the lowest ansible-core and kubernetes client: unit tests, the `matrix` integration subset, sanity
	$(call matrix_tests,$(VENV_LOWEST))

test-highest: venv-highest collection-link binaries ## The same on the newest ansible-core and kubernetes client releases
	$(call matrix_tests,$(VENV_HIGHEST))

lint: ruff ansible-lint changelog-lint ## ruff, ansible-lint (production profile), antsibull-changelog lint

ruff: venv
	$(VENV)/bin/ruff check .

ansible-lint: venv collection-link
	@if compgen -G "roles/*/tasks" >/dev/null || compgen -G "playbooks/*.yml" >/dev/null; then \
	  $(VENV)/bin/ansible-lint --profile production --offline; else echo "ansible-lint: no roles or playbooks yet"; fi

changelog-lint: venv ## Changelog fragments and changelogs/changelog.yaml
	$(VENV)/bin/antsibull-changelog lint
	$(VENV)/bin/antsibull-changelog lint-changelog-yaml changelogs/changelog.yaml

sanity: venv ## ansible-test sanity, no ignore entries (a copy of the collection under ~/.cache)
	tools/ci/sanity.sh

unit: venv collection-link
	$(PYTEST) tests/unit -q $(call junit)

integration: setup
	$(PYTEST) tests/integration -q

molecule: setup ## The molecule scenarios (tools/ci/molecule.sh starts and stops the simulated cluster it needs)
	tools/ci/molecule.sh

build: venv ## Build the collection tarball into .cache/dist
	$(VENV)/bin/ansible-galaxy collection build --force --output-path .cache/dist

images: venv debian-packages ## Build the tools, controller and pause images, push them to REGISTRY=host:port, print the references
	@test -n "$(REGISTRY)" || { echo "usage: make images REGISTRY=host:port" >&2; exit 1; }
	@tools/images/build.sh tools --push $(REGISTRY)
	@tools/images/build.sh controller --push $(REGISTRY)
	@tools/images/build.sh pause --push $(REGISTRY)

image-tools: venv debian-packages ## Build the tools image (and push it when REGISTRY=host:port is given)
	@tools/images/build.sh tools $(if $(REGISTRY),--push $(REGISTRY))

image-controller: venv debian-packages ## Build the controller image (and push it when REGISTRY=host:port is given)
	@tools/images/build.sh controller $(if $(REGISTRY),--push $(REGISTRY))

image-pause: debian-packages ## Build the pause image (and push it when REGISTRY=host:port is given)
	@tools/images/build.sh pause $(if $(REGISTRY),--push $(REGISTRY))

image-workload: venv debian-packages ## Build the workload image of the tests (Triton and its warm-up; pushed when REGISTRY=host:port is given)
	@tools/images/build.sh workload $(if $(REGISTRY),--push $(REGISTRY))

bench-extract: setup sim-up ## Extraction benchmark -> bench/results/extract.json
	$(PY) bench/extract.py

bench-distribute: setup sim-up ## Distribution benchmark -> bench/results/distribute.json
	$(PY) bench/distribute.py

bench-scale: setup ## Scale: one ClusterGKMCache x 3 namespaces at 500/2,000/5,000 kwok GPU nodes -> bench/results/scale.json, scale.png
	GKM_SIM_REAL_NODES=0 GKM_SIM_JOB_CONTROLLER=0 GKM_SIM_HEARTBEAT_SECONDS=300 $(SIM) up
	$(PY) bench/scale.py $(BENCH_SCALE_ARGS)

bench-controller: setup ## The kopf controller beside the playbook path: one ClusterGKMCache x 3 namespaces at 500/2,000/5,000 kwok GPU nodes -> bench/results/controller.json
	GKM_SIM_REAL_NODES=0 GKM_SIM_JOB_CONTROLLER=0 GKM_SIM_AUDIT_READS=1 GKM_SIM_HEARTBEAT_SECONDS=300 $(SIM) up
	$(PY) bench/controller.py $(BENCH_CONTROLLER_ARGS)

bench-store: setup sim-up ## The node's store: extraction Jobs and writes per node and namespace, before it (BENCH_STORE_BEFORE) and after -> bench/results/store.json
	rm -rf .cache/bench-before && mkdir -p .cache/bench-before/ansible_collections/gkm/cluster
	git archive $(BENCH_STORE_BEFORE) | tar -x -C .cache/bench-before/ansible_collections/gkm/cluster
	$(PY) bench/store.py --before .cache/bench-before --before-label $(BENCH_STORE_BEFORE) $(BENCH_STORE_ARGS)

bench-webhook: setup sim-up ## Webhook benchmark -> bench/results/webhook.json
	$(PY) bench/webhook.py

bench-steering: setup sim-up ## Steering webhook benchmark -> bench/results/steering.json
	$(PY) bench/steering.py

bench-modes: setup sim-up ## Mode matrix: objects per node and writes of per-node PVC, serving PVC, imageVolume -> bench/results/modes.json
	$(PY) bench/modes.py

bench-operator: setup sim-up ## Operator beside playbooks: apply->Extracted at 3/500 kwok nodes, a node joining, CPU/RSS -> bench/results/operator.json
	$(PY) bench/operator_mode.py $(BENCH_OPERATOR_ARGS)

bench-real-nodes: export GKM_SIM_REAL_NODES ?= 2
bench-real-nodes: setup sim-up ## Real nodes: cache applied -> readable in a pod, extraction Job vs host -> bench/results/real_nodes.json
	$(PY) bench/real_nodes.py

# Only the simulated cluster with its real nodes, the Triton venv and the images: no oras, cosign or Kyverno.
bench-warm-start: export GKM_SIM_REAL_NODES ?= 2
bench-warm-start: sim-up ## Warm start: 56 Triton kernels in a pod on a real node, cold against the distributed cache -> bench/results/warm_start.json
	$(PY) bench/warm_start.py $(BENCH_WARM_START_ARGS)

bench-deploy: setup ## deploy.yml, its no-change re-run and undeploy.yml on a cluster of its own -> bench/results/deploy.json
	$(PY) bench/deploy.py
