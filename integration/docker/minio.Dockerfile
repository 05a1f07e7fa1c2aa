# MinIO built from source at the pinned module version (there are no official MinIO images any more).
# Keep the ARG defaults equal to integration/services/versions.py; test_compose.py checks them.
ARG GO_IMAGE=golang:1.26-bookworm
FROM ${GO_IMAGE} AS build
# The Go module proxy refuses MinIO's last release tag commit (403), so this is the newest commit it
# serves: the archived repository's final commit.
ARG MINIO_MODULE_VERSION=v0.0.0-20260212201848-7aac2a2c5b7c
RUN CGO_ENABLED=0 go install github.com/minio/minio@${MINIO_MODULE_VERSION}

FROM debian:bookworm-slim
COPY --from=build /go/bin/minio /usr/local/bin/minio
ENV MINIO_UPDATE=off
EXPOSE 9000 9001
ENTRYPOINT ["minio", "server", "/data", "--address", ":9000", "--console-address", ":9001"]
