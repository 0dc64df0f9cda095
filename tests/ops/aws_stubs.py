"""botocore helpers of the capacity tests."""

from __future__ import annotations

from botocore.stub import Stubber


class PartialStubber(Stubber):
    """A botocore Stubber that answers only when the next queued response is for the operation being called.

    Every other call goes on to moto, so one client can be served by moto for what moto emulates and by recorded
    responses for what it cannot (get-spot-placement-scores, capacity reservations, EC2 service quotas). The queue
    order is still enforced among the stubbed operations. Relies on two private hooks of the pinned botocore.
    """

    def _stubbed(self, model) -> bool:
        return bool(self._queue) and self._queue[0]["operation_name"] == model.name

    def _get_response_handler(self, model, params, context, **kwargs):
        return super()._get_response_handler(model, params, context, **kwargs) if self._stubbed(model) else None

    def _assert_expected_params(self, model, params, context, **kwargs):
        if self._stubbed(model):
            super()._assert_expected_params(model, params, context, **kwargs)
