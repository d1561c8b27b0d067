# syntax=docker/dockerfile:1
# kascade container image: `kascade collect` (audit webhook -> OTLP) and
# `kascade frontend` (Jaeger remote storage over assembled object traces).
#
#   docker build -t kascade:0.1.0 .
#   docker run --rm kascade:0.1.0 --help
#
# The builder is pinned to the toolchain the project is developed and tested
# with (`rustc --version`: 1.95.0); the runtime is Debian slim of the same
# release as the builder (same glibc), with curl only for the health check.
#
# The release workflow (.github/workflows/release.yml) builds the image of
# the released static binaries instead, one per platform, without compiling
# under emulation (target `prebuilt`; dist/linux-amd64/kascade and
# dist/linux-arm64/kascade in the context):
#
#   docker buildx build --target prebuilt --platform linux/amd64,linux/arm64 .

ARG RUST_VERSION=1.95.0
ARG DEBIAN_RELEASE=trixie

FROM rust:${RUST_VERSION}-slim-${DEBIAN_RELEASE} AS builder
# make: the allocator (tikv-jemalloc-sys) builds jemalloc from source.
RUN apt-get update \
    && apt-get install -y --no-install-recommends make \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
# Only what the build reads (build.rs compiles proto/ with protox, no protoc;
# rules/ is built into the binary; Cargo.toml names the benches; cpid/ is the
# workspace member kascade shares its CPID types with).
COPY Cargo.toml Cargo.lock build.rs ./
COPY cpid ./cpid
COPY proto ./proto
COPY rules ./rules
COPY benches ./benches
COPY src ./src
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --profile dist --locked --bin kascade \
    && install -D -m 0755 target/dist/kascade /out/kascade

FROM debian:${DEBIAN_RELEASE}-slim AS runtime-base
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates curl \
    && rm -rf /var/lib/apt/lists/* \
    && groupadd --system --gid 10001 kascade \
    && useradd --system --uid 10001 --gid kascade --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin kascade \
    && install -d -o 10001 -g 10001 -m 0700 /var/lib/kascade/spool
# 8090 audit webhook, 8091 collector admin (/metrics /healthz /readyz),
# 8092 frontend HTTP (/redirect /healthz /readyz), 17271 frontend gRPC (Jaeger remote storage).
EXPOSE 8090 8091 8092 17271
USER 10001:10001
# The health check asks the admin listener of `kascade collect`; for
# `kascade frontend` set HEALTHCHECK_URL=http://127.0.0.1:8092/readyz.
ENV HEALTHCHECK_URL=http://127.0.0.1:8091/readyz
# `kascade collect`'s durable intake; mount a volume here so accepted audit
# batches survive the container.
ENV KASCADE_SPOOL_DIR=/var/lib/kascade/spool
VOLUME /var/lib/kascade/spool
HEALTHCHECK --interval=10s --timeout=3s --start-period=10s --retries=3 \
    CMD curl -fsS -o /dev/null "$HEALTHCHECK_URL" || exit 1
ENTRYPOINT ["/usr/local/bin/kascade"]
CMD ["--help"]

# The released static binary of the platform being built (static: it needs
# nothing of the image's libc).
FROM runtime-base AS prebuilt
ARG TARGETARCH
COPY --chmod=0755 dist/linux-${TARGETARCH}/kascade /usr/local/bin/kascade

# Last, so that a plain `docker build .` (and docker-compose.yml) builds from
# source.
FROM runtime-base AS runtime
COPY --from=builder /out/kascade /usr/local/bin/kascade
