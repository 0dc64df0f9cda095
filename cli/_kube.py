"""The CLI's kubernetes ApiClient: every call bounded in time, and a refusal (401/403) that names the endpoint.

Its own module so that _common, which every subcommand imports, does not import the kubernetes client.
"""

from __future__ import annotations

from typing import Any

from kubernetes.client.api_client import ApiClient
from kubernetes.client.configuration import Configuration
from kubernetes.client.exceptions import ApiException


class KubeApiRefused(ApiException):
    """A 401 or 403 of the Kubernetes API server at `endpoint`; an ApiException still, with its status and body."""

    def __init__(self, error: ApiException, endpoint: str):
        super().__init__(status=error.status, reason=error.reason)
        self.body, self.headers, self.endpoint = error.body, error.headers, endpoint


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
            raise
