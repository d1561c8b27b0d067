# syntax=docker/dockerfile:1
# Helper image of the docker-compose quickstart: bash, openssl, curl and the
# official kubectl, for the one-shot services that create the credentials
# (init.sh, from e2e/pki.sh like the e2e harness) and prepare the cluster
# (cluster-setup.sh). Not part of kascade itself.
ARG KUBERNETES_VERSION=v1.36.3
FROM registry.k8s.io/kubectl:${KUBERNETES_VERSION} AS kubectl

FROM debian:trixie-slim AS tools
RUN apt-get update \
    && apt-get install -y --no-install-recommends bash ca-certificates curl openssl \
    && rm -rf /var/lib/apt/lists/*
COPY --from=kubectl /bin/kubectl /usr/local/bin/kubectl
