# Kokumi's Cluster manager. Two stages: the first builds the wheel and installs
# it into a virtual environment; the second is the slim base with that
# environment only (no compiler, no pip cache, no sources), run as a non-root
# user. deploy/manager/deployment.yaml runs it with a read-only root
# filesystem and a memory-backed /tmp; the manager writes nothing else at run
# time (client keys go to an anonymous memory file, never to disk).
#
#   buildah bud -t kokumi-clusters:0.1.0 .      # or: podman build / docker build
ARG PYTHON_IMAGE=python:3.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1
WORKDIR /src
COPY pyproject.toml README.md ./
COPY kokumi/ kokumi/
RUN python -m pip wheel --no-deps --wheel-dir /dist . \
 && python -m venv /opt/kokumi \
 && /opt/kokumi/bin/pip install /dist/kokumi_clusters-*.whl \
 && /opt/kokumi/bin/pip uninstall --yes pip setuptools \
 && /opt/kokumi/bin/kokumi manager --help > /dev/null

FROM ${PYTHON_IMAGE}
COPY --from=build /opt/kokumi /opt/kokumi
ENV PATH=/opt/kokumi/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
# The same numeric user as the Deployment's securityContext; it owns nothing in the image.
USER 65532:65532
EXPOSE 8080
ENTRYPOINT ["kokumi"]
CMD ["manager"]
