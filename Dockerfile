# Multi-stage build: compile with the full toolchain, run on a slim image as a non-root user.
FROM rust:1.95-slim-bookworm AS build
WORKDIR /src
COPY . .
RUN cargo build --release --locked --bin switchboard

FROM debian:bookworm-slim
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates curl \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --system --uid 10001 --home-dir /data --shell /usr/sbin/nologin switchboard \
 && mkdir -p /data /app \
 && chown switchboard /data
COPY --from=build /src/target/release/switchboard /usr/local/bin/switchboard
COPY config.toml /app/config.toml
COPY skills /app/skills
# The image's config keeps everything under /data and listens on all interfaces.
RUN sed -i \
      -e 's|^data_dir = "data"|data_dir = "/data/store"|' \
      -e 's|^workspace = "workspace"|workspace = "/data/workspace"|' \
      -e 's|^http_listen = "127.0.0.1:8080"|http_listen = "0.0.0.0:8080"|' \
      /app/config.toml
USER switchboard
VOLUME ["/data"]
EXPOSE 8080
ENV SWITCHBOARD_CONFIG=/app/config.toml
HEALTHCHECK --interval=30s --timeout=3s --start-period=5s \
  CMD curl -fsS http://127.0.0.1:8080/healthz || exit 1
ENTRYPOINT ["switchboard"]
CMD ["run"]
