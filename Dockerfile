# The Goofy manager image for users with Docker. `make image` builds the same image without a Docker
# engine (hack/tools/imagebuild): a static binary at /manager, run as the non-root user 65532.
ARG GO_VERSION=1.26
FROM golang:${GO_VERSION} AS builder
WORKDIR /workspace
# Dependencies first, so source edits reuse the module download layer.
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG TARGETARCH
# The version the manager reports (--version), as `make build` sets it: docker build --build-arg
# VERSION=$(cat VERSION) --build-arg GIT_COMMIT=$(git rev-parse HEAD) .
ARG VERSION=v0.0.0-dev
ARG GIT_COMMIT=unknown
RUN CGO_ENABLED=0 GOOS=linux GOARCH=${TARGETARCH} go build -trimpath \
      -ldflags "-s -w -X sigs.k8s.io/cluster-api/version.gitVersion=${VERSION} -X sigs.k8s.io/cluster-api/version.gitCommit=${GIT_COMMIT}" \
      -o /manager . \
 && mkdir -p /rootfs/etc /rootfs/tmp /rootfs/home/nonroot \
 && chmod 1777 /rootfs/tmp \
 && printf 'root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n' > /rootfs/etc/passwd \
 && printf 'root:x:0:\nnonroot:x:65532:\n' > /rootfs/etc/group

FROM scratch
ARG VERSION=v0.0.0-dev
ARG GIT_COMMIT=unknown
LABEL org.opencontainers.image.source="https://github.com/goofy-capi/cluster-api-provider-goofy" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${GIT_COMMIT}" \
      org.opencontainers.image.licenses="Apache-2.0"
COPY --from=builder /rootfs/ /
COPY --from=builder --chown=65532:65532 /rootfs/home/nonroot /home/nonroot
COPY --from=builder /etc/ssl/certs/ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
COPY --from=builder /manager /manager
ENV SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt
USER 65532:65532
ENTRYPOINT ["/manager"]
