# Plugins are WebAssembly components built for wasm32-wasip2 with the size-
# optimized `plugin` profile; each lands in target/plugins/<name>.wasm.
PLUGINS := kwok azure nebius
TEST_PLUGINS := misbehave broken
CARGO ?= cargo
WASM_DIR := $(or $(CARGO_TARGET_DIR),target)/wasm32-wasip2/plugin

# The chart's bundled plugins: built into the controller binary, so the chart
# holds only their configuration and NodeClass CRDs.
CHART_PLUGINS := azure nebius
CHART_DIR := charts/karpenter

.PHONY: plugins test-plugins js-plugins py-plugins all test chart-crds

plugins:
	$(CARGO) build --target wasm32-wasip2 --profile plugin $(foreach p,$(PLUGINS),-p karpenter-plugin-$(p))
	@mkdir -p target/plugins
	@for p in $(PLUGINS); do cp $(WASM_DIR)/karpenter_plugin_$$p.wasm target/plugins/$$p.wasm; \
	  printf '%-12s %8d bytes\n' $$p $$(stat -c %s target/plugins/$$p.wasm); done

test-plugins:
	$(CARGO) build --target wasm32-wasip2 --profile plugin $(foreach p,$(TEST_PLUGINS),-p karpenter-plugin-$(p))
	@mkdir -p target/test-plugins
	@for p in $(TEST_PLUGINS); do cp $(WASM_DIR)/karpenter_plugin_$$p.wasm target/test-plugins/$$p.wasm; done

# Providers in other languages: their toolchains install themselves, pinned and
# cached under ~/.cache/karpenter-wasm.
js-plugins:
	examples/plugins/static-inventory/build

py-plugins:
	examples/plugins/inventory/build

all: plugins test-plugins
	$(CARGO) build --release -p karpenter-host

test: plugins test-plugins
	.ci/run

# Regenerates the bundled plugins' NodeClass CRDs in the chart from their
# schemas; host/tests/end_to_end/chart.rs fails when the committed copies differ.
chart-crds: plugins
	@for p in $(CHART_PLUGINS); do \
	  $(CARGO) run -q -p karpenter-host -- plugin crd target/plugins/$$p.wasm > $(CHART_DIR)/crds/plugin-$$p.yaml || exit 1; \
	  echo "$(CHART_DIR)/crds/plugin-$$p.yaml"; done
