"""helm test: a manager answers /readyz, and the chart's test account can list Clusters.

Run by the test pod of templates/tests/manager-answers.yaml, with the Python of the manager's
image and its standard library only. It retries for a minute (RBAC reaches the API server's
authorizer a moment after the binding is written; KOKUMI_TEST_SECONDS says otherwise), then
exits 1 with what it saw.
"""

import json
import os
import ssl
import sys
import time
import urllib.error
import urllib.request

ACCOUNT = os.environ.get("SERVICE_ACCOUNT_DIR", "/var/run/secrets/kubernetes.io/serviceaccount")
API = "https://{}:{}".format(
    os.environ["KUBERNETES_SERVICE_HOST"], os.environ["KUBERNETES_SERVICE_PORT"]
)
READYZ = os.environ["KOKUMI_READYZ_URL"]
CLUSTERS = "/apis/delivery.kokumi.dev/v1alpha1/clusters?limit=500"
SECONDS = float(os.environ.get("KOKUMI_TEST_SECONDS", "60"))


def readyz():
    with urllib.request.urlopen(READYZ, timeout=5) as response:  # noqa: S310 - http, the chart's
        return f"{response.status} {response.read().decode().strip()}"


def clusters():
    with open(os.path.join(ACCOUNT, "token")) as token:
        headers = {"Authorization": "Bearer " + token.read().strip()}
    context = ssl.create_default_context(cafile=os.path.join(ACCOUNT, "ca.crt"))
    request = urllib.request.Request(API + CLUSTERS, headers=headers)  # noqa: S310 - https
    with urllib.request.urlopen(request, timeout=10, context=context) as response:  # noqa: S310
        items = json.load(response)["items"]
    return f"{len(items)} Clusters"


def check(what, attempt):
    deadline = time.monotonic() + SECONDS
    while True:
        try:
            print(f"{what}: {attempt()}", flush=True)
            return True
        except (OSError, urllib.error.URLError, ValueError, KeyError) as exc:
            if time.monotonic() > deadline:
                print(f"{what}: failed: {exc}", flush=True)
                return False
        time.sleep(2)


ok = check("the manager answers " + READYZ, readyz)
ok = check("the test account lists Clusters", clusters) and ok
sys.exit(0 if ok else 1)
