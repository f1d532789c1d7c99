# Builds gw-proxy and gw-admin. Untested here (no Docker engine on the development machines).
FROM rust:1-bookworm AS build
RUN apt-get update && apt-get install -y --no-install-recommends cmake pkg-config libssl-dev && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
RUN cargo build --release -p gw-proxy -p gw-admin

FROM debian:bookworm-slim
RUN apt-get update && apt-get install -y --no-install-recommends ca-certificates libssl3 && rm -rf /var/lib/apt/lists/*
COPY --from=build /src/target/release/gw-proxy /src/target/release/gw-admin /usr/local/bin/
COPY conf /etc/gw
ENV GW_CONFIG=/etc/gw/gw.toml RUST_LOG=info
EXPOSE 8080 8081 9080
CMD ["gw-proxy"]
