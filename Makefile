# The README's everyday commands, and the spec's local try on Kind: `make kind-spoke`.
# `make help` lists the targets. Every target only calls commands documented in the README; the
# work of kind-spoke is `kokumi cluster add` (docs/cli.md), so that the local try registers a
# cluster exactly as a user at a shell does. Variables are set on the command line:
#   make kind-spoke KIND_SPOKE_NAMESPACE=team-a KIND_SPOKE_APPLY=1

PYTHON ?= python3
KOKUMI ?= $(PYTHON) -m kokumi

# kind-spoke: the namespace of the hub that gets the Secret spoke-kubeconfig (the spec's name).
KIND_SPOKE_NAMESPACE ?= platform
# kind-spoke: the Kind cluster to create, or to reuse when it exists.
KIND_SPOKE_NAME ?= kokumi-spoke
# kind-spoke: the ClusterRole of Kokumi's ServiceAccount kube-system/kokumi on the spoke.
KIND_SPOKE_CLUSTER_ROLE ?= cluster-admin
# kind-spoke: 1 creates the Cluster spoke (owning its Secret) instead of printing it to apply.
KIND_SPOKE_APPLY ?=
# kind-spoke: where the spoke's own admin kubeconfig is kept (0600); the hub's stays as it is.
KIND_SPOKE_KUBECONFIG ?= $(HOME)/.kube/$(KIND_SPOKE_NAME).kubeconfig

.DEFAULT_GOAL := help
.PHONY: help test demo lint kind-spoke

help: ## list the targets and kind-spoke's variables
	@awk 'BEGIN {FS = ":.*## "} /^[a-z-]+:.*## / {printf "  make %-11s %s\n", $$1, $$2}' $(firstword $(MAKEFILE_LIST))
	@echo "kind-spoke's variables (make kind-spoke NAME=VALUE):"
	@echo "  KIND_SPOKE_NAMESPACE=$(KIND_SPOKE_NAMESPACE) KIND_SPOKE_NAME=$(KIND_SPOKE_NAME) KIND_SPOKE_CLUSTER_ROLE=$(KIND_SPOKE_CLUSTER_ROLE)"
	@echo "  KIND_SPOKE_APPLY=$(KIND_SPOKE_APPLY) (1: create the Cluster instead of printing it) KIND_SPOKE_KUBECONFIG=$(KIND_SPOKE_KUBECONFIG)"

test: ## lint, types and the whole suite against real API servers (README: Two commands)
	$(PYTHON) -m pip install nox && $(PYTHON) -m nox -s lint typing tests

demo: ## the manager on a local hub + spoke that it starts itself (README: Two commands)
	$(PYTHON) -m pip install -e '.[test]' && $(PYTHON) -m kokumi demo

lint: ## ruff, import-linter and mypy, without the tests
	$(PYTHON) -m pip install nox && $(PYTHON) -m nox -s lint typing

kind-spoke: ## a Kind cluster as spoke: writes Secret spoke-kubeconfig, prints the Cluster to apply
	@command -v docker >/dev/null || { echo "make kind-spoke needs Docker, which runs Kind's clusters: install Docker Engine or Docker Desktop (https://docs.docker.com/get-docker/)" >&2; exit 1; }
	@docker info >/dev/null 2>&1 || { echo "make kind-spoke needs Docker's engine, and docker info gets no answer from it: start Docker (Docker Desktop, or sudo systemctl start docker)" >&2; exit 1; }
	@command -v kind >/dev/null || { echo "make kind-spoke needs kind: install it (https://kind.sigs.k8s.io/docs/user/quick-start/#installation)" >&2; exit 1; }
	@command -v kubectl >/dev/null || { echo "make kind-spoke needs kubectl: install it (https://kubernetes.io/docs/tasks/tools/)" >&2; exit 1; }
	@$(PYTHON) -c 'import kokumi' 2>/dev/null || { echo "make kind-spoke needs kokumi in $(PYTHON): $(PYTHON) -m pip install -e ." >&2; exit 1; }
	@test "$$(kubectl config current-context 2>/dev/null)" != "kind-$(KIND_SPOKE_NAME)" || { echo "make kind-spoke writes the Secret to the hub, and the current context kind-$(KIND_SPOKE_NAME) is the spoke: switch to the hub first (kubectl config get-contexts; kubectl config use-context HUB)" >&2; exit 1; }
	@mkdir -p "$(dir $(KIND_SPOKE_KUBECONFIG))"
	kind get clusters | grep -qx $(KIND_SPOKE_NAME) || kind create cluster --name $(KIND_SPOKE_NAME) --kubeconfig "$(KIND_SPOKE_KUBECONFIG)"
	umask 077 && kind get kubeconfig --name $(KIND_SPOKE_NAME) > "$(KIND_SPOKE_KUBECONFIG)" && chmod 600 "$(KIND_SPOKE_KUBECONFIG)"
	kubectl get namespace $(KIND_SPOKE_NAMESPACE) >/dev/null 2>&1 || kubectl create namespace $(KIND_SPOKE_NAMESPACE)
	$(KOKUMI) cluster add spoke -n $(KIND_SPOKE_NAMESPACE)$(if $(filter 1 yes true,$(KIND_SPOKE_APPLY)),, --secret-only) \
	  --kubeconfig "$(KIND_SPOKE_KUBECONFIG)" --create-service-account --cluster-role $(KIND_SPOKE_CLUSTER_ROLE) \
	  --server "$$(kind get kubeconfig --internal --name $(KIND_SPOKE_NAME) | sed -n 's/^ *server: *//p')" \
	  --label fleet=edge --label topology.kubernetes.io/region=eu --description 'Spoke cluster'
