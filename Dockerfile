# segmentstore server image. Data lives in the /data volume; fsync=always by default.
# Docker checks the store with `segmentstore health` (Hello, a write/read round trip on a
# scratch segment, /metrics). Lint: .venv/bin/hadolint Dockerfile (tests/cli runs it).
FROM python:3.11-slim
WORKDIR /src
COPY pyproject.toml README.md ./
COPY segmentstore ./segmentstore
COPY client ./client
# DL3013 (pin versions) means PyPI packages; this installs the project's own source tree.
# hadolint ignore=DL3013
RUN pip install --no-cache-dir ".[server]" \
    && useradd --system --uid 10001 --home /data segmentstore \
    && mkdir -p /data && chown 10001 /data
USER 10001
VOLUME /data
EXPOSE 12345 9091
HEALTHCHECK --interval=15s --timeout=10s --start-period=20s --retries=3 \
    CMD ["segmentstore", "health", "--endpoint", "tcp://127.0.0.1:12345", "--metrics-url", "http://127.0.0.1:9091/metrics", "--timeout", "5"]
ENTRYPOINT ["segmentstore", "serve", "--host", "0.0.0.0", "--http-host", "0.0.0.0", "--data-dir", "/data"]
