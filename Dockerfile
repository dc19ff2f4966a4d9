# floodgate's container image, for those with a container engine:
#
#   docker build --build-arg VERSION=$(git describe --tags --always --dirty) \
#     --build-arg REVISION=$(git rev-parse HEAD) -t floodgate .
#
# "make image" assembles the same image without an engine (scripts/image.sh,
# tools/cmd/ociimage); keep the two in step. Inside the image the service
# listens on all interfaces (FLOODGATE_HTTP_ADDR, FLOODGATE_GRPC_ADDR
# below), not on loopback as outside it; probes are the orchestrator's job,
# so there is no HEALTHCHECK: use GET /healthz and /readyz on port 8080.

FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=v0.0.0-docker
ARG REVISION=unknown
ARG DATE=unknown
ARG TARGETOS=linux
ARG TARGETARCH=amd64
RUN CGO_ENABLED=0 GOOS=$TARGETOS GOARCH=$TARGETARCH go build -trimpath -buildvcs=false \
      -ldflags "-s -w -buildid= \
        -X github.com/floodgatehq/floodgate/internal/buildinfo.version=$VERSION \
        -X github.com/floodgatehq/floodgate/internal/buildinfo.revision=$REVISION \
        -X github.com/floodgatehq/floodgate/internal/buildinfo.date=$DATE" \
      -o /out/floodgate ./cmd/floodgate
# The THIRD_PARTY notice of what the binary links, licenses checked.
RUN cd tools && go run ./cmd/thirdparty -modroot .. -o /out/THIRD_PARTY.md /out/floodgate

# distroless/static: CA certificates, /etc/passwd with nonroot (65532), no shell.
FROM gcr.io/distroless/static-debian12:nonroot
ARG VERSION=v0.0.0-docker
ARG REVISION=unknown
LABEL org.opencontainers.image.title="floodgate" \
      org.opencontainers.image.description="Rate limit service: HTTP/JSON API and Envoy's gRPC rate limit API" \
      org.opencontainers.image.version="$VERSION" \
      org.opencontainers.image.revision="$REVISION" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.source="https://github.com/floodgatehq/floodgate"
COPY --from=build /out/floodgate /floodgate
COPY --from=build /src/LICENSE /out/THIRD_PARTY.md /usr/share/doc/floodgate/
ENV FLOODGATE_HTTP_ADDR=0.0.0.0:8080 \
    FLOODGATE_GRPC_ADDR=0.0.0.0:8081
USER 65532:65532
EXPOSE 8080 8081
ENTRYPOINT ["/floodgate"]
CMD ["serve"]
