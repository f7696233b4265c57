# segmentstore server image. Data lives in the /data volume; fsync=always by default.
FROM python:3.11-slim
WORKDIR /src
COPY pyproject.toml README.md ./
COPY segmentstore ./segmentstore
COPY client ./client
RUN pip install --no-cache-dir ".[server]" && useradd --system --home /data segmentstore \
    && mkdir -p /data && chown segmentstore /data
USER segmentstore
VOLUME /data
EXPOSE 12345 9091
ENTRYPOINT ["segmentstore", "serve", "--host", "0.0.0.0", "--http-host", "0.0.0.0", "--data-dir", "/data"]
