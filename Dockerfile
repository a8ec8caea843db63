# The controller image: a static (musl) `karpenter` binary on distroless,
# running as a non-root user. The controller's plugins are not in the image:
# the chart delivers them in ConfigMaps. (The binary embeds the bundled
# providers for `simulate` and `explain` alone, built for wasm32-wasip2.)
#
#   docker build -t karpenter:dev .
#   docker build --build-arg TARGET=aarch64-unknown-linux-musl -t karpenter:dev-arm64 .
FROM docker.io/library/rust:1.95-bookworm AS build
ARG TARGET=x86_64-unknown-linux-musl
RUN apt-get update \
 && apt-get install -y --no-install-recommends musl-tools \
 && rm -rf /var/lib/apt/lists/* \
 && rustup target add "$TARGET" wasm32-wasip2
WORKDIR /src
COPY . .
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --profile dist --locked --target "$TARGET" -p karpenter-host --bin karpenter \
 && cp "target/$TARGET/dist/karpenter" /karpenter

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /karpenter /karpenter
# distroless's nonroot user; the chart's securityContext asks for the same.
USER 65532:65532
ENTRYPOINT ["/karpenter"]
CMD ["controller"]
