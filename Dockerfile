# convtune: API + worker image. One image, two commands (see docker-compose.yml):
#   convtune serve   — FastAPI app (and, with CONVTUNE_WORKERS>0, an embedded worker)
#   convtune worker  — claims queued jobs and tunes them
FROM python:3.11-slim-bookworm

# gcc links the .so artifacts TVM exports; libgomp is needed by xgboost.
RUN apt-get update \
    && apt-get install -y --no-install-recommends gcc g++ libc6-dev libgomp1 \
    && rm -rf /var/lib/apt/lists/*

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    CONVTUNE_DATA_DIR=/data \
    CONVTUNE_HOST=0.0.0.0 \
    CONVTUNE_PORT=8000

WORKDIR /src
# The dependencies get a layer of their own, built from pyproject.toml alone: a change to the
# code reuses it and reinstalls only convtune itself.
COPY pyproject.toml ./
RUN python -c "import tomllib; print('\n'.join(tomllib.load(open('pyproject.toml', 'rb'))['project']['dependencies']))" > /tmp/requirements.txt \
    && pip install -r /tmp/requirements.txt
COPY setup.py README.md ./
COPY tuner/ tuner/
COPY schedules/ schedules/
COPY db/ db/
COPY service/ service/
RUN pip install --no-deps .

RUN useradd --create-home --uid 1000 convtune && mkdir -p /data && chown convtune /data
USER convtune
VOLUME ["/data"]
EXPOSE 8000

HEALTHCHECK --interval=10s --timeout=3s --start-period=30s \
    CMD python -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8000/healthz')"

CMD ["convtune", "serve"]
