# Multi-stage build: cgo is on for SQLite (mattn/go-sqlite3).
FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=1 go build -trimpath -ldflags "-s -w" -o /out/gateway ./cmd/gateway

FROM debian:bookworm-slim
RUN apt-get update && apt-get install -y --no-install-recommends ca-certificates \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --system --uid 10001 --home-dir /data --shell /usr/sbin/nologin hookgate \
    && mkdir -p /data /etc/hookgate && chown hookgate /data
COPY --from=build /out/gateway /usr/local/bin/gateway
# The shipped config, pointed at the /data volume and listening on all interfaces.
COPY config.yaml /etc/hookgate/config.yaml
RUN sed -i -e 's|^listen: .*|listen: "0.0.0.0:8080"|' -e 's|^data_dir: .*|data_dir: "/data"|' /etc/hookgate/config.yaml
USER hookgate
VOLUME /data
EXPOSE 8080
ENTRYPOINT ["/usr/local/bin/gateway", "-config", "/etc/hookgate/config.yaml"]
