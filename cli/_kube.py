"""The CLI's kubernetes ApiClient: every call bounded in time, a refusal (401/403) that names the endpoint, and a
server that is not a Kubernetes API server at all (404 on /api) named as such.

Its own module so that _common, which every subcommand imports, does not import the kubernetes client.
"""

from __future__ import annotations

import json
from typing import Any

from kubernetes.client.api_client import ApiClient
from kubernetes.client.configuration import Configuration
from kubernetes.client.exceptions import ApiException


class KubeApiRefused(ApiException):
    """A 401 or 403 of the Kubernetes API server at `endpoint`; an ApiException still, with its status and body."""

    def __init__(self, error: ApiException, endpoint: str):
        super().__init__(status=error.status, reason=error.reason)
        self.body, self.headers, self.endpoint = error.body, error.headers, endpoint


class NotKubernetesApi(Exception):
    """A 404 from a server that answers 404 on /api too: the kubeconfig's server is not a Kubernetes API server (a
    web server, a proxy's default backend, another port), so "no such object" would point at the wrong cause."""

    def __init__(self, endpoint: str, path: str):
        super().__init__(
            f"the server at {endpoint} does not answer the Kubernetes API (404 Not Found on /api, and on "
            f"{path}): it is not a Kubernetes API server; check the kubeconfig's server address (for EKS: "
            "aws eks update-kubeconfig --name CLUSTER --region REGION)"
        )
        self.endpoint = endpoint


def _kubernetes_status(body: Any) -> bool:
    """Whether a response body is the API server's own Status object (a real 404 of a missing object is one)."""
    try:
        return json.loads(body).get("kind") == "Status"
    except (TypeError, ValueError, AttributeError):
        return False


class BoundedApiClient(ApiClient):
    """An ApiClient whose calls wait at most `timeout_s` to connect and `timeout_s` for the answer (the kubernetes
    client's default is forever). A call that passes its own _request_timeout keeps it, a None in the pair meaning
    unbounded: a followed log passes `(None, None)` and still connects within `timeout_s`, then waits for lines as
    long as the pod runs."""

    configuration: Configuration  # ApiClient.__init__ sets it; the kubernetes stubs declare neither it nor request()

    def __init__(self, configuration: Configuration, *, timeout_s: float):
        super().__init__(configuration=configuration)
        self.timeout_s = timeout_s

    def request(self, *args: Any, **kwargs: Any) -> Any:
        timeout = kwargs.get("_request_timeout")
        if timeout is None:
            kwargs["_request_timeout"] = (self.timeout_s, self.timeout_s)
        elif isinstance(timeout, tuple) and timeout[0] is None:
            kwargs["_request_timeout"] = (self.timeout_s, timeout[1])
        try:
            return super().request(*args, **kwargs)  # pyright: ignore[reportAttributeAccessIssue]  (see above)
        except ApiException as error:
            if error.status in (401, 403):
                raise KubeApiRefused(error, str(self.configuration.host)) from None
            if error.status == 404 and not _kubernetes_status(error.body) and not self._serves_kubernetes_api():
                url = str(args[1] if len(args) > 1 else kwargs.get("url", ""))
                raise NotKubernetesApi(
                    str(self.configuration.host), url.removeprefix(str(self.configuration.host)) or "/"
                ) from None
            raise

    def _serves_kubernetes_api(self) -> bool:
        """Whether the server knows the Kubernetes API's discovery path /api: anything but a 404 (a 401 or 403 of an
        anonymous request included: every API server serves /api, to whom RBAC allows)."""
        try:
            super().request(  # pyright: ignore[reportAttributeAccessIssue]
                "GET",
                f"{self.configuration.host}/api",
                headers={"Accept": "application/json"},
                _request_timeout=(self.timeout_s, self.timeout_s),
            )
        except ApiException as error:
            return error.status != 404
        except Exception:  # noqa: BLE001 - the probe only names a cause; the original 404 stands when it fails
            return True
        return True
