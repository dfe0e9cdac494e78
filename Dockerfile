# Multi-stage build: cgo is on for SQLite (mattn/go-sqlite3).
#   docker build --build-arg VERSION=v1.2.3 -t hookgate .
FROM golang:1.26-bookworm AS build
# VERSION is stamped into the binary: gateway -version, the start-up log,
# the User-Agent of deliveries and alerts, hookgate_build_info.
ARG VERSION=dev
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=1 go build -trimpath \
    -ldflags "-s -w -X github.com/hookgate/hookgate/app.Version=${VERSION}" \
    -o /out/gateway ./cmd/gateway \
    && /out/gateway -version

FROM debian:bookworm-slim
RUN apt-get update && apt-get install -y --no-install-recommends ca-certificates \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --system --uid 10001 --home-dir /data --shell /usr/sbin/nologin hookgate \
    && mkdir -p /data /etc/hookgate && chown hookgate /data
COPY --from=build /out/gateway /usr/local/bin/gateway
# The image's config listens on 0.0.0.0:8080 and takes its secrets from the
# environment (STRIPE_WEBHOOK_SECRET, HOOKGATE_API_TOKEN): without them the
# gateway refuses to start, naming the variable.
COPY docker/config.yaml /etc/hookgate/config.yaml
USER hookgate
VOLUME /data
EXPOSE 8080
# SIGTERM starts a graceful drain bounded by shutdown_timeout (20s): give
# docker stop more (docker run --stop-timeout 30; compose stop_grace_period).
STOPSIGNAL SIGTERM
# The image has no curl: the binary probes itself (GET /healthz).
HEALTHCHECK --interval=15s --timeout=5s --start-period=30s --retries=3 \
    CMD ["/usr/local/bin/gateway", "healthcheck", "-url", "http://127.0.0.1:8080/healthz", "-timeout", "4s"]
ENTRYPOINT ["/usr/local/bin/gateway", "-config", "/etc/hookgate/config.yaml"]
