# syntax=docker/dockerfile:1
# The image `conch deploy` writes manifests for (--image, default conch:<version>):
#   docker build -t conch:0.1.0 .
#   docker build -t my-models:1 --build-arg MODEL_REPOSITORY=path/in/this/context .
# conch and its pinned dependencies live in the venv /opt/conch, built in the first stage and copied
# whole into the second; the model repository is baked in at /models (default: the bundled examples).
# The server runs as the unprivileged user 10001, with a root filesystem it never writes: the
# manifests mount emptyDirs where it does (docs/deploy.md).
ARG PYTHON_IMAGE=python:3.11.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
COPY pyproject.toml README.md constraints.txt ./
COPY conch ./conch
COPY examples ./examples
COPY docs ./docs
COPY docker/install-conch.sh /usr/local/bin/install-conch
RUN install-conch /opt/conch /src

FROM ${PYTHON_IMAGE} AS runtime
ARG MODEL_REPOSITORY=examples/model_repository
RUN groupadd --system --gid 10001 conch \
 && useradd --system --uid 10001 --gid conch --home-dir /tmp --no-create-home --shell /usr/sbin/nologin conch
COPY --from=build /opt/conch /opt/conch
COPY ${MODEL_REPOSITORY} /models
ENV PATH=/opt/conch/bin:$PATH \
    CONCH_REPOSITORY=/models \
    HOME=/tmp \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
USER 10001:10001
EXPOSE 8000 8001 8002
ENTRYPOINT ["conch"]
CMD ["serve"]
