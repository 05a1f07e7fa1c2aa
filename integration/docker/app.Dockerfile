# The twophase package with its toolchain (Python 3.11, JDK 17, Maven) and its jars and MinIO binary
# pre-fetched, so `make demo` / `make test` inside it need no download.
# Keep the ARG defaults equal to integration/services/versions.py; test_compose.py checks them.
ARG GO_IMAGE=golang:1.26-bookworm
FROM ${GO_IMAGE} AS minio
ARG MINIO_MODULE_VERSION=v0.0.0-20260212201848-7aac2a2c5b7c
RUN CGO_ENABLED=0 go install github.com/minio/minio@${MINIO_MODULE_VERSION}

FROM python:3.11-bookworm
RUN apt-get update \
 && apt-get install -y --no-install-recommends openjdk-17-jdk-headless maven make \
 && rm -rf /var/lib/apt/lists/*
ENV TWOPHASE_CACHE=/opt/twophase-cache \
    VENV=/opt/venv
COPY --from=minio /go/bin/minio /opt/twophase-cache/bin/minio-7aac2a2c5b7c/minio
WORKDIR /src
COPY . /src
# the venv, then Kafka's and Spark's jars resolved once into the image's cache
RUN make venv \
 && /opt/venv/bin/python -c "from twophase.integration.services.kafka import kafka_libs; from twophase.integration.spark import spark_jars; kafka_libs(); spark_jars()"
CMD ["make", "demo"]
